package skill_test

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// known is a small tool registry for validation tests.
func known(name string) bool {
	return slices.Contains([]string{"choir.fs.read", "choir.fs.write", "choir.exec", "choir.memory.query"}, name)
}

// validSkill is a well-formed skill; tests mutate copies of it.
const validSkill = `{
  "name": "build_feature",
  "description": "Implement a feature end-to-end.",
  "initial_state": "understand",
  "states": {
    "understand": {
      "objective": "Clarify and restate the requirement.",
      "allowed_tools": ["choir.memory.query"],
      "transitions": [{"on": "complete", "to": "plan"}]
    },
    "plan": {
      "objective": "Produce an implementation plan.",
      "allowed_tools": ["choir.memory.query"],
      "transitions": [{"on": "complete", "to": "modify"}, {"on": "revise", "to": "understand"}]
    },
    "modify": {
      "objective": "Apply changes to files.",
      "allowed_tools": ["choir.fs.read", "choir.fs.write"],
      "transitions": [{"on": "complete", "to": "validate"}]
    },
    "validate": {
      "objective": "Verify correctness.",
      "allowed_tools": ["choir.fs.read"],
      "transitions": [{"on": "complete", "to": "done"}, {"on": "fail", "to": "modify"}]
    },
    "done": {"terminal": true}
  },
  "max_steps": 20,
  "interruptible": true
}`

// edit returns validSkill with fn applied to its decoded form.
func edit(t *testing.T, fn func(m map[string]any)) string {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(validSkill), &m); err != nil {
		t.Fatal(err)
	}
	fn(m)
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func states(m map[string]any) map[string]any { return m["states"].(map[string]any) }

func state(m map[string]any, name string) map[string]any { return states(m)[name].(map[string]any) }

func compile(t *testing.T, doc string) (*skill.Skill, error) {
	t.Helper()
	spec, err := skill.Parse([]byte(doc))
	if err != nil {
		return nil, err
	}
	return skill.Compile(spec, known)
}

func TestCompileRejects(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		doc  func(t *testing.T) string
		want string
	}{
		{"UnknownField", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { m["owner"] = "me" })
		}, "$.owner: unknown field"},
		{"UnknownStateField", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { state(m, "plan")["tools"] = []any{} })
		}, `$.states.plan.tools: unknown field`},
		{"DuplicateKey", func(*testing.T) string {
			return strings.Replace(validSkill, `"max_steps": 20`, `"max_steps": 20, "max_steps": 5`, 1)
		}, "duplicate key"},
		{"BadName", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { m["name"] = "Build Feature" })
		}, `name "Build Feature"`},
		{"NoDescription", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { m["description"] = "" })
		}, "description: required"},
		{"MaxStepsZero", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { m["max_steps"] = 0 })
		}, "max_steps: 0"},
		{"MaxStepsTooLarge", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { m["max_steps"] = 5000 })
		}, "max_steps: 5000"},
		{"NoStates", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { m["states"] = map[string]any{} })
		}, "states: required"},
		{"InitialStateMissing", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { m["initial_state"] = "start" })
		}, `initial_state "start" is not a state`},
		{"InitialStateTerminal", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { m["initial_state"] = "done" })
		}, `initial_state "done" is terminal`},
		{"TransitionToUnknownState", func(t *testing.T) string {
			return edit(t, func(m map[string]any) {
				state(m, "plan")["transitions"] = []any{map[string]any{"on": "complete", "to": "modfy"}}
			})
		}, `states.plan.transitions[0].to: "modfy" is not a state`},
		{"BadEventName", func(t *testing.T) string {
			return edit(t, func(m map[string]any) {
				state(m, "understand")["transitions"] = []any{map[string]any{"on": "Complete!", "to": "plan"}}
			})
		}, `states.understand.transitions[0].on: event "Complete!"`},
		{"DuplicateEvent", func(t *testing.T) string {
			return edit(t, func(m map[string]any) {
				state(m, "plan")["transitions"] = []any{map[string]any{"on": "complete", "to": "modify"}, map[string]any{"on": "complete", "to": "understand"}}
			})
		}, `event "complete" appears twice`},
		{"NoTerminalState", func(t *testing.T) string {
			return edit(t, func(m map[string]any) {
				state(m, "validate")["transitions"] = []any{map[string]any{"on": "fail", "to": "modify"}}
				delete(states(m), "done")
			})
		}, "no terminal state"},
		{"TerminalWithTransitions", func(t *testing.T) string {
			return edit(t, func(m map[string]any) {
				state(m, "done")["transitions"] = []any{map[string]any{"on": "again", "to": "plan"}}
			})
		}, "states.done: a terminal state has no transitions"},
		{"TerminalWithTools", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { state(m, "done")["allowed_tools"] = []any{"choir.fs.read"} })
		}, "states.done: a terminal state has no allowed_tools"},
		{"NoObjective", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { delete(state(m, "modify"), "objective") })
		}, "states.modify.objective: required"},
		{"NonTerminalWithoutTransitions", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { delete(state(m, "modify"), "transitions") })
		}, "states.modify: a non-terminal state needs at least one transition"},
		{"UnreachableState", func(t *testing.T) string {
			return edit(t, func(m map[string]any) {
				states(m)["orphan"] = map[string]any{"objective": "o", "transitions": []any{map[string]any{"on": "complete", "to": "done"}}}
			})
		}, `states.orphan: unreachable from initial_state "understand"`},
		{"TrapState", func(t *testing.T) string {
			return edit(t, func(m map[string]any) {
				state(m, "plan")["transitions"] = []any{map[string]any{"on": "complete", "to": "modify"}, map[string]any{"on": "stuck", "to": "loop_a"}}
				states(m)["loop_a"] = map[string]any{"objective": "a", "transitions": []any{map[string]any{"on": "next", "to": "loop_b"}}}
				states(m)["loop_b"] = map[string]any{"objective": "b", "transitions": []any{map[string]any{"on": "next", "to": "loop_a"}}}
			})
		}, "states.loop_a: no terminal state is reachable from it"},
		{"UnknownTool", func(t *testing.T) string {
			return edit(t, func(m map[string]any) {
				state(m, "modify")["allowed_tools"] = []any{"choir.fs.read", "choir.fs.delete"}
			})
		}, `states.modify.allowed_tools[1]: unknown tool "choir.fs.delete"`},
		{"DuplicateTool", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { state(m, "modify")["allowed_tools"] = []any{"choir.fs.read", "choir.fs.read"} })
		}, `"choir.fs.read" listed twice`},
		{"TransitionToolListed", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { state(m, "modify")["allowed_tools"] = []any{skill.TransitionToolName} })
		}, "is implicit in every non-terminal state"},
		{"InputSchemaDoesNotCompile", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { m["input_schema"] = map[string]any{"type": "thing"} })
		}, "input_schema: compile schema"},
		{"OutputSchemaReferencesOutside", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { m["output_schema"] = map[string]any{"$ref": "https://example.com/s.json"} })
		}, "output_schema"},
		{"InputSchemaAsPlaceholderString", func(t *testing.T) string {
			return edit(t, func(m map[string]any) { m["input_schema"] = "<JSONSchema>" })
		}, "input_schema"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := compile(t, tt.doc(t))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("got %v, want an error containing %q", err, tt.want)
			}
		})
	}

	t.Run("ValidSkillCompiles", func(t *testing.T) {
		t.Parallel()
		k, err := compile(t, validSkill)
		if err != nil {
			t.Fatal(err)
		}
		if k.Name() != "build_feature" || k.MaxSteps() != 20 || !k.Interruptible() {
			t.Errorf("got %s %d %v", k.Name(), k.MaxSteps(), k.Interruptible())
		}
	})

	t.Run("AllProblemsAtOnce", func(t *testing.T) {
		t.Parallel()
		doc := edit(t, func(m map[string]any) {
			m["max_steps"] = 0
			state(m, "modify")["allowed_tools"] = []any{"nope.tool"}
		})
		_, err := compile(t, doc)
		if err == nil || !strings.Contains(err.Error(), "max_steps") || !strings.Contains(err.Error(), "nope.tool") {
			t.Errorf("got %v", err)
		}
	})

	t.Run("NoRegistry", func(t *testing.T) {
		t.Parallel()
		spec, _ := skill.Parse([]byte(validSkill))
		if _, err := skill.Compile(spec, nil); err == nil {
			t.Error("want an error")
		}
	})
}

func writeSkill(t *testing.T, dir, file, doc string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoad(t *testing.T) {
	t.Parallel()
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}

	t.Run("BuiltinSkillsValidateAgainstTheRegistry", func(t *testing.T) {
		t.Parallel()
		set, err := skill.Load(skill.Config{KnownTool: reg.Has})
		if err != nil {
			t.Fatal(err)
		}
		if got := set.Names(); !slices.Equal(got, []string{"skill-builder", "tool-builder"}) {
			t.Errorf("Names() = %v", got)
		}
		for _, name := range []string{"tool-builder", "skill-builder"} {
			k, _ := set.Get(name)
			if k.Origin() != skill.OriginBuiltin || k.File() != "builtin/"+name+".json" {
				t.Errorf("%s: origin %s file %s", name, k.Origin(), k.File())
			}
		}
		want := []skill.Summary{
			{Name: "skill-builder", Description: "Design and propose a new skill state machine."},
			{Name: "tool-builder", Description: "Design and propose a new tool for the agent."},
		}
		if got := set.Summaries(); !slices.Equal(got, want) {
			t.Errorf("Summaries() = %v", got)
		}
	})

	t.Run("BuiltinSkillsNeedTheProposeTools", func(t *testing.T) {
		t.Parallel()
		_, err := skill.Load(skill.Config{KnownTool: func(n string) bool { return reg.Has(n) && n != tool.NameProposeTool }})
		var fe *skill.FileError
		if !errors.As(err, &fe) || fe.File != "builtin/tool-builder.json" || !strings.Contains(err.Error(), `unknown tool "choir.propose.tool"`) {
			t.Errorf("got %v", err)
		}
	})

	t.Run("FailureNamesTheFile", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeSkill(t, dir, "good.json", validSkill)
		writeSkill(t, dir, "broken.json", `{"name": `)
		writeSkill(t, dir, "trap.json", edit(t, func(m map[string]any) { m["name"] = "trap"; m["initial_state"] = "nowhere" }))
		_, err := skill.Load(skill.Config{GlobalDir: dir, KnownTool: reg.Has})
		for _, want := range []string{filepath.Join(dir, "broken.json"), filepath.Join(dir, "trap.json"), `initial_state "nowhere"`} {
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v lacks %q", err, want)
			}
		}
		if err != nil && strings.Contains(err.Error(), "good.json") {
			t.Errorf("error names a good file: %v", err)
		}
	})

	t.Run("DuplicateNamesInOneDirectory", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		writeSkill(t, dir, "a.json", validSkill)
		writeSkill(t, dir, "b.json", validSkill)
		_, err := skill.Load(skill.Config{AgentDir: dir, KnownTool: reg.Has})
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "b.json")) || !strings.Contains(err.Error(), "already defined by") {
			t.Errorf("got %v", err)
		}
	})

	t.Run("AgentOverridesGlobalOverridesBuiltin", func(t *testing.T) {
		t.Parallel()
		global, agent := t.TempDir(), t.TempDir()
		writeSkill(t, global, "feature.json", validSkill)
		writeSkill(t, agent, "feature.json", edit(t, func(m map[string]any) { m["description"] = "Agent version." }))
		writeSkill(t, global, "tb.json", edit(t, func(m map[string]any) { m["name"] = "tool-builder"; m["description"] = "Global tool builder." }))
		writeSkill(t, global, "README.md", "not a skill")
		set, err := skill.Load(skill.Config{GlobalDir: global, AgentDir: agent, KnownTool: reg.Has})
		if err != nil {
			t.Fatal(err)
		}
		k, _ := set.Get("build_feature")
		if k.Description() != "Agent version." || k.Origin() != skill.OriginAgent {
			t.Errorf("build_feature: %q from %s", k.Description(), k.Origin())
		}
		tb, _ := set.Get("tool-builder")
		if tb.Description() != "Global tool builder." || tb.Origin() != skill.OriginGlobal || tb.File() != filepath.Join(global, "tb.json") {
			t.Errorf("tool-builder: %q from %s", tb.Description(), tb.Origin())
		}
	})

	t.Run("MissingDirectoriesHoldNoSkills", func(t *testing.T) {
		t.Parallel()
		set, err := skill.Load(skill.Config{GlobalDir: "/nonexistent/skills", AgentDir: filepath.Join(t.TempDir(), "x"), KnownTool: reg.Has})
		if err != nil || len(set.Names()) != 2 {
			t.Errorf("got %v %v", set, err)
		}
	})

	t.Run("ConfigErrors", func(t *testing.T) {
		t.Parallel()
		if _, err := skill.Load(skill.Config{}); err == nil {
			t.Error("no KnownTool: want an error")
		}
		if _, err := skill.Load(skill.Config{KnownTool: reg.Has, RetryBudget: -1}); err == nil {
			t.Error("negative retry budget: want an error")
		}
	})
}

// loadSet loads the built-ins and the given extra skills (file name to
// document) against the built-in tool registry.
func loadSet(t *testing.T, budget int, docs ...string) (*skill.Set, *tool.Registry) {
	t.Helper()
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i, d := range docs {
		writeSkill(t, dir, "s"+string(rune('a'+i))+".json", d)
	}
	set, err := skill.Load(skill.Config{GlobalDir: dir, KnownTool: reg.Has, RetryBudget: budget})
	if err != nil {
		t.Fatal(err)
	}
	return set, reg
}

// transitionEvents decodes the event enum of a transition tool view.
func transitionEvents(t *testing.T, v tool.LLMView) []string {
	t.Helper()
	var p struct {
		Properties struct {
			Event struct {
				Enum []string `json:"enum"`
			} `json:"event"`
		} `json:"properties"`
		AdditionalProperties bool `json:"additionalProperties"`
	}
	if err := json.Unmarshal(v.Parameters, &p); err != nil {
		t.Fatal(err)
	}
	return p.Properties.Event.Enum
}

func TestWalkToolBuilder(t *testing.T) {
	t.Parallel()
	set, reg := loadSet(t, 0)
	run, err := set.Start("tool-builder", nil)
	if err != nil {
		t.Fatal(err)
	}
	type step struct {
		state  string
		tools  []string
		events []string
		call   string // an allowed tool to call first
		event  string
	}
	walk := []step{
		{"understand", []string{"choir.memory.query", "choir.fs.read"}, []string{"complete"}, "choir.fs.read", "complete"},
		{"design", []string{"choir.memory.query"}, []string{"complete", "revise"}, "choir.memory.query", "complete"},
		{"validate", []string{"choir.memory.query"}, []string{"complete", "fail"}, "", "complete"},
		{"propose", []string{"choir.propose.tool"}, []string{"complete"}, "choir.propose.tool", "complete"},
	}
	steps := 0
	for _, s := range walk {
		if run.State() != s.state || run.Status() != skill.StatusRunning {
			t.Fatalf("in %s (%s), want %s", run.State(), run.Status(), s.state)
		}
		k, _ := set.Get("tool-builder")
		if run.Objective() != k.Spec().States[s.state].Objective || run.Objective() == "" {
			t.Errorf("%s: objective %q", s.state, run.Objective())
		}
		if got := run.AllowedTools(); !slices.Equal(got, s.tools) {
			t.Errorf("%s: allowed tools %v, want %v", s.state, got, s.tools)
		}
		// The model is offered exactly the allowed tools and the
		// transition tool, whose schema enumerates this state's events.
		views := reg.LLMViews(tool.Filter{Lane: tool.LaneCore, Allow: run.AllowedTools()})
		if len(views) != len(s.tools) {
			t.Errorf("%s: %d tool views for %v", s.state, len(views), s.tools)
		}
		tv, ok := run.TransitionTool()
		if !ok || tv.Name != skill.TransitionToolName || !slices.Equal(transitionEvents(t, tv), s.events) {
			t.Errorf("%s: transition tool %v %s", s.state, ok, tv.Parameters)
		}
		if s.call != "" {
			if err := run.CheckTool(s.call); err != nil {
				t.Fatalf("%s: CheckTool(%s): %v", s.state, s.call, err)
			}
			steps++
		}
		c, err := run.Transition(json.RawMessage(`{"event": "` + s.event + `"}`))
		if err != nil {
			t.Fatalf("%s: Transition: %v", s.state, err)
		}
		steps++
		if c.From != s.state || c.Event != s.event || c.Cause != skill.CauseProposed || c.Step != steps || c.Skill != "tool-builder" {
			t.Errorf("change %+v", c)
		}
	}
	if run.State() != "done" || run.Status() != skill.StatusCompleted || !run.Done() || run.Steps() != steps {
		t.Errorf("ended in %s (%s) after %d steps", run.State(), run.Status(), run.Steps())
	}
	if _, ok := run.TransitionTool(); ok || len(run.AllowedTools()) != 0 || run.Objective() != "" {
		t.Error("an ended run still offers tools")
	}
	if _, err := run.Propose("complete"); !errors.Is(err, skill.ErrRunOver) {
		t.Errorf("Propose after the end: %v", err)
	}
	if err := run.CheckTool("choir.fs.read"); !errors.Is(err, skill.ErrRunOver) {
		t.Errorf("CheckTool after the end: %v", err)
	}
}

func TestViolations(t *testing.T) {
	t.Parallel()
	withError := edit(t, func(m map[string]any) {
		m["name"] = "with_error"
		state(m, "validate")["transitions"] = []any{
			map[string]any{"on": "complete", "to": "done"},
			map[string]any{"on": "fail", "to": "modify"},
			map[string]any{"on": "error", "to": "aborted"},
		}
		states(m)["aborted"] = map[string]any{"terminal": true}
	})
	set, _ := loadSet(t, 0, validSkill, withError)

	// to moves a new run of the skill to the given state.
	to := func(t *testing.T, name string, events ...string) *skill.Run {
		t.Helper()
		run, err := set.Start(name, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range events {
			if _, err := run.Propose(ev); err != nil {
				t.Fatal(err)
			}
		}
		return run
	}

	t.Run("ForbiddenToolListsWhatIsAllowed", func(t *testing.T) {
		t.Parallel()
		run := to(t, "build_feature")
		err := run.CheckTool("choir.exec")
		var v *skill.Violation
		if !errors.As(err, &v) {
			t.Fatalf("got %v", err)
		}
		if v.Kind != skill.ViolationToolNotAllowed || v.Proposed != "choir.exec" || v.State != "understand" ||
			!slices.Equal(v.AllowedTools, []string{"choir.memory.query"}) ||
			!slices.Equal(v.ValidTransitions, []skill.Transition{{On: "complete", To: "plan"}}) || v.RetriesLeft != 1 || v.Escalated != nil {
			t.Errorf("violation %+v", v)
		}
		if !strings.Contains(err.Error(), "allows tools [choir.memory.query] and transitions [complete -> plan]") {
			t.Errorf("message %q", err)
		}
		if b, _ := json.Marshal(v); !strings.Contains(string(b), `"allowed_tools":["choir.memory.query"]`) {
			t.Errorf("JSON %s", b)
		}
		if run.Steps() != 0 {
			t.Errorf("a refused proposal counted a step")
		}
	})

	t.Run("InvalidTransition", func(t *testing.T) {
		t.Parallel()
		run := to(t, "build_feature")
		_, err := run.Propose("finish")
		var v *skill.Violation
		if !errors.As(err, &v) || v.Kind != skill.ViolationInvalidTransition || run.State() != "understand" {
			t.Fatalf("got %v", err)
		}
		// Jumping to a state that exists but is not an edge is refused.
		if _, err := run.Transition(json.RawMessage(`{"event": "revise"}`)); !errors.As(err, &v) {
			t.Errorf("got %v", err)
		}
	})

	t.Run("InvalidTransitionInput", func(t *testing.T) {
		t.Parallel()
		for _, input := range []string{`{"event": "complete", "to": "done"}`, `{}`, `{"event": 3}`, `not json`} {
			run := to(t, "build_feature")
			_, err := run.Transition(json.RawMessage(input))
			var v *skill.Violation
			if !errors.As(err, &v) || v.Kind != skill.ViolationInvalidInput || len(v.Problems) == 0 {
				t.Errorf("%s: got %v", input, err)
			}
		}
	})

	t.Run("AcceptedProposalResetsRetries", func(t *testing.T) {
		t.Parallel()
		run := to(t, "build_feature")
		_ = run.CheckTool("choir.exec")
		_ = run.CheckTool("choir.exec")
		if run.Retries() != 2 {
			t.Fatalf("retries %d", run.Retries())
		}
		if err := run.CheckTool("choir.memory.query"); err != nil {
			t.Fatal(err)
		}
		if run.Retries() != 0 || run.Steps() != 1 {
			t.Errorf("retries %d steps %d", run.Retries(), run.Steps())
		}
		var v *skill.Violation
		if err := run.CheckTool("choir.exec"); !errors.As(err, &v) || v.Escalated != nil {
			t.Errorf("got %v", err)
		}
	})

	t.Run("BudgetExhaustedWithoutErrorTransitionFails", func(t *testing.T) {
		t.Parallel()
		run := to(t, "build_feature")
		for i := range 2 {
			var v *skill.Violation
			if err := run.CheckTool("choir.exec"); !errors.As(err, &v) || v.RetriesLeft != 1-i {
				t.Fatalf("violation %d: %v", i, err)
			}
		}
		err := run.CheckTool("choir.exec")
		var v *skill.Violation
		if !errors.As(err, &v) || v.Escalated == nil || v.Escalated.Status != skill.StatusFailed || v.Escalated.Cause != skill.CauseRetryBudget {
			t.Fatalf("got %v", err)
		}
		if run.Status() != skill.StatusFailed || !strings.Contains(err.Error(), "the skill failed") {
			t.Errorf("status %s, message %q", run.Status(), err)
		}
		if err := run.CheckTool("choir.memory.query"); !errors.Is(err, skill.ErrRunOver) {
			t.Errorf("after failure: %v", err)
		}
	})

	t.Run("BudgetExhaustedTakesFailTransition", func(t *testing.T) {
		t.Parallel()
		run := to(t, "build_feature", "complete", "complete", "complete") // validate
		steps := run.Steps()
		var err error
		for range 3 {
			_, err = run.Propose("skip")
		}
		var v *skill.Violation
		if !errors.As(err, &v) || v.Escalated == nil {
			t.Fatalf("got %v", err)
		}
		want := skill.Change{Skill: "build_feature", From: "validate", To: "modify", Event: "fail", Cause: skill.CauseRetryBudget, Step: steps + 1, Status: skill.StatusRunning}
		if *v.Escalated != want {
			t.Errorf("escalated %+v, want %+v", *v.Escalated, want)
		}
		// The violation tells the model where it is now.
		if v.State != "modify" || !slices.Equal(v.AllowedTools, []string{"choir.fs.read", "choir.fs.write"}) || v.RetriesLeft != 2 {
			t.Errorf("violation %+v", v)
		}
		if run.State() != "modify" || run.Retries() != 0 || run.Steps() != steps+1 {
			t.Errorf("state %s retries %d steps %d", run.State(), run.Retries(), run.Steps())
		}
	})

	t.Run("ErrorEventPreferredOverFail", func(t *testing.T) {
		t.Parallel()
		run := to(t, "with_error", "complete", "complete", "complete")
		var err error
		for range 3 {
			err = run.CheckTool("choir.exec")
		}
		var v *skill.Violation
		if !errors.As(err, &v) || v.Escalated == nil || v.Escalated.Event != "error" || v.Escalated.To != "aborted" {
			t.Fatalf("got %v", err)
		}
		if run.Status() != skill.StatusCompleted || run.State() != "aborted" {
			t.Errorf("status %s state %s", run.Status(), run.State())
		}
	})

	t.Run("ConfiguredBudget", func(t *testing.T) {
		t.Parallel()
		strict, _ := loadSet(t, 1, validSkill)
		run, _ := strict.Start("build_feature", nil)
		_ = run.CheckTool("choir.exec")
		if err := run.CheckTool("choir.exec"); run.Status() != skill.StatusFailed {
			t.Errorf("budget 1: second violation gave %v, status %s", err, run.Status())
		}
	})

	t.Run("TransitionToolIsNotCheckedAsATool", func(t *testing.T) {
		t.Parallel()
		run := to(t, "build_feature")
		var v *skill.Violation
		if err := run.CheckTool(skill.TransitionToolName); !errors.As(err, &v) || !strings.Contains(v.Message, "Run.Transition") {
			t.Errorf("got %v", err)
		}
	})
}

func TestMaxSteps(t *testing.T) {
	t.Parallel()
	short := edit(t, func(m map[string]any) { m["name"] = "short"; m["max_steps"] = 3 })
	set, _ := loadSet(t, 0, short)

	t.Run("ToolCallsCount", func(t *testing.T) {
		t.Parallel()
		run, _ := set.Start("short", nil)
		for i := range 3 {
			if err := run.CheckTool("choir.memory.query"); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		err := run.CheckTool("choir.memory.query")
		var le *skill.LimitError
		if !errors.As(err, &le) || !errors.Is(err, skill.ErrMaxSteps) || le.Change.Step != 3 || le.Change.Cause != skill.CauseMaxSteps {
			t.Fatalf("got %v", err)
		}
		if run.Status() != skill.StatusFailed || run.State() != "understand" {
			t.Errorf("status %s state %s", run.Status(), run.State())
		}
	})

	t.Run("TransitionsCount", func(t *testing.T) {
		t.Parallel()
		run, _ := set.Start("short", nil)
		for _, ev := range []string{"complete", "revise", "complete"} {
			if _, err := run.Propose(ev); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := run.Propose("complete"); !errors.Is(err, skill.ErrMaxSteps) {
			t.Errorf("got %v", err)
		}
	})

	t.Run("ErrorTransitionsCountToo", func(t *testing.T) {
		t.Parallel()
		run, _ := set.Start("short", nil)
		for _, ev := range []string{"complete", "complete", "complete"} { // validate, at the limit
			if _, err := run.Propose(ev); err != nil {
				t.Fatal(err)
			}
		}
		var err error
		for range 3 {
			err = run.CheckTool("choir.exec")
		}
		var v *skill.Violation
		if !errors.As(err, &v) || v.Escalated == nil || v.Escalated.Cause != skill.CauseMaxSteps || run.Status() != skill.StatusFailed {
			t.Errorf("got %v, status %s", err, run.Status())
		}
	})

	t.Run("FinalStepMayEndTheRun", func(t *testing.T) {
		t.Parallel()
		exact := edit(t, func(m map[string]any) { m["name"] = "exact"; m["max_steps"] = 4 })
		set, _ := loadSet(t, 0, exact)
		run, _ := set.Start("exact", nil)
		for _, ev := range []string{"complete", "complete", "complete", "complete"} {
			if _, err := run.Propose(ev); err != nil {
				t.Fatal(err)
			}
		}
		if run.Status() != skill.StatusCompleted {
			t.Errorf("status %s", run.Status())
		}
	})
}

func TestInputAndOutput(t *testing.T) {
	t.Parallel()
	typed := edit(t, func(m map[string]any) {
		m["name"] = "typed"
		m["input_schema"] = map[string]any{"type": "object", "properties": map[string]any{"feature": map[string]any{"type": "string"}}, "required": []any{"feature"}}
		m["output_schema"] = map[string]any{"type": "object", "properties": map[string]any{"files": map[string]any{"type": "array", "items": map[string]any{"type": "string"}}}, "required": []any{"files"}, "additionalProperties": false}
	})
	set, _ := loadSet(t, 0, typed)

	t.Run("InputValidated", func(t *testing.T) {
		t.Parallel()
		_, err := set.Start("typed", json.RawMessage(`{"feat": "x"}`))
		var ie *tool.InputError
		if !errors.As(err, &ie) {
			t.Errorf("got %v", err)
		}
		run, err := set.Start("typed", json.RawMessage(`{"feature": "login"}`))
		if err != nil || string(run.Input()) != `{"feature": "login"}` {
			t.Errorf("got %v", err)
		}
		if _, err := set.Start("nope", nil); err == nil {
			t.Error("unknown skill started")
		}
	})

	t.Run("EndingEventNeedsValidOutput", func(t *testing.T) {
		t.Parallel()
		run, _ := set.Start("typed", json.RawMessage(`{"feature": "login"}`))
		for _, ev := range []string{"complete", "complete", "complete"} {
			tv, _ := run.TransitionTool()
			if strings.Contains(string(tv.Parameters), `"output"`) {
				t.Errorf("state %s asks for output", run.State())
			}
			if _, err := run.Propose(ev); err != nil {
				t.Fatal(err)
			}
		}
		tv, _ := run.TransitionTool()
		if !strings.Contains(string(tv.Parameters), `"output"`) || !strings.Contains(tv.Description, "needs its output") {
			t.Errorf("validate's transition tool lacks output: %s", tv.Parameters)
		}
		var v *skill.Violation
		if _, err := run.Propose("complete"); !errors.As(err, &v) || v.Kind != skill.ViolationInvalidOutput {
			t.Errorf("no output: %v", err)
		}
		if _, err := run.Transition(json.RawMessage(`{"event": "complete", "output": {"files": [1]}}`)); !errors.As(err, &v) || len(v.Problems) == 0 {
			t.Errorf("bad output: %v", err)
		}
		// A non-ending event needs no output.
		if _, err := run.Transition(json.RawMessage(`{"event": "fail"}`)); err != nil {
			t.Fatal(err)
		}
		if _, err := run.Propose("complete"); err != nil {
			t.Fatal(err)
		}
		c, err := run.Transition(json.RawMessage(`{"event": "complete", "output": {"files": ["a.go"]}}`))
		if err != nil || c.Status != skill.StatusCompleted || string(run.Output()) != `{"files": ["a.go"]}` {
			t.Errorf("got %+v %v output %s", c, err, run.Output())
		}
	})
}

func TestSnapshotRestore(t *testing.T) {
	t.Parallel()
	set, _ := loadSet(t, 0, validSkill)

	t.Run("RestoredRunContinues", func(t *testing.T) {
		t.Parallel()
		run, _ := set.Start("build_feature", json.RawMessage(`{"feature": "x"}`))
		for _, ev := range []string{"complete", "complete"} {
			if _, err := run.Propose(ev); err != nil {
				t.Fatal(err)
			}
		}
		_ = run.CheckTool("choir.exec") // one retry used
		if err := run.SetLocal("plan", json.RawMessage(`{"steps": ["a", "b"]}`)); err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(run.Snapshot())
		if err != nil {
			t.Fatal(err)
		}
		var snap skill.Snapshot
		if err := json.Unmarshal(b, &snap); err != nil {
			t.Fatal(err)
		}
		want := skill.Snapshot{Skill: "build_feature", State: "modify", Step: 2, Retries: 1, RetryBudget: 2, Status: skill.StatusRunning}
		if snap.Skill != want.Skill || snap.State != want.State || snap.Step != want.Step || snap.Retries != want.Retries ||
			snap.RetryBudget != want.RetryBudget || snap.Status != want.Status || string(snap.Local["plan"]) != `{"steps":["a","b"]}` {
			t.Errorf("snapshot %s", b)
		}
		restored, err := set.Restore(snap)
		if err != nil {
			t.Fatal(err)
		}
		if restored.State() != "modify" || restored.Steps() != 2 || restored.Retries() != 1 || string(restored.Input()) != `{"feature":"x"}` {
			t.Errorf("restored %s %d %d %s", restored.State(), restored.Steps(), restored.Retries(), restored.Input())
		}
		// The retry count carried over: two more violations exhaust it.
		_ = restored.CheckTool("choir.exec")
		var v *skill.Violation
		if err := restored.CheckTool("choir.exec"); !errors.As(err, &v) || v.Escalated == nil {
			t.Errorf("got %v", err)
		}
		if ctx := restored.StepContext(); ctx.Local["plan"] == nil || ctx.Skill != "build_feature" {
			t.Errorf("step context %+v", ctx)
		}
	})

	t.Run("MismatchedSnapshotsRefused", func(t *testing.T) {
		t.Parallel()
		base := skill.Snapshot{Skill: "build_feature", State: "plan", Step: 1, RetryBudget: 2, Status: skill.StatusRunning}
		tests := map[string]func(s *skill.Snapshot){
			"UnknownSkill":      func(s *skill.Snapshot) { s.Skill = "gone" },
			"UnknownState":      func(s *skill.Snapshot) { s.State = "review" },
			"StepBeyondMax":     func(s *skill.Snapshot) { s.Step = 21 },
			"RetriesOverBudget": func(s *skill.Snapshot) { s.Retries = 3 },
			"RunningInTerminal": func(s *skill.Snapshot) { s.State = "done" },
			"CompletedMidway":   func(s *skill.Snapshot) { s.Status = skill.StatusCompleted },
			"UnknownStatus":     func(s *skill.Snapshot) { s.Status = "paused" },
			"BadLocal":          func(s *skill.Snapshot) { s.Local = map[string]json.RawMessage{"k": json.RawMessage(`{`)} },
		}
		for name, mutate := range tests {
			s := base
			mutate(&s)
			if _, err := set.Restore(s); err == nil {
				t.Errorf("%s: restored", name)
			}
		}
		if _, err := set.Restore(base); err != nil {
			t.Errorf("base: %v", err)
		}
	})
}

func TestLocal(t *testing.T) {
	t.Parallel()
	set, _ := loadSet(t, 0)
	run, _ := set.Start("skill-builder", nil)
	if err := run.SetLocal("k", json.RawMessage(`{`)); err == nil {
		t.Error("invalid JSON stored")
	}
	if err := run.SetLocal("", json.RawMessage(`1`)); err == nil {
		t.Error("empty key stored")
	}
	_ = run.SetLocal("k", json.RawMessage(`1`))
	loc := run.Local()
	loc["k"][0] = '9'
	if string(run.Local()["k"]) != "1" {
		t.Error("Local returned shared memory")
	}
	_ = run.SetLocal("k", nil)
	if len(run.Local()) != 0 {
		t.Error("nil value did not delete")
	}
}

// TestConcurrentProposals checks that a run's counters stay consistent
// under concurrent use (run with -race).
func TestConcurrentProposals(t *testing.T) {
	t.Parallel()
	big := edit(t, func(m map[string]any) { m["name"] = "big"; m["max_steps"] = 1000 })
	set, _ := loadSet(t, 1000, big)
	run, _ := set.Start("big", nil)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 50 {
				_ = run.CheckTool("choir.memory.query")
				_ = run.StepContext()
				_ = run.Snapshot()
			}
		})
	}
	wg.Wait()
	if run.Steps() != 400 {
		t.Errorf("steps %d, want 400", run.Steps())
	}
}
