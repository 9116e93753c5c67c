package spend

import "fmt"

// CapError is a call refused because it does not fit under a day cap:
// nothing was sent. Its message says which cap, what is spent, and how
// to raise it.
type CapError struct {
	AgentID, Service string
	// Host is a host-wide cap (caps.host_*), else the agent's own.
	Host bool
	// Field is the cap's name: the budget's JSON name for an agent cap
	// (per_day_cost_usd), the config path for a host cap
	// (caps.host_per_day_usd).
	Field string
	// Limit is the cap, Spent what is spent and reserved today, Want the
	// worst case of the call refused.
	Limit, Spent, Want float64
	Money              bool
	// Day and TimeZone say which day counted.
	Day, TimeZone string
}

func (e *CapError) Error() string {
	if e.Host {
		return fmt.Sprintf("usage cap: the host-wide day cap %s of %s for all agents together is reached "+
			"(%s spent and reserved on %s, %s; this call could take %s): no more calls to %s until the day ends. %s",
			e.Field, amount(e.Limit, e.Money), amount(e.Spent, e.Money), e.Day, e.TimeZone, amount(e.Want, e.Money),
			e.Service, e.Raise())
	}
	return fmt.Sprintf("usage cap: the day cap %s of %s of agent %s is reached "+
		"(%s spent and reserved on %s, %s; this call could take %s): no more calls to %s until the day ends. %s",
		e.Field, amount(e.Limit, e.Money), e.AgentID, amount(e.Spent, e.Money), e.Day, e.TimeZone, amount(e.Want, e.Money),
		e.Service, e.Raise())
}

// Raise says how an admin raises the cap.
func (e *CapError) Raise() string {
	if e.Host {
		return fmt.Sprintf("To raise it, an admin sets %s in config.json and runs `choirctl config load && choirctl config apply`.", e.Field)
	}
	return fmt.Sprintf("To raise it, an admin sends /cap %s %s <value> in an admin DM, or runs `choirctl usage cap set %s %s <value>` "+
		"(or sets agents.%s.budgets.%s in config.json and runs `choirctl config apply`).",
		e.AgentID, e.Field, e.AgentID, e.Field, e.AgentID, e.Field)
}

// ConfigKey is the cap's key in config.json.
func (e *CapError) ConfigKey() string {
	if e.Host {
		return e.Field
	}
	return fmt.Sprintf("agents.%s.budgets.%s", e.AgentID, e.Field)
}

func amount(v float64, money bool) string {
	if money {
		return fmt.Sprintf("$%.4f", v)
	}
	return fmt.Sprintf("%d tokens", int64(v))
}
