// Package usage is the wire contract of usage accounting (issue 20): the
// generic record of one metered use of a paid service (a model call, text
// spoken, a search query), the totals that caps are checked against, and
// the baseline choird hands a session so that a restart or a new session
// never resets what the agent already spent today.
//
// The records live in the agent's commit log: a model call's in its
// llm_call_committed event, a tool's in its tool_result_committed event
// (under "usage"). The log replicates to choird, whose choir_audit usage
// views total them, with the calls choird's egress gateway metered
// itself (daemon/spend); a log record carrying the spend_key of a call
// the gateway metered is not counted again.
package usage

import (
	"errors"
	"fmt"
	"math"
)

// Kind is what was used.
type Kind string

// The kinds of usage.
const (
	KindLLM    Kind = "llm"
	KindTTS    Kind = "tts"
	KindSearch Kind = "search"
)

// The units of each kind.
const (
	UnitTokens     = "tokens"
	UnitCharacters = "characters"
	UnitQueries    = "queries"
)

// Where a cost came from.
const (
	// CostProvider: the provider reported it (OpenRouter's usage.cost).
	CostProvider = "provider"
	// CostPrices: computed from the prices in config.json.
	CostPrices = "prices"
)

// Record is one metered use. A tool that uses a paid service fills one
// in its result (tool.Result.Usage); the arbiter commits it with the
// result, and the audit views count it.
type Record struct {
	Kind Kind `json:"kind"`
	// Service names the model, TTS provider or search provider used.
	Service string `json:"service"`
	// Units counts what was used, in Unit: tokens, characters or queries.
	Units int64  `json:"units"`
	Unit  string `json:"unit"`
	// CostUSD is the cost in US dollars, zero when unpriced; CostSource
	// says where it came from (CostProvider, CostPrices), empty when
	// unpriced.
	CostUSD    float64 `json:"cost_usd"`
	CostSource string  `json:"cost_source,omitempty"`
	// SpendKey names the use in choird's spend ledger when it went
	// through the egress gateway's service route (the Choir-Spend-Key
	// header the tool sent), so that the usage views count it once.
	SpendKey string `json:"spend_key,omitempty"`
}

// Validate checks the kind, the unit and that nothing is negative.
func (r Record) Validate() error {
	var errs []error
	switch r.Kind {
	case KindLLM, KindTTS, KindSearch:
	default:
		errs = append(errs, fmt.Errorf("usage kind %q, want llm, tts or search", r.Kind))
	}
	switch r.Unit {
	case UnitTokens, UnitCharacters, UnitQueries:
	default:
		errs = append(errs, fmt.Errorf("usage unit %q, want tokens, characters or queries", r.Unit))
	}
	if r.Service == "" {
		errs = append(errs, errors.New("usage names no service"))
	}
	if r.Units < 0 || r.CostUSD < 0 || math.IsNaN(r.CostUSD) || math.IsInf(r.CostUSD, 0) {
		errs = append(errs, fmt.Errorf("usage of %s: negative or invalid units (%d) or cost (%g)", r.Service, r.Units, r.CostUSD))
	}
	return errors.Join(errs...)
}

// Totals are tokens and cost spent in one scope.
type Totals struct {
	Tokens  int64   `json:"tokens"`
	CostUSD float64 `json:"cost_usd"`
}

// Add returns t plus u.
func (t Totals) Add(u Totals) Totals {
	return Totals{Tokens: t.Tokens + u.Tokens, CostUSD: t.CostUSD + u.CostUSD}
}

// Baseline is what an agent had spent, by choird's replica of its logs,
// when a session fetched its configuration: today (in TimeZone), in this
// session (a resumed one), and in each of its core jobs by job ID. The
// agent adds its own spend from there on.
type Baseline struct {
	// TimeZone is the IANA zone of the agent's DM, whose days the day
	// caps count; Day is today there, as 2006-01-02.
	TimeZone string            `json:"time_zone"`
	Day      string            `json:"day"`
	Today    Totals            `json:"today"`
	Session  Totals            `json:"session"`
	Jobs     map[string]Totals `json:"jobs,omitempty"`
}
