package arbiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// funcTool is a Go tool defined by the test, for behaviours the built-ins
// cannot show (blocking, panicking).
type funcTool struct {
	spec tool.Spec
	fn   func(ctx context.Context) (tool.Result, error)
}

func (f funcTool) Spec() tool.Spec { return f.spec }
func (f funcTool) Execute(ctx context.Context, _ tool.Env, _ json.RawMessage) (tool.Result, error) {
	return f.fn(ctx)
}

func newFuncTool(name string, locks []tool.LockTemplate, fn func(ctx context.Context) (tool.Result, error)) funcTool {
	return funcTool{spec: tool.Spec{
		LLM: tool.LLMView{Name: name, Description: "test tool " + name,
			Parameters: json.RawMessage(`{"type":"object","properties":{},"additionalProperties":false}`)},
		Runtime: tool.Runtime{TimeoutMS: 5000, Locks: locks, SideEffect: tool.SideEffectWrite, Exposure: tool.ExposureBoth, Version: "1"},
	}, fn: fn}
}

type hostFunc func(ctx context.Context, name, callID string, input json.RawMessage) (tool.Result, error)

func (f hostFunc) ExecuteHostTool(ctx context.Context, name, callID string, input json.RawMessage) (tool.Result, error) {
	return f(ctx, name, callID, input)
}

type bundle struct {
	arb   *arbiter.Arbiter
	log   *commitlog.Log
	ws    string
	locks *lock.Manager
}

func setup(t testing.TB, extra []tool.Tool, host arbiter.HostExecutor, restricted func() bool) *bundle {
	t.Helper()
	ws := t.TempDir()
	reg, err := builtin.Build(builtin.Config{Tools: extra})
	if err != nil {
		t.Fatal(err)
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	locks := lock.New()
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Locks: locks,
		Env: tool.Env{Workspace: ws}, Host: host, EdgeRestricted: restricted})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { arb.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &bundle{arb: arb, log: log, ws: ws, locks: locks}
}

func (b *bundle) events(t testing.TB) []rpc.Event {
	t.Helper()
	head, _ := b.log.Head()
	evs, err := b.log.Range(1, head)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := commitlog.VerifyChain(0, rpc.Genesis, evs); err != nil {
		t.Fatalf("chain does not verify: %v", err)
	}
	return evs
}

func types(evs []rpc.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Type))
	}
	return out
}

func propose(t *testing.T, b *bundle, owner lock.Owner, name, input string) arbiter.Outcome {
	t.Helper()
	out, err := b.arb.Propose(context.Background(), arbiter.Proposal{Owner: owner, CallID: fmt.Sprintf("call-%d", time.Now().UnixNano()),
		Tool: name, Input: json.RawMessage(input)})
	if err != nil {
		t.Fatalf("propose %s: %v", name, err)
	}
	return out
}

func TestPropose(t *testing.T) {
	t.Parallel()

	t.Run("WriteThenReadCommitsRequestCallAndResult", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, nil, nil)
		out := propose(t, b, lock.Edge, "choir.fs.write", `{"path":"notes/a.txt","content":"hello\nworld\n"}`)
		if out.Rejected != nil || out.Result.Status != tool.StatusSuccess {
			t.Fatalf("write: %+v %+v", out.Rejected, out.Result)
		}
		if !slices.Equal(out.Locks, []string{"file:notes/a.txt:X"}) {
			t.Errorf("locks = %v", out.Locks)
		}
		out = propose(t, b, lock.Edge, "choir.fs.read", `{"path":"notes/a.txt"}`)
		if !strings.Contains(string(out.Result.Output), "world") {
			t.Fatalf("read back: %s", out.Result.Output)
		}
		want := []string{"tool_call_committed", "tool_result_committed", "tool_call_committed", "tool_result_committed"}
		if got := types(b.events(t)); !slices.Equal(got, want) {
			t.Errorf("events = %v", got)
		}
		res, err := commitlog.Decode[commitlog.ToolResult](b.events(t)[1])
		if err != nil || res.Status != commitlog.ToolSuccess || res.Tool != "choir.fs.write" {
			t.Errorf("result event = %+v, %v", res, err)
		}
	})

	rejections := []struct {
		name, tool, input, kind string
		allow                   []string
	}{
		{"UnknownToolIsRejected", "choir.fs.delete", `{"path":"a"}`, "unknown_tool", nil},
		{"SchemaInvalidInputIsRejected", "choir.fs.write", `{"path":"a.txt","content":7}`, "invalid_input", nil},
		{"ToolOutsideTheAllowlistIsRejected", "choir.exec", `{"command":"touch x"}`, "tool_not_allowed", []string{"choir.fs.read"}},
		{"PathEscapeIsRejected", "choir.fs.write", `{"path":"../outside.txt","content":"x"}`, "path_escape", nil},
		{"AbsolutePathOutsideIsRejected", "choir.fs.write", `{"path":"/tmp/choir-escape.txt","content":"x"}`, "path_escape", nil},
	}
	for _, c := range rejections {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, nil, nil, nil)
			out, err := b.arb.Propose(context.Background(), arbiter.Proposal{Owner: lock.Edge, CallID: "c1",
				Tool: c.tool, Input: json.RawMessage(c.input), Allow: c.allow})
			if err != nil {
				t.Fatal(err)
			}
			if out.Rejected == nil || out.Rejected.Kind != c.kind {
				t.Fatalf("outcome = %+v, want rejection %s", out, c.kind)
			}
			if len(out.Rejected.AllowedTools) == 0 {
				t.Error("rejection does not list the allowed tools")
			}
			var body map[string]any
			if err := json.Unmarshal(out.ForModel(), &body); err != nil || body["status"] != "rejected" {
				t.Errorf("model view = %s", out.ForModel())
			}
			evs := b.events(t)
			if got := types(evs); !slices.Equal(got, []string{"tool_call_requested"}) {
				t.Fatalf("events = %v, want only the logged request", got)
			}
			if !strings.Contains(string(evs[0].Payload), `"status":"rejected"`) {
				t.Errorf("logged request = %s", evs[0].Payload)
			}
			entries, _ := os.ReadDir(b.ws)
			if len(entries) != 0 {
				t.Errorf("a rejected proposal touched the workspace: %v", entries)
			}
		})
	}

	t.Run("SkillStateAllowlistApplies", func(t *testing.T) {
		t.Parallel()
		reg, err := builtin.Build(builtin.Config{})
		if err != nil {
			t.Fatal(err)
		}
		set, err := skill.Load(skill.Config{KnownTool: reg.Has})
		if err != nil {
			t.Fatal(err)
		}
		run, err := set.Start("tool-builder", nil)
		if err != nil {
			t.Fatal(err)
		}
		b := setup(t, nil, nil, nil)
		out, err := b.arb.Propose(context.Background(), arbiter.Proposal{Owner: lock.Edge, CallID: "c1",
			Tool: "choir.fs.write", Input: json.RawMessage(`{"path":"a","content":"x"}`), Skill: run})
		if err != nil {
			t.Fatal(err)
		}
		if out.Rejected == nil || out.Rejected.Kind != "tool_not_allowed" || len(out.Rejected.Transitions) == 0 {
			t.Fatalf("outcome = %+v", out.Rejected)
		}
		sort.Strings(out.Rejected.AllowedTools)
		if !slices.Equal(out.Rejected.AllowedTools, []string{"choir.fs.read", "choir.memory.query"}) {
			t.Errorf("allowed = %v, want the understand state's tools", out.Rejected.AllowedTools)
		}
	})

	t.Run("EdgeIsReadOnlyWhileCoresRun", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, nil, func() bool { return true })
		out := propose(t, b, lock.Edge, "choir.fs.write", `{"path":"a.txt","content":"x"}`)
		if out.Rejected == nil || out.Rejected.Kind != "tool_not_allowed" {
			t.Fatalf("edge write while restricted: %+v", out)
		}
		if slices.Contains(out.Rejected.AllowedTools, "choir.exec") || !slices.Contains(out.Rejected.AllowedTools, "choir.fs.read") {
			t.Errorf("allowed = %v", out.Rejected.AllowedTools)
		}
		core, _ := lock.Core("writer")
		if out := propose(t, b, core, "choir.fs.write", `{"path":"a.txt","content":"x"}`); out.Rejected != nil {
			t.Fatalf("core write: %+v", out.Rejected)
		}
	})

	t.Run("SlowHostToolDoesNotBlockOtherCalls", func(t *testing.T) {
		t.Parallel()
		unblock := make(chan struct{})
		started := make(chan struct{})
		host := hostFunc(func(ctx context.Context, name, callID string, input json.RawMessage) (tool.Result, error) {
			close(started)
			<-unblock
			return tool.Result{Status: tool.StatusSuccess, Summary: "slow done"}, nil
		})
		b := setup(t, nil, host, nil)
		if err := os.WriteFile(filepath.Join(b.ws, "f.txt"), []byte("data"), 0o644); err != nil {
			t.Fatal(err)
		}
		core, _ := lock.Core("research")
		var slow arbiter.Outcome
		var wg sync.WaitGroup
		wg.Go(func() {
			slow = propose(t, b, core, "choir.memory.query", `{"store":"knowledge","mode":"text","query":"x"}`)
		})
		<-started
		fast := propose(t, b, lock.Edge, "choir.fs.read", `{"path":"f.txt"}`)
		if fast.Result.Status != tool.StatusSuccess {
			t.Fatalf("read while host tool runs: %+v", fast)
		}
		close(unblock)
		wg.Wait()
		if slow.Rejected != nil || slow.Result.Status != tool.StatusSuccess {
			t.Fatalf("host tool: %+v %+v", slow.Rejected, slow.Result)
		}
	})

	t.Run("PanickingToolReleasesItsLocksAndCommitsAnError", func(t *testing.T) {
		t.Parallel()
		boom := newFuncTool("test.boom", []tool.LockTemplate{{Resource: "workspace", Mode: "X"}},
			func(context.Context) (tool.Result, error) { panic("kaboom") })
		b := setup(t, []tool.Tool{boom}, nil, nil)
		out := propose(t, b, lock.Edge, "test.boom", `{}`)
		if out.Result.Status != tool.StatusError {
			t.Fatalf("outcome = %+v", out.Result)
		}
		if snap := b.locks.Snapshot(); len(snap.Held) != 0 {
			t.Errorf("locks still held after a panic: %+v", snap.Held)
		}
		evs := b.events(t)
		last, err := commitlog.Decode[commitlog.ToolResult](evs[len(evs)-1])
		if err != nil || last.Status != commitlog.ToolError || !strings.Contains(last.Error, "kaboom") {
			t.Errorf("result event = %+v %v", last, err)
		}
		// The workspace is free again.
		if out := propose(t, b, lock.Edge, "choir.exec", `{"command":"true"}`); out.Result.Status != tool.StatusSuccess {
			t.Errorf("exec after panic: %+v", out.Result)
		}
	})

	t.Run("CancelledWhileWaitingForLocksNeverRuns", func(t *testing.T) {
		t.Parallel()
		ran := false
		slow := newFuncTool("test.guarded", []tool.LockTemplate{{Resource: "workspace", Mode: "X"}},
			func(context.Context) (tool.Result, error) {
				ran = true
				return tool.Result{Status: tool.StatusSuccess}, nil
			})
		b := setup(t, []tool.Tool{slow}, nil, nil)
		holder, _ := lock.Core("holder")
		release, err := b.locks.Acquire(context.Background(), holder, []lock.Request{{Key: lock.Workspace, Mode: lock.X}})
		if err != nil {
			t.Fatal(err)
		}
		defer release()
		ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
		defer cancel()
		_, err = b.arb.Propose(ctx, arbiter.Proposal{Owner: lock.Edge, CallID: "c1", Tool: "test.guarded", Input: json.RawMessage(`{}`)})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("err = %v", err)
		}
		if ran {
			t.Error("the tool ran without its locks")
		}
		evs := b.events(t)
		if got := types(evs); !slices.Equal(got, []string{"tool_call_requested"}) || !strings.Contains(string(evs[0].Payload), `"status":"abandoned"`) {
			t.Errorf("events = %v", got)
		}
	})

	t.Run("ConcurrentProposalsKeepOneContiguousChain", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, nil, nil)
		var wg sync.WaitGroup
		for i := range 16 {
			owner := lock.Edge
			if i%2 == 1 {
				owner, _ = lock.Core(fmt.Sprintf("job%d", i))
			}
			wg.Go(func() {
				out, err := b.arb.Propose(context.Background(), arbiter.Proposal{Owner: owner, CallID: fmt.Sprintf("c%d", i),
					Tool: "choir.fs.write", Input: json.RawMessage(fmt.Sprintf(`{"path":"f%d.txt","content":"x"}`, i))})
				if err != nil || out.Rejected != nil {
					t.Errorf("call %d: %v %+v", i, err, out.Rejected)
				}
			})
		}
		wg.Wait()
		if evs := b.events(t); len(evs) != 32 {
			t.Errorf("%d events, want 32", len(evs))
		}
	})
}

// BenchmarkProposeOverhead measures the arbiter's own cost per tool call:
// validation, three commits through the loop and lock handling, around a
// tool that does nothing.
func BenchmarkProposeOverhead(b *testing.B) {
	noop := newFuncTool("test.noop", nil, func(context.Context) (tool.Result, error) {
		return tool.Result{Status: tool.StatusSuccess, Summary: "ok"}, nil
	})
	bn := setup(b, []tool.Tool{noop}, nil, nil)
	ctx := context.Background()
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		out, err := bn.arb.Propose(ctx, arbiter.Proposal{Owner: lock.Edge, CallID: fmt.Sprintf("c%d", i), Tool: "test.noop", Input: json.RawMessage(`{}`)})
		lat = append(lat, time.Since(start))
		if err != nil || out.Rejected != nil {
			b.Fatal(err, out.Rejected)
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	if len(lat) > 0 {
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
}
