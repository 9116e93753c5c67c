package skill

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/choirhq/choir/agent/tool"
)

// Status is where a run stands.
type Status string

// The run statuses.
const (
	StatusRunning   Status = "running"
	StatusCompleted Status = "completed" // a terminal state was reached
	StatusFailed    Status = "failed"    // max_steps, or the retry budget with no error transition
)

// Cause says why a run changed state.
type Cause string

// The causes of a change.
const (
	// CauseProposed: the model proposed the event.
	CauseProposed Cause = "proposed"
	// CauseRetryBudget: the model exhausted the retry budget; the run took
	// its error transition or failed.
	CauseRetryBudget Cause = "retry_budget"
	// CauseMaxSteps: the run hit max_steps and failed.
	CauseMaxSteps Cause = "max_steps"
)

// Change records one state change of a run, for the commit log.
type Change struct {
	Skill string `json:"skill"`
	From  string `json:"from"`
	// To is the new state; equal to From when the run failed in place.
	To string `json:"to"`
	// Event is the transition taken, "" when the run failed without one.
	Event  string `json:"event,omitempty"`
	Cause  Cause  `json:"cause"`
	Step   int    `json:"step"`
	Status Status `json:"status"`
}

// Errors of a run; match with errors.Is.
var (
	// ErrRunOver is returned for a proposal to a run that has ended.
	ErrRunOver = errors.New("skill run has ended")
	// ErrMaxSteps is returned (wrapped in a [*LimitError]) when a proposal
	// would exceed the skill's max_steps; the run has failed.
	ErrMaxSteps = errors.New("skill reached max_steps")
)

// LimitError reports that the run failed at max_steps.
type LimitError struct {
	Change Change
}

func (e *LimitError) Error() string {
	return fmt.Sprintf("skill %s: %v after %d steps in state %s", e.Change.Skill, ErrMaxSteps, e.Change.Step, e.Change.From)
}

func (e *LimitError) Unwrap() error { return ErrMaxSteps }

// Kinds of violation.
const (
	ViolationToolNotAllowed    = "tool_not_allowed"
	ViolationInvalidTransition = "invalid_transition"
	ViolationInvalidInput      = "invalid_transition_input"
	ViolationInvalidOutput     = "invalid_output"
)

// Violation is a rejected proposal (spec 10.2), meant to go back to the
// model as a structured error. AllowedTools and ValidTransitions describe
// what the model may do now: after an escalation, in the new state.
type Violation struct {
	Skill    string `json:"skill"`
	Kind     string `json:"kind"`
	Proposed string `json:"proposed"`
	// State is the run's state now.
	State            string         `json:"state"`
	Message          string         `json:"message"`
	Problems         []tool.Problem `json:"problems,omitempty"`
	AllowedTools     []string       `json:"allowed_tools"`
	ValidTransitions []Transition   `json:"valid_transitions"`
	// RetriesLeft is how many more invalid proposals in a row the run
	// tolerates before its error transition.
	RetriesLeft int `json:"retries_left"`
	// Escalated is the change the run made because this violation
	// exhausted the retry budget: its error transition, or its failure.
	Escalated *Change `json:"escalated,omitempty"`
}

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "skill %s: %s", v.Skill, v.Message)
	if v.Escalated != nil {
		if v.Escalated.Status == StatusFailed {
			b.WriteString("; retry budget exhausted, the skill failed")
		} else {
			fmt.Fprintf(&b, "; retry budget exhausted, took %q to state %s", v.Escalated.Event, v.Escalated.To)
		}
	}
	if v.Escalated == nil || v.Escalated.Status == StatusRunning {
		edges := make([]string, len(v.ValidTransitions))
		for i, t := range v.ValidTransitions {
			edges[i] = t.String()
		}
		fmt.Fprintf(&b, " (state %s allows tools [%s] and transitions [%s])", v.State,
			strings.Join(v.AllowedTools, ", "), strings.Join(edges, ", "))
	}
	return b.String()
}

// errorEvents are the events a run takes, in this order of preference, when
// the retry budget is exhausted. A state with neither fails the run.
var errorEvents = []string{"error", "fail"}

// Run is one active run of a skill in a lane (spec 10.2: one per lane). It
// is safe for concurrent use; its methods serialise.
type Run struct {
	mu          sync.Mutex
	skill       *Skill
	state       string
	steps       int
	retries     int
	retryBudget int
	status      Status
	input       json.RawMessage
	output      json.RawMessage
	local       map[string]json.RawMessage
}

// Start begins a run of the named skill with its input, validated against
// the skill's input_schema when it has one (an empty input means {}).
func (s *Set) Start(name string, input json.RawMessage) (*Run, error) {
	k, ok := s.skills[name]
	if !ok {
		return nil, fmt.Errorf("start skill %q: unknown skill", name)
	}
	if len(input) == 0 {
		input = json.RawMessage(`{}`)
	}
	if k.input != nil {
		if err := k.input.validate(input); err != nil {
			return nil, err
		}
	} else if !json.Valid(input) {
		return nil, fmt.Errorf("start skill %q: input is not valid JSON", name)
	}
	return &Run{
		skill:       k,
		state:       k.spec.InitialState,
		retryBudget: s.retryBudget,
		status:      StatusRunning,
		input:       slices.Clone(input),
		local:       map[string]json.RawMessage{},
	}, nil
}

// Skill returns the skill being run.
func (r *Run) Skill() *Skill { return r.skill }

// State returns the current state.
func (r *Run) State() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// Steps returns how many steps the run has taken.
func (r *Run) Steps() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.steps
}

// Retries returns how many invalid proposals in a row the run has seen.
func (r *Run) Retries() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.retries
}

// Status returns where the run stands.
func (r *Run) Status() Status {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}

// Done reports whether the run has ended.
func (r *Run) Done() bool { return r.Status() != StatusRunning }

// Input returns the run's input.
func (r *Run) Input() json.RawMessage { return slices.Clone(r.input) }

// Output returns the output given with the event that completed the run,
// if any.
func (r *Run) Output() json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.output)
}

// Objective returns the current state's objective ("" once ended).
func (r *Run) Objective() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status != StatusRunning {
		return ""
	}
	return r.skill.spec.States[r.state].Objective
}

// AllowedTools returns the tools the current state allows, besides the
// transition tool (none once ended). Pass them as [tool.Filter.Allow].
func (r *Run) AllowedTools() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.allowedLocked()
}

func (r *Run) allowedLocked() []string {
	if r.status != StatusRunning {
		return []string{}
	}
	out := slices.Clone(r.skill.spec.States[r.state].AllowedTools)
	if out == nil {
		out = []string{}
	}
	return out
}

// ValidTransitions returns the current state's transitions (none once
// ended).
func (r *Run) ValidTransitions() []Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.transitionsLocked()
}

func (r *Run) transitionsLocked() []Transition {
	if r.status != StatusRunning {
		return []Transition{}
	}
	return slices.Clone(r.skill.spec.States[r.state].Transitions)
}

// TransitionTool returns the LLM view of the transition tool for the
// current state: its schema enumerates exactly the state's events. ok is
// false once the run has ended.
func (r *Run) TransitionTool() (view tool.LLMView, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.status != StatusRunning {
		return tool.LLMView{}, false
	}
	v := r.skill.tools[r.state].view
	v.Parameters = slices.Clone(v.Parameters)
	return v, true
}

// StepContext is the structured context of the current step (spec 10.2:
// step context is structured, never free text).
type StepContext struct {
	Skill            string                     `json:"skill"`
	State            string                     `json:"state"`
	Objective        string                     `json:"objective"`
	Step             int                        `json:"step"`
	MaxSteps         int                        `json:"max_steps"`
	AllowedTools     []string                   `json:"allowed_tools"`
	ValidTransitions []Transition               `json:"valid_transitions"`
	Input            json.RawMessage            `json:"input,omitempty"`
	Local            map[string]json.RawMessage `json:"local,omitempty"`
}

// StepContext returns the current step's context for the prompt.
func (r *Run) StepContext() StepContext {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := StepContext{
		Skill:            r.skill.Name(),
		State:            r.state,
		Step:             r.steps,
		MaxSteps:         r.skill.spec.MaxSteps,
		AllowedTools:     r.allowedLocked(),
		ValidTransitions: r.transitionsLocked(),
		Input:            slices.Clone(r.input),
		Local:            cloneLocal(r.local),
	}
	if r.status == StatusRunning {
		c.Objective = r.skill.spec.States[r.state].Objective
	}
	return c
}

// SetLocal stores a value of the run's structured local context under key;
// a nil value deletes the key.
func (r *Run) SetLocal(key string, value json.RawMessage) error {
	if key == "" {
		return errors.New("set skill local: empty key")
	}
	if value != nil && !json.Valid(value) {
		return fmt.Errorf("set skill local %q: value is not valid JSON", key)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if value == nil {
		delete(r.local, key)
		return nil
	}
	r.local[key] = slices.Clone(value)
	return nil
}

// Local returns a copy of the run's local context.
func (r *Run) Local() map[string]json.RawMessage {
	r.mu.Lock()
	defer r.mu.Unlock()
	return cloneLocal(r.local)
}

func cloneLocal(m map[string]json.RawMessage) map[string]json.RawMessage {
	out := make(map[string]json.RawMessage, len(m))
	for k, v := range m {
		out[k] = slices.Clone(v)
	}
	return out
}

// CheckTool enforces the current state's allowlist before a tool call.
// An allowed call counts as a step and resets the retry count. A refused
// one returns a [*Violation]; when it exhausts the retry budget, the run
// takes its error transition (or fails) and the violation says so. At
// max_steps the run fails with a [*LimitError]. The transition tool is not
// checked here: pass its calls to [Run.Transition].
func (r *Run) CheckTool(name string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.activeLocked(); err != nil {
		return err
	}
	if slices.Contains(r.skill.spec.States[r.state].AllowedTools, name) {
		if err := r.stepLocked(); err != nil {
			return err
		}
		r.retries = 0
		return nil
	}
	msg := fmt.Sprintf("tool %s is not allowed in state %s", name, r.state)
	if name == TransitionToolName {
		msg = "call " + TransitionToolName + " through Run.Transition"
	}
	return r.violateLocked(ViolationToolNotAllowed, name, msg, nil)
}

// Propose applies a transition event proposed by the model: it must be one
// of the current state's events. It counts as a step; reaching a terminal
// state completes the run. A skill with an output_schema needs its output
// on the event that ends it: use [Run.Transition] for that.
func (r *Run) Propose(event string) (Change, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proposeLocked(event, nil)
}

// Transition handles a call of the transition tool: input is the call's
// JSON, {"event": "<on>"} plus "output" when the event ends a skill that
// declares an output_schema. Bad input is a violation like a bad event.
func (r *Run) Transition(input json.RawMessage) (Change, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.activeLocked(); err != nil {
		return Change{}, err
	}
	st := r.skill.tools[r.state]
	if err := tool.ValidateInput(TransitionToolName, st.schema, input); err != nil {
		var ie *tool.InputError
		if !errors.As(err, &ie) {
			return Change{}, err
		}
		return Change{}, r.violateLocked(ViolationInvalidInput, string(input), "invalid "+TransitionToolName+" input", ie.Problems)
	}
	var in struct {
		Event  string          `json:"event"`
		Output json.RawMessage `json:"output"`
	}
	if err := json.Unmarshal(input, &in); err != nil {
		return Change{}, fmt.Errorf("decode transition input: %w", err)
	}
	return r.proposeLocked(in.Event, in.Output)
}

func (r *Run) proposeLocked(event string, output json.RawMessage) (Change, error) {
	if err := r.activeLocked(); err != nil {
		return Change{}, err
	}
	var to string
	found := false
	for _, tr := range r.skill.spec.States[r.state].Transitions {
		if tr.On == event {
			to, found = tr.To, true
			break
		}
	}
	if !found {
		return Change{}, r.violateLocked(ViolationInvalidTransition, event,
			fmt.Sprintf("event %q is not a transition of state %s", event, r.state), nil)
	}
	ends := r.skill.spec.States[to].Terminal
	if out := r.skill.output; ends && out != nil {
		if len(output) == 0 {
			return Change{}, r.violateLocked(ViolationInvalidOutput, event,
				fmt.Sprintf("event %q ends the skill and needs its output", event), nil)
		}
		if err := out.validate(output); err != nil {
			var ie *tool.InputError
			if !errors.As(err, &ie) {
				return Change{}, err
			}
			return Change{}, r.violateLocked(ViolationInvalidOutput, event, "the output does not match the skill's output_schema", ie.Problems)
		}
	}
	if err := r.stepLocked(); err != nil {
		return Change{}, err
	}
	c := r.moveLocked(event, to, CauseProposed)
	if ends && len(output) > 0 {
		r.output = slices.Clone(output)
	}
	return c, nil
}

// activeLocked refuses proposals to an ended run.
func (r *Run) activeLocked() error {
	if r.status != StatusRunning {
		return fmt.Errorf("skill %s (%s in state %s): %w", r.skill.Name(), r.status, r.state, ErrRunOver)
	}
	return nil
}

// stepLocked counts one step, or fails the run at max_steps.
func (r *Run) stepLocked() error {
	if r.steps >= r.skill.spec.MaxSteps {
		r.status = StatusFailed
		return &LimitError{Change: Change{
			Skill: r.skill.Name(), From: r.state, To: r.state, Cause: CauseMaxSteps, Step: r.steps, Status: r.status,
		}}
	}
	r.steps++
	return nil
}

// moveLocked moves to a state and resets the retry count.
func (r *Run) moveLocked(event, to string, cause Cause) Change {
	from := r.state
	r.state = to
	r.retries = 0
	if r.skill.spec.States[to].Terminal {
		r.status = StatusCompleted
	}
	return Change{Skill: r.skill.Name(), From: from, To: to, Event: event, Cause: cause, Step: r.steps, Status: r.status}
}

// violateLocked records an invalid proposal and escalates once the retry
// budget is spent: the state's "error" event if it has one, else its
// "fail" event, else the run fails. The escalation is a step too, so
// max_steps bounds a loop of errors.
func (r *Run) violateLocked(kind, proposed, msg string, problems []tool.Problem) error {
	r.retries++
	v := &Violation{Skill: r.skill.Name(), Kind: kind, Proposed: proposed, Message: msg, Problems: problems}
	if r.retries > r.retryBudget {
		c := r.escalateLocked()
		v.Escalated = &c
	}
	v.State = r.state
	v.AllowedTools = r.allowedLocked()
	v.ValidTransitions = r.transitionsLocked()
	v.RetriesLeft = max(r.retryBudget-r.retries, 0)
	return v
}

func (r *Run) escalateLocked() Change {
	for _, ev := range errorEvents {
		for _, tr := range r.skill.spec.States[r.state].Transitions {
			if tr.On != ev {
				continue
			}
			if err := r.stepLocked(); err != nil {
				var le *LimitError
				errors.As(err, &le)
				return le.Change
			}
			return r.moveLocked(ev, tr.To, CauseRetryBudget)
		}
	}
	r.status = StatusFailed
	return Change{Skill: r.skill.Name(), From: r.state, To: r.state, Cause: CauseRetryBudget, Step: r.steps, Status: r.status}
}

// Snapshot is the serialisable state of a run, for working-memory
// snapshots.
type Snapshot struct {
	Skill       string                     `json:"skill"`
	State       string                     `json:"state"`
	Step        int                        `json:"step"`
	Retries     int                        `json:"retries"`
	RetryBudget int                        `json:"retry_budget"`
	Status      Status                     `json:"status"`
	Input       json.RawMessage            `json:"input,omitempty"`
	Output      json.RawMessage            `json:"output,omitempty"`
	Local       map[string]json.RawMessage `json:"local,omitempty"`
}

// Snapshot captures the run.
func (r *Run) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Snapshot{
		Skill:       r.skill.Name(),
		State:       r.state,
		Step:        r.steps,
		Retries:     r.retries,
		RetryBudget: r.retryBudget,
		Status:      r.status,
		Input:       slices.Clone(r.input),
		Output:      slices.Clone(r.output),
		Local:       cloneLocal(r.local),
	}
}

// Restore rebuilds a run from a snapshot, checking it against the skill as
// loaded now (the image may have changed since): the skill and state must
// exist, the counters fit the skill's limits, and the status agree with the
// state.
func (s *Set) Restore(snap Snapshot) (*Run, error) {
	k, ok := s.skills[snap.Skill]
	if !ok {
		return nil, fmt.Errorf("restore skill run: unknown skill %q", snap.Skill)
	}
	st, ok := k.spec.States[snap.State]
	var errs []error
	if !ok {
		errs = append(errs, fmt.Errorf("state %q is not a state of skill %s", snap.State, k.Name()))
	}
	if snap.Step < 0 || snap.Step > k.spec.MaxSteps {
		errs = append(errs, fmt.Errorf("step %d, want 0 to %d", snap.Step, k.spec.MaxSteps))
	}
	if snap.RetryBudget < 0 || snap.Retries < 0 || snap.Retries > snap.RetryBudget {
		errs = append(errs, fmt.Errorf("retries %d with budget %d", snap.Retries, snap.RetryBudget))
	}
	switch snap.Status {
	case StatusRunning:
		if ok && st.Terminal {
			errs = append(errs, fmt.Errorf("status running in terminal state %s", snap.State))
		}
	case StatusCompleted:
		if ok && !st.Terminal {
			errs = append(errs, fmt.Errorf("status completed in non-terminal state %s", snap.State))
		}
	case StatusFailed:
	default:
		errs = append(errs, fmt.Errorf("status %q, want running, completed or failed", snap.Status))
	}
	for key, v := range snap.Local {
		if !json.Valid(v) {
			errs = append(errs, fmt.Errorf("local %q is not valid JSON", key))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("restore skill run of %s: %w", snap.Skill, err)
	}
	local := cloneLocal(snap.Local)
	if local == nil {
		local = map[string]json.RawMessage{}
	}
	return &Run{
		skill:       k,
		state:       snap.State,
		steps:       snap.Step,
		retries:     snap.Retries,
		retryBudget: snap.RetryBudget,
		status:      snap.Status,
		input:       slices.Clone(snap.Input),
		output:      slices.Clone(snap.Output),
		local:       local,
	}, nil
}
