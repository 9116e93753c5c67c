package admin

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
)

// The paths of choirctl usage.
const (
	PathAgentUsage     = "/v1/agents/{id}/usage"
	PathAgentUsageDays = "/v1/agents/{id}/usage/{days}"
)

// DefaultUsageDays is how many days of history a usage report shows.
const DefaultUsageDays = 14

// UsageTotals are model tokens and cost in US dollars.
type UsageTotals struct {
	Tokens  int64   `json:"tokens"`
	CostUSD float64 `json:"cost_usd"`
}

// UsageCap is one cap of an agent's budgets against what its scope spent:
// Field is the budget's JSON name (per_day_cost_usd), Scope session,
// core job or day, Limit the cap (tokens or US dollars, per Money).
type UsageCap struct {
	Field   string  `json:"field"`
	Scope   string  `json:"scope"`
	Subject string  `json:"subject,omitempty"` // the job's lane, the session's ID
	Limit   float64 `json:"limit"`
	Spent   float64 `json:"spent"`
	Money   bool    `json:"money"`
	// Percent is Spent of Limit; Stopped says calls in the scope stop.
	Percent float64 `json:"percent"`
	Stopped bool    `json:"stopped"`
}

// UsageDay is one day's spend, in the DM's time zone.
type UsageDay struct {
	Day     string  `json:"day"`
	Tokens  int64   `json:"tokens"`
	CostUSD float64 `json:"cost_usd"`
	Uses    int64   `json:"uses"`
}

// UsageJob is one core job's spend in the latest session.
type UsageJob struct {
	JobID string `json:"job_id"`
	Lane  string `json:"lane"`
	UsageTotals
}

// UsageReport is an agent's current spend against each of its caps and
// its spend per day (choirctl usage, /usage).
type UsageReport struct {
	AgentID  string `json:"agent_id"`
	TimeZone string `json:"time_zone"`
	Today    string `json:"today"`
	// SessionID is the agent's latest session, SessionLive whether it runs.
	SessionID   string      `json:"session_id,omitempty"`
	SessionLive bool        `json:"session_live"`
	Session     UsageTotals `json:"session"`
	TodayTotals UsageTotals `json:"today_totals"`
	Jobs        []UsageJob  `json:"jobs"`
	Caps        []UsageCap  `json:"caps"`
	Days        []UsageDay  `json:"days"`
}

// Usage returns an agent's usage report with days of history (0: the
// default).
func (c *Client) Usage(ctx context.Context, agentID string, days int) (UsageReport, error) {
	path := Fill(PathAgentUsage, agentID)
	if days > 0 {
		path = Fill(PathAgentUsageDays, agentID, strconv.Itoa(days))
	}
	return call[UsageReport](ctx, c, http.MethodGet, path, nil)
}

// Text renders the report for a person: the caps, then the days.
func (r UsageReport) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Usage of %s (today is %s, %s)\n", r.AgentID, r.Today, r.TimeZone)
	live := "last session"
	if r.SessionLive {
		live = "this session"
	}
	fmt.Fprintf(&b, "Today: %d tokens, $%.4f. %s: %d tokens, $%.4f.\n", r.TodayTotals.Tokens, r.TodayTotals.CostUSD,
		strings.ToUpper(live[:1])+live[1:], r.Session.Tokens, r.Session.CostUSD)
	if len(r.Caps) == 0 {
		b.WriteString("No caps set.\n")
	} else {
		b.WriteString("Caps:\n")
		for _, c := range r.Caps {
			state := ""
			if c.Stopped {
				state = "  STOPPED"
			}
			subject := ""
			if c.Subject != "" {
				subject = " " + c.Subject
			}
			fmt.Fprintf(&b, "  %-22s %s%s: %s of %s (%.0f%%)%s\n", c.Field, c.Scope, subject, usageAmount(c.Spent, c.Money),
				usageAmount(c.Limit, c.Money), c.Percent, state)
		}
		fmt.Fprintf(&b, "Raise a cap: choirctl usage cap set %s <field> <value> (or set agents.%s.budgets.<field> "+
			"in config.json, then choirctl config apply).\n", r.AgentID, r.AgentID)
	}
	if len(r.Days) > 0 {
		b.WriteString("Per day:\n")
		for _, d := range r.Days {
			fmt.Fprintf(&b, "  %s  %10d tokens  $%.4f  %d uses\n", d.Day, d.Tokens, d.CostUSD, d.Uses)
		}
	}
	return b.String()
}

func usageAmount(v float64, money bool) string {
	if money {
		return fmt.Sprintf("$%.4f", v)
	}
	return fmt.Sprintf("%d tokens", int64(v))
}

// UsageSlice is what one model (or search or speech service), or one
// lane, spent over a report's days.
type UsageSlice struct {
	// Name is "llm:<model>", "search:<provider>", "tts:<provider>" or
	// "embedding:<model>" by service; a lane ("edge", "core:<job>") by
	// lane.
	Name string `json:"name"`
	UsageTotals
	Uses int64 `json:"uses"`
}

// UsageBreakdown is an agent's spend over its last Days days by service
// and by lane, the costliest first.
type UsageBreakdown struct {
	AgentID   string       `json:"agent_id"`
	Days      int          `json:"days"`
	ByService []UsageSlice `json:"by_service"`
	ByLane    []UsageSlice `json:"by_lane"`
}
