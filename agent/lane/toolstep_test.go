package lane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/rpc"
)

// spanTool is a test tool that writes nothing, takes 200 ms under the lock
// of the file its path names, and records when each call ran by its id.
type spanTool struct {
	mu    sync.Mutex
	spans map[string][2]time.Time
}

func (s *spanTool) Spec() tool.Spec {
	return tool.Spec{
		LLM: tool.LLMView{Name: "test.slow", Description: "takes 200 ms under the lock of a file",
			Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"id":{"type":"string"}},` +
				`"required":["path","id"],"additionalProperties":false}`)},
		Runtime: tool.Runtime{TimeoutMS: 30_000, Locks: []tool.LockTemplate{{Resource: "file:{path}", Mode: tool.ModeExclusive}},
			SideEffect: tool.SideEffectWrite, Exposure: tool.ExposureBoth, Version: "1"},
	}
}

func (s *spanTool) Execute(ctx context.Context, _ tool.Env, input json.RawMessage) (tool.Result, error) {
	var in struct{ ID string }
	if err := json.Unmarshal(input, &in); err != nil {
		return tool.Result{}, err
	}
	start := time.Now()
	select {
	case <-time.After(200 * time.Millisecond):
	case <-ctx.Done():
		return tool.Result{}, ctx.Err()
	}
	s.mu.Lock()
	s.spans[in.ID] = [2]time.Time{start, time.Now()}
	s.mu.Unlock()
	return tool.Result{Status: tool.StatusSuccess, Summary: "ran " + in.ID}, nil
}

// setupTools is setup (edge_test.go) with further tools in the registry.
func setupTools(t *testing.T, budgets lane.Budgets, extra []tool.Tool, steps ...llmtest.Step) *bundle {
	t.Helper()
	srv := llmtest.NewServer(t, steps...)
	ws := t.TempDir()
	reg, err := builtin.Build(builtin.Config{Tools: extra})
	if err != nil {
		t.Fatal(err)
	}
	skills, err := skill.Load(skill.Config{KnownTool: reg.Has})
	if err != nil {
		t.Fatal(err)
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Env: tool.Env{Workspace: ws}})
	b := &bundle{log: log, ws: ws, out: newSink(), srv: srv, done: make(chan error, 1)}
	b.edge = lane.NewEdge(lane.EdgeConfig{Arbiter: arb, Log: log, Tools: reg, Skills: skills, LLM: &llm.Client{},
		Model: srv.Model, Out: b.out, Budgets: budgets, RateLimitDelay: 10 * time.Millisecond,
		Identity: lane.Identity{Instructions: "You are the edge lane."}})
	ctx, cancel := context.WithCancel(context.Background())
	arbDone := make(chan struct{})
	go func() { arb.Run(ctx); close(arbDone) }()
	go func() { b.done <- b.edge.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-b.done; <-arbDone })
	return b
}

// toolResults returns the tool results at the end of a request: their
// call IDs and contents, in order.
func toolResults(r *llmtest.Request) (ids, contents []string) {
	for _, m := range r.Messages {
		if m.Role == "tool" {
			ids = append(ids, m.ToolCallID)
			contents = append(contents, m.Content)
		}
	}
	return ids, contents
}

func TestEdgeParallelToolCalls(t *testing.T) {
	t.Parallel()

	t.Run("DisjointCallsOfOneStepRunAtOnce", func(t *testing.T) {
		t.Parallel()
		st := &spanTool{spans: map[string][2]time.Time{}}
		var calls []llmtest.Call
		for _, id := range []string{"1", "2", "3", "4"} {
			calls = append(calls, llmtest.Call{ID: id, Name: "test.slow", Arguments: fmt.Sprintf(`{"path":"f%s.txt","id":%q}`, id, id)})
		}
		b := setupTools(t, lane.Budgets{}, []tool.Tool{st},
			llmtest.ToolCalls(calls...),
			llmtest.Text("all four done").Expect(func(t testing.TB, r *llmtest.Request) {
				ids, contents := toolResults(r)
				if !slices.Equal(ids, []string{"1", "2", "3", "4"}) {
					t.Errorf("tool results answer %v, want the calls in order", ids)
				}
				for i, c := range contents {
					if want := fmt.Sprintf("ran %d", i+1); !strings.Contains(c, want) {
						t.Errorf("result %d = %s, want %q", i+1, c, want)
					}
				}
			}))
		if err := b.edge.Deliver(lane.UserMessage{Text: "run the four"}); err != nil {
			t.Fatal(err)
		}
		if got := b.out.next(t); got != "all four done" {
			t.Fatalf("answer = %q", got)
		}
		st.mu.Lock()
		defer st.mu.Unlock()
		if len(st.spans) != 4 {
			t.Fatalf("%d calls ran, want 4", len(st.spans))
		}
		lastStart, firstEnd := st.spans["1"][0], st.spans["1"][1]
		for _, s := range st.spans {
			if s[0].After(lastStart) {
				lastStart = s[0]
			}
			if s[1].Before(firstEnd) {
				firstEnd = s[1]
			}
		}
		if !lastStart.Before(firstEnd) {
			t.Errorf("the four calls did not all run at one instant: %v", st.spans)
		}
		types := b.eventTypes(t) // verifies the chain
		if n := strings.Count(strings.Join(types, " "), "tool_result_committed"); n != 4 {
			t.Errorf("%d results committed, want 4: %v", n, types)
		}
	})

	t.Run("LaneLevelCallSplitsTheStepInOrder", func(t *testing.T) {
		t.Parallel()
		// The write before choir.skill.start runs without the skill; the
		// calls after it are proposed under the skill's first state, which
		// allows reads only: so the skill started before they were checked.
		b := setupTools(t, lane.Budgets{}, nil,
			llmtest.ToolCalls(
				llmtest.Call{ID: "w1", Name: "choir.fs.write", Arguments: `{"path":"a.txt","content":"alpha"}`},
				llmtest.Call{ID: "s", Name: "choir.skill.start", Arguments: `{"name":"tool-builder"}`},
				llmtest.Call{ID: "w2", Name: "choir.fs.write", Arguments: `{"path":"b.txt","content":"beta"}`},
				llmtest.Call{ID: "r", Name: "choir.fs.read", Arguments: `{"path":"a.txt"}`},
			),
			llmtest.Text("done").Expect(func(t testing.TB, r *llmtest.Request) {
				ids, contents := toolResults(r)
				if !slices.Equal(ids, []string{"w1", "s", "w2", "r"}) {
					t.Fatalf("tool results answer %v, want the calls in order", ids)
				}
				for i, want := range []string{`"status":"success"`, `"skill":"tool-builder"`, `"tool_not_allowed"`, "alpha"} {
					if !strings.Contains(contents[i], want) {
						t.Errorf("result of %s = %s, want %s", ids[i], contents[i], want)
					}
				}
			}))
		if err := b.edge.Deliver(lane.UserMessage{Text: "go"}); err != nil {
			t.Fatal(err)
		}
		if got := b.out.next(t); got != "done" {
			t.Fatalf("answer = %q", got)
		}
		want := []string{"user_msg", "llm_call_committed", "model_output",
			"tool_call_committed", "tool_result_committed", "skill_transition_committed",
			"tool_call_requested", "tool_call_committed", "tool_result_committed", // w2 rejected, r ran: either order
			"llm_call_committed", "model_output"}
		got := b.eventTypes(t)
		if len(got) != len(want) || !slices.Equal(got[:6], want[:6]) || !slices.Equal(got[9:], want[9:]) {
			t.Errorf("events = %v, want %v", got, want)
		}
		mid := slices.Clone(got[6:9])
		slices.Sort(mid)
		if !slices.Equal(mid, []string{"tool_call_committed", "tool_call_requested", "tool_result_committed"}) {
			t.Errorf("events of the run after the skill start = %v", got[6:9])
		}
	})

	t.Run("BudgetStopsTheStepAtTheCallBeyondIt", func(t *testing.T) {
		t.Parallel()
		b := setupTools(t, lane.Budgets{MaxToolCallsPerSession: 2}, nil,
			llmtest.ToolCalls(
				llmtest.Call{ID: "1", Name: "choir.fs.write", Arguments: `{"path":"a.txt","content":"a"}`},
				llmtest.Call{ID: "2", Name: "choir.fs.write", Arguments: `{"path":"b.txt","content":"b"}`},
				llmtest.Call{ID: "3", Name: "choir.fs.write", Arguments: `{"path":"c.txt","content":"c"}`},
			))
		if err := b.edge.Deliver(lane.UserMessage{Text: "write three"}); err != nil {
			t.Fatal(err)
		}
		if got := b.out.next(t); !strings.Contains(got, "tool-call budget") {
			t.Fatalf("message = %q", got)
		}
		select {
		case err := <-b.done:
			if !errors.Is(err, lane.ErrBudgetExceeded) {
				t.Fatalf("run ended with %v", err)
			}
			b.done <- err // for cleanup
		case <-time.After(30 * time.Second):
			t.Fatal("lane still running after its budget ran out")
		}
		for name, want := range map[string]bool{"a.txt": true, "b.txt": true, "c.txt": false} {
			if _, err := os.Stat(filepath.Join(b.ws, name)); (err == nil) != want {
				t.Errorf("%s written = %v, want %v", name, err == nil, want)
			}
		}
		b.eventTypes(t)
	})
}
