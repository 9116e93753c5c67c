package config

import "math"

// Caps are an agent's hard caps on model tokens and on cost in US dollars
// (issue 20): per session, per core job and per day in the time zone of
// the agent's DM. They are checked before each model call from a
// reservation of the call's largest cost, so a call that could cross a cap
// is not made. Zero means no cap. The session's token cap is
// total_session_tokens.
//
//	"budgets": {"per_day_cost_usd": 5, "per_job_tokens": 400000}
type Caps struct {
	SessionCostUSD float64 `json:"session_cost_usd,omitempty"`
	PerJobTokens   int64   `json:"per_job_tokens,omitempty"`
	PerJobCostUSD  float64 `json:"per_job_cost_usd,omitempty"`
	PerDayTokens   int64   `json:"per_day_tokens,omitempty"`
	PerDayCostUSD  float64 `json:"per_day_cost_usd,omitempty"`
}

// CapFields are the JSON names of the caps, with total_session_tokens, in
// the order commands list them.
var CapFields = []string{"total_session_tokens", "session_cost_usd", "per_job_tokens", "per_job_cost_usd",
	"per_day_tokens", "per_day_cost_usd"}

func (v *validator) caps(p string, c Caps) {
	for _, f := range []struct {
		name  string
		value float64
	}{
		{"session_cost_usd", c.SessionCostUSD}, {"per_job_tokens", float64(c.PerJobTokens)},
		{"per_job_cost_usd", c.PerJobCostUSD}, {"per_day_tokens", float64(c.PerDayTokens)},
		{"per_day_cost_usd", c.PerDayCostUSD},
	} {
		if f.value < 0 || math.IsNaN(f.value) || math.IsInf(f.value, 0) {
			v.add(sub(p, f.name), "must be 0 or more (0 or omitted: no cap), e.g. %s", capExample(f.name))
		}
	}
}

func capExample(name string) string {
	switch name {
	case "per_job_tokens", "per_day_tokens":
		return `"` + name + `": 500000`
	}
	return `"` + name + `": 2.5`
}
