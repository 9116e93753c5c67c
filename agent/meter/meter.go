// Package meter counts what an agent's session spends (model tokens and
// cost, and the priced usage of tools) and enforces the agent's hard caps
// per session, per core job and per day in its DM's time zone (issue 20).
//
// Enforcement lives in the agent, in front of every model call: a [Meter]
// is the llm.Client's Gate, so no call site can forget it (the edge, core
// jobs, compaction and the session summary all go through it). Before a
// call it reserves the call's largest cost (the prompt's estimated tokens
// plus the completion it allows, at the model's prices) in every scope;
// a call that does not fit is refused before anything is sent, and a call
// near a cap is sent with max_tokens set to what it reserved (lowered to
// the room left), so that even the provider cannot bill past the cap. A
// cost cap reserves at the model's prices; without prices the cost is
// known only after the call (the provider's usage.cost), and the cap
// stops the next one. Tools' priced usage is counted after the tool ran,
// for the same reason. The day's spend
// before this session comes from choird (rpc/usage.Baseline, computed from
// the replicated logs), so neither a crash, a restart of choird nor a new
// session resets it.
package meter

import (
	"fmt"
	"sync"
	"time"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc/usage"
)

// DefaultCompletionReserve is the completion reserved for a call that sets
// no max_tokens.
const DefaultCompletionReserve = 16384

// NearCap is how close (in completion tokens) a cap must be for a call
// that sets no max_tokens to be sent with one: then the provider cannot
// bill past the reservation. Farther from every cap, max_tokens is left
// out, as the lanes send it (some providers' models refuse max_tokens, and
// others cap it lower than 16384): no single completion is this long.
const NearCap = 8 * DefaultCompletionReserve

// MinCompletion is the smallest completion a call is made with: a call
// whose cap leaves less room is refused rather than cut to nothing.
const MinCompletion = 256

// WarnPercent is the share of a cap whose crossing notifies the DM once.
const WarnPercent = 80

// Config configures a Meter.
type Config struct {
	// AgentID names the agent in what the user is told.
	AgentID string
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// NotifyFunc tells the DM something (a cap 80% used, a cap lowered
	// below the spend); it is called without the meter's lock held.
	NotifyFunc func(text string)
	// BilledFailureFunc is told of each call that failed after the
	// provider billed it (the meter counted its usage), so that the
	// session logs it and its spend survives the session; it is called
	// without the meter's lock held.
	BilledFailureFunc func(req *llm.Request, u llm.Usage)
}

// Meter is one session's usage meter. It is safe for concurrent use.
type Meter struct {
	cfg Config

	mu      sync.Mutex
	caps    config.Budgets
	loc     *time.Location
	zone    string
	based   bool
	capsSet bool
	session usage.Totals
	jobs    map[string]usage.Totals
	day     string
	today   usage.Totals
	// Reservations of the calls in flight, per scope key.
	held map[string]usage.Totals
	// told holds the notices already given, so each is given once.
	told map[string]bool
	// laneJob is the core job each lane last called the model for.
	laneJob map[string]string
}

// New returns a meter with no caps, counting days in UTC until it gets a
// baseline.
func New(cfg Config) *Meter {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Meter{cfg: cfg, loc: time.UTC, zone: "UTC", jobs: map[string]usage.Totals{},
		held: map[string]usage.Totals{}, told: map[string]bool{}, laneJob: map[string]string{}}
}

// SetBaseline starts the meter from what choird says was spent. Only the
// first baseline counts: later ones (a config reload) were computed from
// a replica that lags the meter, which already counts everything since.
func (m *Meter) SetBaseline(b usage.Baseline) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.based {
		return
	}
	m.based = true
	if b.TimeZone != "" {
		if loc, err := time.LoadLocation(b.TimeZone); err == nil {
			m.loc, m.zone = loc, b.TimeZone
		}
	}
	m.rollLocked()
	if b.Day == m.day {
		m.today = m.today.Add(b.Today)
	}
	m.session = m.session.Add(b.Session)
	for id, t := range b.Jobs {
		m.jobs[id] = m.jobs[id].Add(t)
	}
}

// rollLocked starts a new day when the clock has passed midnight in the
// DM's zone.
func (m *Meter) rollLocked() {
	d := m.cfg.Now().In(m.loc).Format(time.DateOnly)
	if d != m.day {
		m.day, m.today = d, usage.Totals{}
		delete(m.held, "day")
	}
}

// scope is one capped scope of a call.
type scope struct {
	key, name     string // "day", "session", "job:<id>"; day, session, core job
	tokField      string
	costField     string
	tokCap        int64
	costCap       float64
	spent, holdin usage.Totals
}

func (m *Meter) scopesLocked(jobID string) []scope {
	c := m.caps
	out := []scope{
		{key: "session", name: "session", tokField: "total_session_tokens", costField: "session_cost_usd",
			tokCap: c.TotalSessionTokens, costCap: c.SessionCostUSD, spent: m.session},
		{key: "day", name: "day", tokField: "per_day_tokens", costField: "per_day_cost_usd",
			tokCap: c.PerDayTokens, costCap: c.PerDayCostUSD, spent: m.today},
	}
	if jobID != "" {
		out = append(out, scope{key: "job:" + jobID, name: "core job", tokField: "per_job_tokens",
			costField: "per_job_cost_usd", tokCap: c.PerJobTokens, costCap: c.PerJobCostUSD, spent: m.jobs[jobID]})
	}
	for i := range out {
		out[i].holdin = m.held[out[i].key]
	}
	return out
}

// SetCaps applies the agent's caps (its budgets). A cap set at or below
// what its scope already spent is accepted: calls in that scope stop at
// once, and the DM is told.
func (m *Meter) SetCaps(b config.Budgets) {
	m.mu.Lock()
	old := m.caps
	m.caps = b
	m.rollLocked()
	first := !m.capsSet
	m.capsSet = true
	var notes []string
	check := func(key, field string, spent, oldCap, newCap float64, money bool) {
		// The first caps are the session's own, not a change: a call they
		// refuse says so itself.
		if first || newCap <= 0 || spent < newCap || (oldCap > 0 && spent >= oldCap) {
			return
		}
		k := "low:" + key + ":" + field + ":" + m.day
		if m.told[k] {
			return
		}
		m.told[k] = true
		notes = append(notes, fmt.Sprintf("The cap %s of agent %s is now %s, at or below the %s already spent: "+
			"model calls in that scope stop now. %s", field, m.cfg.AgentID, amount(newCap, money), amount(spent, money),
			m.raiseHint(field)))
	}
	check("session", "total_session_tokens", float64(m.session.Tokens), float64(old.TotalSessionTokens), float64(b.TotalSessionTokens), false)
	check("session", "session_cost_usd", m.session.CostUSD, old.SessionCostUSD, b.SessionCostUSD, true)
	check("day", "per_day_tokens", float64(m.today.Tokens), float64(old.PerDayTokens), float64(b.PerDayTokens), false)
	check("day", "per_day_cost_usd", m.today.CostUSD, old.PerDayCostUSD, b.PerDayCostUSD, true)
	m.mu.Unlock()
	m.notify(notes...)
}

func (m *Meter) notify(notes ...string) {
	if m.cfg.NotifyFunc == nil {
		return
	}
	for _, n := range notes {
		m.cfg.NotifyFunc(n)
	}
}

func (m *Meter) raiseHint(field string) string {
	return raiseHint(m.cfg.AgentID, field)
}

// raiseHint says how an admin raises a cap.
func raiseHint(agentID, field string) string {
	return fmt.Sprintf("To raise it, an admin sends /cap %s %s <value> in an admin DM, or runs `choirctl usage cap set %s %s <value>` "+
		"(or sets agents.%s.budgets.%s in config.json and runs `choirctl config apply`); `choirctl usage %s` and /usage show every cap.",
		agentID, field, agentID, field, agentID, field, agentID)
}

func amount(v float64, money bool) string {
	if money {
		return fmt.Sprintf("$%.4f", v)
	}
	return fmt.Sprintf("%d tokens", int64(v))
}
