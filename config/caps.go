package config

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

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

// SetCap sets field (one of CapFields) of b to value: a number 0 or more,
// whole for the token caps; 0 removes the cap (total_session_tokens: back
// to its default). The error names what is wrong, with an example.
func (b *Budgets) SetCap(field, value string) error {
	if !slices.Contains(CapFields, field) {
		return fmt.Errorf("field %q: want one of %s", field, strings.Join(CapFields, ", "))
	}
	v, err := strconv.ParseFloat(value, 64)
	money := strings.HasSuffix(field, "_usd")
	if err != nil || v < 0 || math.IsInf(v, 0) || math.IsNaN(v) || (!money && v != math.Trunc(v)) {
		ex := "400000"
		if money {
			ex = "2.5"
		}
		return fmt.Errorf("value %q for %s: want a number 0 or more, e.g. %s", value, field, ex)
	}
	switch field {
	case "total_session_tokens":
		b.TotalSessionTokens = int64(v)
	case "session_cost_usd":
		b.SessionCostUSD = v
	case "per_job_tokens":
		b.PerJobTokens = int64(v)
	case "per_job_cost_usd":
		b.PerJobCostUSD = v
	case "per_day_tokens":
		b.PerDayTokens = int64(v)
	case "per_day_cost_usd":
		b.PerDayCostUSD = v
	}
	return nil
}

// SetAgentCap is [Budgets.SetCap] on agent agentID of the config.json
// text raw, and returns the file to write.
func SetAgentCap(raw []byte, agentID, field, value string) ([]byte, error) {
	cfg, err := Parse(raw)
	if err != nil {
		return nil, err
	}
	a, ok := cfg.Agents[agentID]
	if !ok {
		return nil, fmt.Errorf("unknown agent %q: it is not in config.json", agentID)
	}
	if err := a.Budgets.SetCap(field, value); err != nil {
		return nil, err
	}
	cfg.Agents[agentID] = a
	return cfg.MarshalIndent()
}

// HostCaps are the host-wide day caps (issue 34): what all agents
// together may spend per UTC day on metered calls through choird's
// egress gateway, which reserves each call's worst case against them
// before forwarding it. Zero or omitted means no cap.
//
//	"caps": {"host_per_day_usd": 20, "host_per_day_tokens": 50000000}
type HostCaps struct {
	HostPerDayUSD    float64 `json:"host_per_day_usd,omitempty"`
	HostPerDayTokens int64   `json:"host_per_day_tokens,omitempty"`
}

// HostCapFields are the JSON paths of the host-wide caps, as an
// operator names them.
var HostCapFields = []string{"caps.host_per_day_usd", "caps.host_per_day_tokens"}

func (v *validator) hostCaps(p string, c HostCaps) {
	if c.HostPerDayUSD < 0 || math.IsNaN(c.HostPerDayUSD) || math.IsInf(c.HostPerDayUSD, 0) {
		v.add(sub(p, "host_per_day_usd"), "must be 0 or more (0 or omitted: no cap), e.g. %s", `"host_per_day_usd": 20`)
	}
	if c.HostPerDayTokens < 0 {
		v.add(sub(p, "host_per_day_tokens"), "must be 0 or more (0 or omitted: no cap), e.g. %s", `"host_per_day_tokens": 50000000`)
	}
}
