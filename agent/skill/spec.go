package skill

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/strictjson"
)

// Spec is a skill definition, the SkillSpec of spec 10.1.
type Spec struct {
	Name          string           `json:"name"`
	Description   string           `json:"description"`
	InitialState  string           `json:"initial_state"`
	InputSchema   json.RawMessage  `json:"input_schema,omitempty"`
	OutputSchema  json.RawMessage  `json:"output_schema,omitempty"`
	States        map[string]State `json:"states"`
	MaxSteps      int              `json:"max_steps"`
	Interruptible bool             `json:"interruptible"`
}

// State is one phase of a skill.
type State struct {
	// Objective is what the model is asked to achieve in this state.
	Objective string `json:"objective,omitempty"`
	// AllowedTools are the only tools the model may call in this state,
	// besides the transition tool.
	AllowedTools []string `json:"allowed_tools,omitempty"`
	// Transitions are the events the model may propose, and where each
	// leads.
	Transitions []Transition `json:"transitions,omitempty"`
	// Terminal marks an end state: reaching it completes the run.
	Terminal bool `json:"terminal,omitempty"`
}

// Transition is one edge of a skill's state machine.
type Transition struct {
	On string `json:"on"`
	To string `json:"to"`
}

// String renders the edge as "on -> to".
func (t Transition) String() string { return t.On + " -> " + t.To }

// Limits of a skill.
const (
	// MaxStepsLimit is the largest max_steps a skill may declare.
	MaxStepsLimit   = 1000
	maxSkillBytes   = 1 << 20
	maxObjective    = 4096
	maxDescription  = 4096
	maxStates       = 64
	maxTransitions  = 16
	maxAllowedTools = 64
)

var (
	nameRe  = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,63}$`)
	eventRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
)

// Parse decodes a skill file strictly: unknown fields, duplicate keys,
// wrong types and trailing data are errors. It does not validate the state
// machine; [Compile] does.
func Parse(data []byte) (Spec, error) {
	var s Spec
	if err := strictjson.Decode(data, &s, strictjson.Limits{MaxBytes: maxSkillBytes}); err != nil {
		return Spec{}, fmt.Errorf("parse skill: %w", err)
	}
	return s, nil
}

// validate checks every rule of a skill's state machine listed in the
// package documentation, except the schemas, and reports all violations.
func (s *Spec) validate(known func(string) bool) error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }

	if !nameRe.MatchString(s.Name) {
		bad("name %q: want a lowercase name of letters, digits, '_' and '-' (at most 64)", s.Name)
	}
	if d := strings.TrimSpace(s.Description); d == "" || len(s.Description) > maxDescription {
		bad("description: required, at most %d bytes", maxDescription)
	}
	if s.MaxSteps < 1 || s.MaxSteps > MaxStepsLimit {
		bad("max_steps: %d, want 1 to %d", s.MaxSteps, MaxStepsLimit)
	}
	if len(s.States) == 0 {
		bad("states: required")
		return errors.Join(errs...)
	}
	if len(s.States) > maxStates {
		bad("states: %d, at most %d", len(s.States), maxStates)
	}
	initial, ok := s.States[s.InitialState]
	switch {
	case !ok:
		bad("initial_state %q is not a state", s.InitialState)
	case initial.Terminal:
		bad("initial_state %q is terminal: the skill would end before it starts", s.InitialState)
	}

	names := slices.Sorted(maps.Keys(s.States))
	terminals := 0
	for _, name := range names {
		st := s.States[name]
		at := "states." + name
		if !nameRe.MatchString(name) {
			bad("%s: state name %q: want a lowercase name of letters, digits, '_' and '-'", at, name)
		}
		if st.Terminal {
			terminals++
		}
		s.validateState(name, st, known, bad)
	}
	if terminals == 0 {
		bad("states: no terminal state; mark the end state with \"terminal\": true")
	}
	if len(errs) > 0 || !ok {
		// Reachability needs sound edges.
		return errors.Join(errs...)
	}

	reached := s.reachableFrom(s.InitialState)
	for _, name := range names {
		if !reached[name] {
			bad("states.%s: unreachable from initial_state %q", name, s.InitialState)
		}
	}
	canEnd := s.reachingTerminal()
	for _, name := range names {
		if !canEnd[name] {
			bad("states.%s: no terminal state is reachable from it", name)
		}
	}
	return errors.Join(errs...)
}

// validateState checks the rules of one state, named name, reporting each
// violation through bad.
func (s *Spec) validateState(name string, st State, known func(string) bool, bad func(format string, args ...any)) {
	at := "states." + name
	if st.Terminal {
		if len(st.Transitions) > 0 {
			bad("%s: a terminal state has no transitions", at)
		}
		if len(st.AllowedTools) > 0 {
			bad("%s: a terminal state has no allowed_tools", at)
		}
		return
	}
	if o := strings.TrimSpace(st.Objective); o == "" || len(st.Objective) > maxObjective {
		bad("%s.objective: required, at most %d bytes", at, maxObjective)
	}
	if len(st.Transitions) == 0 {
		bad("%s: a non-terminal state needs at least one transition", at)
	}
	if len(st.Transitions) > maxTransitions {
		bad("%s.transitions: %d, at most %d", at, len(st.Transitions), maxTransitions)
	}
	events := map[string]bool{}
	for i, tr := range st.Transitions {
		tat := fmt.Sprintf("%s.transitions[%d]", at, i)
		if !eventRe.MatchString(tr.On) {
			bad("%s.on: event %q: want a lowercase identifier of letters, digits and '_'", tat, tr.On)
		}
		if events[tr.On] {
			bad("%s.on: event %q appears twice in this state", tat, tr.On)
		}
		events[tr.On] = true
		if _, ok := s.States[tr.To]; !ok {
			bad("%s.to: %q is not a state", tat, tr.To)
		}
	}
	if len(st.AllowedTools) > maxAllowedTools {
		bad("%s.allowed_tools: %d, at most %d", at, len(st.AllowedTools), maxAllowedTools)
	}
	seen := map[string]bool{}
	for i, t := range st.AllowedTools {
		tat := fmt.Sprintf("%s.allowed_tools[%d]", at, i)
		switch {
		case t == TransitionToolName:
			bad("%s: %s is implicit in every non-terminal state; do not list it", tat, t)
		case seen[t]:
			bad("%s: %q listed twice", tat, t)
		case !known(t):
			bad("%s: unknown tool %q", tat, t)
		}
		seen[t] = true
	}
}

// reachableFrom returns the states reachable from start, start included.
func (s *Spec) reachableFrom(start string) map[string]bool {
	seen := map[string]bool{start: true}
	queue := []string{start}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, tr := range s.States[cur].Transitions {
			if !seen[tr.To] {
				seen[tr.To] = true
				queue = append(queue, tr.To)
			}
		}
	}
	return seen
}

// reachingTerminal returns the states from which a terminal state is
// reachable, by walking the edges backwards from the terminal states.
func (s *Spec) reachingTerminal() map[string]bool {
	preds := map[string][]string{}
	var queue []string
	ok := map[string]bool{}
	for name, st := range s.States {
		for _, tr := range st.Transitions {
			preds[tr.To] = append(preds[tr.To], name)
		}
		if st.Terminal {
			ok[name] = true
			queue = append(queue, name)
		}
	}
	for len(queue) > 0 {
		cur := queue[0]
		queue = queue[1:]
		for _, p := range preds[cur] {
			if !ok[p] {
				ok[p] = true
				queue = append(queue, p)
			}
		}
	}
	return ok
}

// clone returns a deep copy.
func (s Spec) clone() Spec {
	s.InputSchema = slices.Clone(s.InputSchema)
	s.OutputSchema = slices.Clone(s.OutputSchema)
	states := make(map[string]State, len(s.States))
	for k, st := range s.States {
		st.AllowedTools = slices.Clone(st.AllowedTools)
		st.Transitions = slices.Clone(st.Transitions)
		states[k] = st
	}
	s.States = states
	return s
}

// compileSchemas compiles the optional input and output schemas.
func compileSchemas(s *Spec) (in, out *schema, err error) {
	var errs []error
	if len(s.InputSchema) > 0 {
		sc, err := tool.CompileSchema("skill:"+s.Name+":input", s.InputSchema)
		if err != nil {
			errs = append(errs, fmt.Errorf("input_schema: %w", err))
		}
		in = &schema{name: s.Name + " input", sch: sc}
	}
	if len(s.OutputSchema) > 0 {
		sc, err := tool.CompileSchema("skill:"+s.Name+":output", s.OutputSchema)
		if err != nil {
			errs = append(errs, fmt.Errorf("output_schema: %w", err))
		}
		out = &schema{name: s.Name + " output", sch: sc}
	}
	return in, out, errors.Join(errs...)
}
