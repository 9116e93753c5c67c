package workmem

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/choirhq/choir/agent/tool"
)

// ReferenceSummary is a lane's summary of everything folded out of its
// event window (spec 11.3). It changes only by a validated [Delta].
type ReferenceSummary struct {
	Summary            string   `json:"summary"`
	Facts              []Fact   `json:"facts"`
	ReferencedSessions []string `json:"referenced_sessions"`
	ReferencedEvents   []string `json:"referenced_events"`
}

// Fact is one fact the summary keeps, under a key a later delta may
// replace or remove.
type Fact struct {
	Key   string `json:"key"`
	Value string `json:"value"`
	// SourceEvent is the event the fact came from, as the compaction
	// request showed it (an ev id: the first 12 hex digits of its hash).
	SourceEvent string `json:"source_event,omitempty"`
}

// IsZero reports whether the summary is empty, for omitzero.
func (s ReferenceSummary) IsZero() bool {
	return s.Summary == "" && len(s.Facts) == 0 && len(s.ReferencedSessions) == 0 && len(s.ReferencedEvents) == 0
}

// UnmarshalJSON reads the structured summary, or the plain string that
// snapshots held before summaries were structured.
func (s *ReferenceSummary) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '"' {
		var text string
		if err := json.Unmarshal(b, &text); err != nil {
			return err
		}
		*s = ReferenceSummary{Summary: text}
		return nil
	}
	type plain ReferenceSummary
	var p plain
	if err := json.Unmarshal(b, &p); err != nil {
		return err
	}
	*s = ReferenceSummary(p)
	return nil
}

// Render is the summary as a lane's prompt carries it; empty for an empty
// summary.
func (s ReferenceSummary) Render() string {
	if s.IsZero() {
		return ""
	}
	var b strings.Builder
	b.WriteString("Reference summary of earlier events (folded out of your window):\n")
	if s.Summary != "" {
		b.WriteString(s.Summary)
		b.WriteString("\n")
	}
	if len(s.Facts) > 0 {
		b.WriteString("Facts:\n")
		for _, f := range s.Facts {
			fmt.Fprintf(&b, "- %s: %s", f.Key, f.Value)
			if f.SourceEvent != "" {
				fmt.Fprintf(&b, " [ev %s]", f.SourceEvent)
			}
			b.WriteString("\n")
		}
	}
	if len(s.ReferencedEvents) > 0 {
		b.WriteString("Referenced events: " + strings.Join(s.ReferencedEvents, ", ") + "\n")
	}
	if len(s.ReferencedSessions) > 0 {
		b.WriteString("Referenced sessions: " + strings.Join(s.ReferencedSessions, ", ") + "\n")
	}
	return strings.TrimRight(b.String(), "\n")
}

// Delta is a structured change to a [ReferenceSummary] (spec 11.3's
// memory_delta). The compaction model answers with one, wrapped as
// {"memory_delta": {...}}; add_fact and remove_fact take one object or an
// array of them, so that one compaction can keep every fact it folds.
type Delta struct {
	// Mode is "append" (SummaryUpdate is added to the summary) or
	// "overwrite" (it replaces the summary: how a summary near its cap is
	// condensed).
	Mode             string   `json:"mode"`
	SummaryUpdate    string   `json:"summary_update,omitempty"`
	AddReferences    []string `json:"add_references,omitempty"`
	RemoveReferences []string `json:"remove_references,omitempty"`
	AddFact          factList `json:"add_fact,omitempty"`
	RemoveFact       factList `json:"remove_fact,omitempty"`
}

// factList is one fact or an array of facts on the wire, always an array
// in Go.
type factList []Fact

func (l *factList) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '{' {
		var f Fact
		if err := json.Unmarshal(b, &f); err != nil {
			return err
		}
		*l = factList{f}
		return nil
	}
	var fs []Fact
	if err := json.Unmarshal(b, &fs); err != nil {
		return err
	}
	*l = fs
	return nil
}

// Limits of a delta and of the summary it produces.
const (
	maxDeltaBytes = 64 << 10
	maxFacts      = 256
	maxReferences = 256
)

// deltaSchema is the JSON Schema every compaction answer is validated
// against before anything of it is applied.
var deltaSchema = json.RawMessage(`{
  "type": "object",
  "required": ["memory_delta"],
  "additionalProperties": false,
  "properties": {
    "memory_delta": {
      "type": "object",
      "required": ["mode"],
      "additionalProperties": false,
      "properties": {
        "mode": {"enum": ["append", "overwrite"]},
        "summary_update": {"type": "string", "maxLength": 32000},
        "add_references": {"$ref": "#/$defs/refs"},
        "remove_references": {"$ref": "#/$defs/refs"},
        "add_fact": {"oneOf": [{"$ref": "#/$defs/fact"}, {"type": "array", "maxItems": 256, "items": {"$ref": "#/$defs/fact"}}]},
        "remove_fact": {"oneOf": [{"$ref": "#/$defs/key"}, {"type": "array", "maxItems": 256, "items": {"$ref": "#/$defs/key"}}]}
      },
      "if": {"properties": {"mode": {"const": "overwrite"}}},
      "then": {"required": ["summary_update"], "properties": {"summary_update": {"minLength": 1}}}
    }
  },
  "$defs": {
    "refs": {"type": "array", "maxItems": 256, "items": {"type": "string", "minLength": 1, "maxLength": 128}},
    "fact": {
      "type": "object",
      "required": ["key", "value"],
      "additionalProperties": false,
      "properties": {
        "key": {"type": "string", "minLength": 1, "maxLength": 200},
        "value": {"type": "string", "minLength": 1, "maxLength": 4000},
        "source_event": {"type": "string", "maxLength": 128}
      }
    },
    "key": {
      "type": "object",
      "required": ["key"],
      "properties": {"key": {"type": "string", "minLength": 1, "maxLength": 200}}
    }
  }
}`)

// compiledDelta compiles deltaSchema once.
var compiledDelta = sync.OnceValues(func() (*jsonschema.Schema, error) {
	return tool.CompileSchema("memory-delta", deltaSchema)
})

// ErrRejectedDelta marks a compaction answer that was not applied: not a
// JSON object, not a valid memory delta, or a summary that would pass its
// cap. Nothing of it changed the summary.
var ErrRejectedDelta = errors.New("memory delta rejected")

// ParseDelta reads the compaction model's answer: one JSON object
// {"memory_delta": {...}}, optionally in a ```json fence, validated
// against the delta schema.
func ParseDelta(answer string) (Delta, error) {
	raw := strings.TrimSpace(answer)
	if rest, ok := strings.CutPrefix(raw, "```"); ok {
		rest = strings.TrimPrefix(rest, "json")
		raw = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "```"))
	}
	if len(raw) > maxDeltaBytes {
		return Delta{}, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrRejectedDelta, len(raw), maxDeltaBytes)
	}
	sch, err := compiledDelta()
	if err != nil {
		return Delta{}, fmt.Errorf("compile the memory delta schema: %w", err)
	}
	if err := tool.ValidateInput("memory_delta", sch, json.RawMessage(raw)); err != nil {
		return Delta{}, fmt.Errorf("%w: %w", ErrRejectedDelta, err)
	}
	var w struct {
		Delta Delta `json:"memory_delta"`
	}
	if err := json.Unmarshal([]byte(raw), &w); err != nil {
		return Delta{}, fmt.Errorf("%w: %w", ErrRejectedDelta, err)
	}
	return w.Delta, nil
}

// Apply returns the summary with d applied: references and facts removed
// first, then added (a fact whose key is present is replaced), then the
// summary text appended or overwritten. A result whose rendering passes
// capTokens (estimated as [EstimateText] does), or over 256 facts or
// references, is rejected, and s is unchanged either way.
func (s ReferenceSummary) Apply(d Delta, capTokens int64) (ReferenceSummary, error) {
	next := ReferenceSummary{Summary: s.Summary, Facts: slices.Clone(s.Facts),
		ReferencedSessions: slices.Clone(s.ReferencedSessions), ReferencedEvents: slices.Clone(s.ReferencedEvents)}
	for _, r := range d.RemoveReferences {
		next.ReferencedEvents = slices.DeleteFunc(next.ReferencedEvents, func(x string) bool { return x == r })
		next.ReferencedSessions = slices.DeleteFunc(next.ReferencedSessions, func(x string) bool { return x == r })
	}
	for _, r := range d.AddReferences {
		list := &next.ReferencedSessions
		if isEventRef(r) {
			list = &next.ReferencedEvents
		}
		if !slices.Contains(*list, r) {
			*list = append(*list, r)
		}
	}
	for _, f := range d.RemoveFact {
		next.Facts = slices.DeleteFunc(next.Facts, func(x Fact) bool { return x.Key == f.Key })
	}
	for _, f := range d.AddFact {
		if i := slices.IndexFunc(next.Facts, func(x Fact) bool { return x.Key == f.Key }); i >= 0 {
			next.Facts[i] = f
		} else {
			next.Facts = append(next.Facts, f)
		}
	}
	switch update := strings.TrimSpace(d.SummaryUpdate); {
	case d.Mode == "overwrite":
		next.Summary = update
	case update != "" && next.Summary != "":
		next.Summary += "\n" + update
	case update != "":
		next.Summary = update
	}
	switch {
	case len(next.Facts) > maxFacts:
		return s, fmt.Errorf("%w: %d facts, over the limit of %d; remove or merge facts", ErrRejectedDelta, len(next.Facts), maxFacts)
	case len(next.ReferencedEvents)+len(next.ReferencedSessions) > maxReferences:
		return s, fmt.Errorf("%w: over %d references; remove some", ErrRejectedDelta, maxReferences)
	}
	if n := EstimateText(next.Render()); capTokens > 0 && n > capTokens {
		return s, fmt.Errorf("%w: the summary would take about %d tokens, over its cap of %d; condense it with mode overwrite",
			ErrRejectedDelta, n, capTokens)
	}
	return next, nil
}

// isEventRef reports whether a reference names an event (hex digits of
// its hash, at least 8) rather than a session.
func isEventRef(r string) bool {
	r = strings.TrimPrefix(r, "ev-")
	if len(r) < 8 || len(r) > 64 {
		return false
	}
	for _, c := range r {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}
