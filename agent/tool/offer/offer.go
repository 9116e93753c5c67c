// Package offer decides how a lane's model is offered the tools it may
// call, once per session and lane, by an [Injector] from the model's
// context window and the measured size of the schemas ([PlanFor]): direct
// (full schemas) when they fit in [SchemaBudgetPercent] of the window,
// compact (names and one-line descriptions; a rejected input carries the
// real schema) when those fit, else discovery (the choir.tools.search,
// describe, categories and load tools, whose loaded schemas join the tools
// parameter for the rest of the turn). The lanes only ask the turn's
// [Offer] for each call's tools parameter and route the discovery tools to
// it. Every answer is cut to the lane's [tool.Filter]: discovery never
// widens what a lane or a skill state may call.
package offer

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/choirhq/choir/agent/tool"
)

// Mode is how a lane's model is offered the tools it may call: the
// registry decides it once per session and lane, and the lanes only ask an
// [Offer] for the tools parameter of each call.
type Mode string

// The injection modes.
const (
	// ModeAuto lets [Injector] choose from the context window and the
	// measured size of the schemas.
	ModeAuto Mode = ""
	// ModeDirect sends every allowed tool's full schema.
	ModeDirect Mode = "direct"
	// ModeCompact sends names and one-line descriptions; a call is
	// validated against the real schema, and a failure returns the schema
	// with the error.
	ModeCompact Mode = "compact"
	// ModeDiscovery sends only the choir.tools.* discovery tools and the
	// schemas the model has loaded in this turn.
	ModeDiscovery Mode = "discovery"
)

// Valid reports whether m is a mode; empty (auto) counts.
func (m Mode) Valid() bool {
	switch m {
	case ModeAuto, ModeDirect, ModeCompact, ModeDiscovery:
		return true
	}
	return false
}

// SchemaBudgetPercent is the share of a model's context window the tools
// parameter may fill before the registry falls back to a cheaper mode.
const SchemaBudgetPercent = 20

// compactParams is the schema every tool carries in compact mode: any
// object, validated against the real schema when called.
var compactParams = json.RawMessage(`{"type":"object"}`)

// EstimateTokens estimates the tokens the tools parameter costs: one token
// per four bytes of the JSON function definitions, as OpenAI-compatible
// APIs carry them. It is an estimate, the same for every mode, so that
// modes compare fairly.
func EstimateTokens(views []tool.LLMView) int {
	n := 0
	for _, v := range views {
		b, _ := json.Marshal(map[string]any{"type": "function", "function": v})
		n += len(b)
	}
	return (n + 3) / 4
}

// Plan is the injection decision of one lane of a session, recorded in the
// session's events.
type Plan struct {
	Mode Mode `json:"mode"`
	// Forced is set when the agent's configuration chose the mode.
	Forced bool `json:"forced,omitempty"`
	// ContextWindow is the model's window the decision was made for.
	ContextWindow int64 `json:"context_window"`
	// Tools counts the tools the lane may call.
	Tools int `json:"tools"`
	// DirectTokens and CompactTokens are the estimated costs of those
	// tools in direct and compact mode.
	DirectTokens  int `json:"direct_tokens"`
	CompactTokens int `json:"compact_tokens"`
}

// PlanFor decides the mode for the tools of r that f keeps and a model with the given
// context window: direct if the full schemas fit in [SchemaBudgetPercent]
// of the window, compact if the names and one-line descriptions do, else
// discovery. A forced mode other than [ModeAuto] wins.
func PlanFor(r *tool.Registry, f tool.Filter, window int64, forced Mode) Plan {
	views := r.LLMViews(f)
	p := Plan{ContextWindow: window, Tools: len(views), DirectTokens: EstimateTokens(views),
		CompactTokens: EstimateTokens(compactViews(views))}
	budget := int(window * SchemaBudgetPercent / 100)
	switch {
	case forced != ModeAuto:
		p.Mode, p.Forced = forced, true
	case p.DirectTokens <= budget:
		p.Mode = ModeDirect
	case p.CompactTokens <= budget:
		p.Mode = ModeCompact
	default:
		p.Mode = ModeDiscovery
	}
	return p
}

// compactViews strips views to a name and the first line of the
// description, with an open object schema.
func compactViews(views []tool.LLMView) []tool.LLMView {
	out := make([]tool.LLMView, len(views))
	for i, v := range views {
		out[i] = tool.LLMView{Name: v.Name, Description: oneLine(v.Description), Parameters: compactParams}
	}
	return out
}

// oneLine is the first sentence or line of a description, at most 120
// bytes.
func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i]
	}
	if i := strings.Index(s, ". "); i >= 0 {
		s = s[:i+1]
	}
	if len(s) > 120 {
		cut := strings.LastIndexByte(s[:117], ' ')
		if cut < 60 {
			cut = 117
		}
		s = s[:cut] + "..."
	}
	return s
}

// SearchFunc is a semantic tool search (choird's, through
// EXECUTE_HOST_TOOL): tool names best first. An error degrades search to
// keywords alone.
type SearchFunc func(ctx context.Context, query string, limit int) ([]string, error)

// InjectorConfig configures an [Injector].
type InjectorConfig struct {
	// Mode forces a mode; [ModeAuto] lets the registry choose.
	Mode Mode
	// Search is the semantic half of choir.tools.search and of the
	// nearest names offered for an unknown tool; nil: keywords only.
	Search SearchFunc
}

// Injector decides each lane's mode once, at its first turn of the
// session, and makes the per-turn [Offer]s. It is safe for concurrent use.
type Injector struct {
	r     *tool.Registry
	cfg   InjectorConfig
	mu    sync.Mutex
	plans map[tool.Lane]Plan
}

// NewInjector returns the injector of a session over r.
func NewInjector(r *tool.Registry, cfg InjectorConfig) *Injector {
	return &Injector{r: r, cfg: cfg, plans: map[tool.Lane]Plan{}}
}

// Plan returns the lane's plan, deciding it on the first call from the
// tools the lane may call and the model's window. Core jobs get direct or
// compact mode, never discovery.
func (in *Injector) Plan(lane tool.Lane, window int64) Plan {
	in.mu.Lock()
	defer in.mu.Unlock()
	p, ok := in.plans[lane]
	if !ok {
		p = PlanFor(in.r, tool.Filter{Lane: lane}, window, in.cfg.Mode)
		if lane == tool.LaneCore && p.Mode == ModeDiscovery {
			// A core job's prompt is rebuilt from the log at every step,
			// which keeps rejections but not discovery answers: its
			// cheapest mode is compact.
			p.Mode = ModeCompact
		}
		in.plans[lane] = p
	}
	return p
}

// Offer starts a turn of lane: what its model is offered and which
// schemas it has seen are kept until the turn ends.
func (in *Injector) Offer(lane tool.Lane, window int64) *Offer {
	return &Offer{r: in.r, mode: in.Plan(lane, window).Mode, search: in.cfg.Search, shown: map[string]bool{}}
}

// Offer is one turn's view of the tools under a mode: the tools parameter
// of each model call, the discovery tools' answers, and what a rejection
// must tell a model that has not seen a schema. It never widens what a
// lane may call: every answer is cut to the [tool.Filter] of the call. It is
// safe for concurrent use.
type Offer struct {
	r      *tool.Registry
	mode   Mode
	search SearchFunc
	mu     sync.Mutex
	shown  map[string]bool // full schemas the model has been given this turn
}

// Mode returns the turn's mode.
func (o *Offer) Mode() Mode {
	if o == nil {
		return ModeDirect
	}
	return o.mode
}

// Tools returns the tools parameter of one model call under f (estimate
// its cost with [EstimateTokens]). In compact mode a tool whose schema the model was
// given this turn carries it; in discovery mode the discovery tools come
// first, then the schemas loaded this turn.
func (o *Offer) Tools(f tool.Filter) []tool.LLMView {
	views := o.r.LLMViews(f)
	switch o.Mode() {
	case ModeCompact:
		o.mu.Lock()
		for i, v := range views {
			if !o.shown[v.Name] {
				views[i] = compactViews([]tool.LLMView{v})[0]
			}
		}
		o.mu.Unlock()
	case ModeDiscovery:
		out := discoveryViews()
		o.mu.Lock()
		for _, v := range views {
			if o.shown[v.Name] {
				out = append(out, v)
			}
		}
		o.mu.Unlock()
		views = out
	}
	return views
}

// show records that the model has been given name's full schema.
func (o *Offer) show(names ...string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range names {
		o.shown[n] = true
	}
}

// Called records a call of name that the lane passes on to the arbiter: a
// direct call of a tool hidden in discovery mode is routed as if it had
// been discovered, so its schema joins the tools parameter for the rest of
// the turn. The arbiter still decides whether it may run.
func (o *Offer) Called(name string, f tool.Filter) {
	if o.Mode() != ModeDiscovery || !o.allowed(f, name) {
		return
	}
	o.show(name)
}

// allowed reports whether f keeps the tool name.
func (o *Offer) allowed(f tool.Filter, name string) bool {
	for _, v := range o.r.LLMViews(f) {
		if v.Name == name {
			return true
		}
	}
	return false
}

// SchemaUnseen reports whether the model was offered name without its
// schema in this turn, so that a rejection of its input must carry it.
func (o *Offer) SchemaUnseen(name string) bool {
	if o.Mode() == ModeDirect {
		return false
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	return !o.shown[name]
}

// Amend adds to a rejected call's answer what the model lacks to get the
// next call right, and notes what it was given: a schema sent with an
// invalid input joins the tools parameter for the rest of the turn, and an
// unknown tool's answer gains the nearest names the model may call. Other
// answers pass unchanged.
func (o *Offer) Amend(ctx context.Context, f tool.Filter, name, kind string, answer json.RawMessage) json.RawMessage {
	switch kind {
	case "invalid_input":
		if o.Mode() != ModeDirect && o.allowed(f, name) {
			o.show(name)
		}
		return answer
	case "unknown_tool":
	default:
		return answer
	}
	var m map[string]any
	if json.Unmarshal(answer, &m) != nil {
		return answer
	}
	m["nearest_tools"] = o.nearest(ctx, f, name)
	b, err := json.Marshal(m)
	if err != nil {
		return answer
	}
	return b
}
