package meter

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/workmem"
	"github.com/choirhq/choir/rpc/usage"
)

// CapError is a model call refused because a cap is reached: nothing was
// sent. Its message says what stopped and how to raise the cap.
type CapError struct {
	AgentID string
	// Scope is "session", "core job" or "day"; Field the budget's JSON
	// name (per_day_cost_usd).
	Scope, Field string
	Cap, Spent   float64
	Money        bool
	// Day and TimeZone say which day a day cap counted.
	Day, TimeZone string
}

func (e *CapError) Error() string {
	what := fmt.Sprintf("the %s cap %s of %s is reached (%s spent", e.Scope, e.Field, amount(e.Cap, e.Money), amount(e.Spent, e.Money))
	if e.Scope == "day" {
		what += fmt.Sprintf(" on %s, %s", e.Day, e.TimeZone)
	}
	what += ")"
	stop := "no more model calls in this " + e.Scope
	if e.Scope == "day" {
		stop = "no more model calls until the day ends"
	}
	return fmt.Sprintf("usage cap: %s: %s. %s", what, stop, strings.TrimSuffix(raiseHint(e.AgentID, e.Field), "."))
}

// Reserve is the llm.Gate: it reserves req's largest cost in every capped
// scope, lowering req.MaxTokens when a cap leaves less room than the call
// would otherwise take, or refuses the call with a [*CapError].
func (m *Meter) Reserve(_ context.Context, req *llm.Request) (func(*llm.Response), error) {
	prompt := workmem.EstimateTokens(req.Messages...) + workmem.EstimateTools(req.Tools)
	want := req.MaxTokens
	if want <= 0 {
		want = DefaultCompletionReserve
	}
	prices := req.Model.Prices

	m.mu.Lock()
	m.rollLocked()
	day := m.day
	// bound is the most completion any cap leaves room for.
	bound := int64(math.MaxInt64)
	for _, s := range m.scopesLocked(req.JobID) {
		if s.tokCap > 0 {
			room := s.tokCap - s.spent.Tokens - s.holdin.Tokens - prompt
			if room < MinCompletion {
				m.mu.Unlock()
				return nil, m.capError(s, s.tokField, float64(s.tokCap), float64(s.spent.Tokens), false)
			}
			bound = min(bound, room)
		}
		if s.costCap > 0 {
			room := s.costCap - s.spent.CostUSD - s.holdin.CostUSD
			if room <= 0 {
				m.mu.Unlock()
				return nil, m.capError(s, s.costField, s.costCap, s.spent.CostUSD, true)
			}
			// Without prices the cost is known only after the call (the
			// provider's usage.cost): the cap then stops the next call.
			if prices != nil && prices.OutputPerMTok > 0 {
				left := room - prices.Cost(prompt, 0, 0)
				n := int64(left / prices.OutputPerMTok * 1e6)
				if n < MinCompletion {
					m.mu.Unlock()
					return nil, m.capError(s, s.costField, s.costCap, s.spent.CostUSD, true)
				}
				bound = min(bound, n)
			}
		}
	}
	allow := min(want, bound)
	if req.MaxTokens > 0 || bound < NearCap {
		req.MaxTokens = allow
	}
	hold := usage.Totals{Tokens: prompt + allow}
	if prices != nil {
		hold.CostUSD = prices.Cost(prompt, 0, allow)
	}
	if req.Lane != "" {
		m.laneJob[req.Lane] = req.JobID
	}
	keys := m.keys(req.JobID)
	for _, k := range keys {
		m.held[k] = m.held[k].Add(hold)
	}
	m.mu.Unlock()

	return func(res *llm.Response) {
		var used usage.Totals
		if res != nil {
			used = usage.Totals{Tokens: res.Usage.Tokens(), CostUSD: res.Usage.CostUSD}
		}
		m.settle(keys, day, hold, used, req.JobID)
		if res != nil && res.BilledFailure && m.cfg.BilledFailureFunc != nil {
			m.cfg.BilledFailureFunc(req, res.Usage)
		}
	}, nil
}

func (m *Meter) keys(jobID string) []string {
	if jobID == "" {
		return []string{"session", "day"}
	}
	return []string{"session", "day", "job:" + jobID}
}

func (m *Meter) capError(s scope, field string, limit, spent float64, money bool) *CapError {
	return &CapError{AgentID: m.cfg.AgentID, Scope: s.name, Field: field, Cap: limit, Spent: spent, Money: money,
		Day: m.day, TimeZone: m.zone}
}

// settle releases a call's reservation and counts what it used.
func (m *Meter) settle(keys []string, day string, hold, used usage.Totals, jobID string) {
	m.mu.Lock()
	m.rollLocked()
	for _, k := range keys {
		if k == "day" && day != m.day {
			continue // the day rolled over: its reservations went with it
		}
		h := m.held[k]
		m.held[k] = usage.Totals{Tokens: h.Tokens - hold.Tokens, CostUSD: h.CostUSD - hold.CostUSD}
	}
	notes := m.countLocked(jobID, used)
	m.mu.Unlock()
	m.notify(notes...)
}

// Record counts the usage records of a tool's result in lane's scopes
// (the arbiter's UsageFunc; a core lane counts for the job that last
// called the model from it). Tool usage is counted after the call: a tool
// cannot be reserved for, so a cap it crosses stops the next model call.
func (m *Meter) Record(lane string, recs []usage.Record) {
	var used usage.Totals
	for _, r := range recs {
		used.CostUSD += r.CostUSD
		if r.Kind == usage.KindLLM && r.Unit == usage.UnitTokens {
			used.Tokens += r.Units
		}
	}
	m.mu.Lock()
	m.rollLocked()
	notes := m.countLocked(m.laneJob[lane], used)
	m.mu.Unlock()
	m.notify(notes...)
}

// countLocked adds used to the scopes and returns the notices of the caps
// it made cross WarnPercent.
func (m *Meter) countLocked(jobID string, used usage.Totals) []string {
	before := m.scopesLocked(jobID)
	m.session = m.session.Add(used)
	m.today = m.today.Add(used)
	if jobID != "" {
		m.jobs[jobID] = m.jobs[jobID].Add(used)
	}
	after := m.scopesLocked(jobID)
	var notes []string
	for i, s := range after {
		warn := func(field string, was, now, limit float64, money bool) {
			line := limit * WarnPercent / 100
			k := "warn:" + s.key + ":" + field + ":" + m.day
			if limit <= 0 || was >= line || now < line || m.told[k] {
				return
			}
			m.told[k] = true
			in := "this " + s.name
			if s.key == "day" {
				in = fmt.Sprintf("today (%s, %s)", m.day, m.zone)
			}
			notes = append(notes, fmt.Sprintf("Agent %s has used %d%% of its %s cap %s in %s: %s of %s. "+
				"At 100%% its model calls in that scope stop. %s", m.cfg.AgentID, int(now*100/limit+1e-9), s.name, field, in,
				amount(now, money), amount(limit, money), m.raiseHint(field)))
		}
		warn(s.tokField, float64(before[i].spent.Tokens), float64(s.spent.Tokens), float64(s.tokCap), false)
		warn(s.costField, before[i].spent.CostUSD, s.spent.CostUSD, s.costCap, true)
	}
	return notes
}

// Spent returns the session's, today's (and the day) and the job's totals.
func (m *Meter) Spent(jobID string) (session, today usage.Totals, day string, job usage.Totals) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.rollLocked()
	return m.session, m.today, m.day, m.jobs[jobID]
}

var _ llm.Gate = (*Meter)(nil)
