package core_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/lane/core"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/rpc"
)

// interval is when a job's tool call held its locks, as the log recorded
// it: from tool_call_committed (locks granted) to tool_result_committed
// (locks released right after).
type interval struct {
	lane       string
	start, end time.Time
}

func (b *coreBench) toolIntervals(t testing.TB, toolName string) []interval {
	t.Helper()
	starts := map[string]rpc.Event{}
	var out []interval
	for _, ev := range b.events(t) {
		var p struct {
			CallID string `json:"call_id"`
			Tool   string `json:"tool"`
		}
		json.Unmarshal(ev.Payload, &p)
		if p.Tool != toolName {
			continue
		}
		switch ev.Type {
		case rpc.EventToolCallCommitted:
			starts[p.CallID] = ev
		case rpc.EventToolResultCommitted:
			if s, ok := starts[p.CallID]; ok {
				out = append(out, interval{lane: ev.Lane, start: s.CreatedAt, end: ev.CreatedAt})
			}
		}
	}
	return out
}

// twoJobs has the edge spawn jobs a and b in one step, each running script.
func twoJobs(b *coreBench, scripts map[string][]llmtest.Step) *scriptedJobs {
	b.edgeSrv.Add(
		llmtest.ToolCalls(spawnCall("s1", "a", "Do part a."), spawnCall("s2", "b", "Do part b.")),
		llmtest.Text("Both started."),
	)
	jobs := newScriptedJobs(scripts)
	b.coreSrv.SetResponder(jobs.respond)
	return jobs
}

// TestCoresRunAtOnce shows two jobs writing different files at the same
// time: each write waits, inside the tool, until the other has started,
// so both succeed only if they overlap, and the log's timestamps show the
// two lock holdings overlapping.
func TestCoresRunAtOnce(t *testing.T) {
	t.Parallel()
	b := setupCores(t, coreOpts{slowTools: true})
	twoJobs(b, map[string][]llmtest.Step{
		"a": {llmtest.ToolCalls(llmtest.Call{ID: "w", Name: "test.slow_write", Arguments: `{"path":"a.txt","wait_for":"b.txt"}`}),
			llmtest.Text("a written")},
		"b": {llmtest.ToolCalls(llmtest.Call{ID: "w", Name: "test.slow_write", Arguments: `{"path":"b.txt","wait_for":"a.txt"}`}),
			llmtest.Text("b written")},
	})
	if err := b.edge.Deliver(lane.UserMessage{Text: "do a and b"}); err != nil {
		t.Fatal(err)
	}
	for _, job := range []string{"a", "b"} {
		if st := b.waitStopped(t, job); st.Outcome != "completed" || string(st.FinalResult) != `"`+job+` written"` {
			t.Errorf("job %s ended %+v", job, st)
		}
		if got, err := os.ReadFile(filepath.Join(b.ws, job+".txt")); err != nil || !strings.Contains(string(got), "written by") {
			t.Errorf("%s.txt = %q, %v", job, got, err)
		}
	}
	iv := b.toolIntervals(t, "test.slow_write")
	if len(iv) != 2 {
		t.Fatalf("intervals = %+v", iv)
	}
	if !iv[0].start.Before(iv[1].end) || !iv[1].start.Before(iv[0].end) {
		t.Errorf("the writes did not overlap: %s %s..%s, %s %s..%s", iv[0].lane, iv[0].start.Format(time.StampMicro),
			iv[0].end.Format(time.StampMicro), iv[1].lane, iv[1].start.Format(time.StampMicro), iv[1].end.Format(time.StampMicro))
	}
	b.checkReports(t)
}

// TestCoresSerialisedOnExec shows two jobs running choir.exec one after the
// other: exec takes workspace:X, so the second waits for the first's
// locks, and the log's lock holdings do not overlap.
func TestCoresSerialisedOnExec(t *testing.T) {
	t.Parallel()
	b := setupCores(t, coreOpts{})
	exec := llmtest.ToolCalls(llmtest.Call{ID: "x", Name: "choir.exec", Arguments: `{"command":"sleep 0.3"}`})
	twoJobs(b, map[string][]llmtest.Step{"a": {exec, llmtest.Text("a ran")}, "b": {exec, llmtest.Text("b ran")}})
	if err := b.edge.Deliver(lane.UserMessage{Text: "run both"}); err != nil {
		t.Fatal(err)
	}
	b.waitStopped(t, "a")
	b.waitStopped(t, "b")
	iv := b.toolIntervals(t, "choir.exec")
	if len(iv) != 2 || iv[0].lane == iv[1].lane {
		t.Fatalf("intervals = %+v", iv)
	}
	if iv[1].start.Before(iv[0].end) {
		t.Errorf("the execs overlapped: %s until %s, %s from %s", iv[0].lane, iv[0].end.Format(time.StampMicro),
			iv[1].lane, iv[1].start.Format(time.StampMicro))
	}
	b.checkReports(t)
}

// TestEdgeWhileCoreRuns shows the edge answering the user while a job holds
// workspace:X: it reads a file under the dirty-read exception, is refused a
// write with the reason, is offered no side-effect tool, and answers; the
// job is still running when the answer arrives.
func TestEdgeWhileCoreRuns(t *testing.T) {
	t.Parallel()
	b := setupCores(t, coreOpts{})
	if err := os.WriteFile(filepath.Join(b.ws, "notes.txt"), []byte("the meeting is at noon\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.edgeSrv.Add(
		llmtest.ToolCalls(spawnCall("s1", "build", "Run the build.")),
		llmtest.Text("Build started."),
		llmtest.ToolCalls(llmtest.Call{ID: "r", Name: "choir.fs.read", Arguments: `{"path":"notes.txt"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				names := r.ToolNames()
				if slices.Contains(names, "choir.fs.write") || slices.Contains(names, "choir.exec") ||
					!slices.Contains(names, "choir.fs.read") || !slices.Contains(names, "choir.core.inject") {
					t.Errorf("tools offered while a core runs: %v", names)
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "w", Name: "choir.fs.write", Arguments: `{"path":"x.txt","content":"no"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); !strings.Contains(c, "meeting is at noon") {
					t.Errorf("read while the core holds workspace:X = %s", c)
				}
			}),
		llmtest.Text("The meeting is at noon.").Expect(func(t testing.TB, r *llmtest.Request) {
			if c := lastToolResult(t, r); !strings.Contains(c, "rejected") || !strings.Contains(c, "read-only tools while core jobs run") {
				t.Errorf("write while a core runs = %s", c)
			}
		}),
	)
	b.coreSrv.Add(
		llmtest.ToolCalls(llmtest.Call{ID: "x", Name: "choir.exec",
			Arguments: `{"command":"while [ ! -f release ]; do sleep 0.02; done; echo built"}`}),
		llmtest.Text("built"),
	)
	if err := b.edge.Deliver(lane.UserMessage{Text: "build it"}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, "Build started.")
	waitFor(t, "the job's exec to hold workspace:X", func() bool {
		return len(b.find(t, rpc.EventToolCallCommitted, "core:build")) == 1
	})
	if err := b.edge.Deliver(lane.UserMessage{Text: "when is the meeting?"}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, "The meeting is at noon.")
	if !b.edge.CoresRunning() || len(b.find(t, rpc.EventToolResultCommitted, "core:build")) != 0 {
		t.Fatal("the job's exec ended before the edge answered: the test shows nothing")
	}
	if _, err := os.Stat(filepath.Join(b.ws, "x.txt")); !os.IsNotExist(err) {
		t.Errorf("the refused write ran: %v", err)
	}
	if err := os.WriteFile(filepath.Join(b.ws, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if st := b.waitStopped(t, "build"); st.Outcome != "completed" {
		t.Errorf("job ended %+v", st)
	}
	b.checkReports(t)
}

// TestCoreInjection relays an instruction from the edge to a running job:
// applied at its next safe point (after the step in flight and its tool
// result), committed on the job's lane, never resetting a budget, and
// refused with the reason beyond max_injections_per_job.
func TestCoreInjection(t *testing.T) {
	t.Parallel()
	b := setupCores(t, coreOpts{budgets: core.Budgets{MaxInjectionsPerJob: 1, PerJobMaxSteps: 10}})
	b.edgeSrv.Add(
		llmtest.ToolCalls(spawnCall("s1", "list", "Write list.txt with milk.")),
		llmtest.Text("Started."),
		llmtest.ToolCalls(llmtest.Call{ID: "i1", Name: "choir.core.inject", Arguments: `{"job_name":"list","content":"add bread too"}`}),
		llmtest.ToolCalls(llmtest.Call{ID: "i2", Name: "choir.core.inject", Arguments: `{"job_name":"list","content":"and jam"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); !strings.Contains(c, `"success"`) {
					t.Errorf("first injection = %s", c)
				}
			}),
		llmtest.Text("Passed on.").Expect(func(t testing.TB, r *llmtest.Request) {
			if c := lastToolResult(t, r); !strings.Contains(c, "injection_refused") || !strings.Contains(c, "max_injections_per_job") {
				t.Errorf("second injection = %s", c)
			}
		}),
	)
	release := make(chan struct{})
	b.coreSrv.SetResponder(func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		switch steps(r) {
		case 0:
			select { // held until the injection is queued
			case <-release:
			case <-ctx.Done():
			}
			return llmtest.ToolCalls(llmtest.Call{ID: "w", Name: "choir.fs.write", Arguments: `{"path":"list.txt","content":"milk\n"}`})
		case 1:
			msgs := r.Messages
			if n := len(msgs); n < 2 || msgs[n-2].Role != "tool" || msgs[n-1].Content != "Instruction from the edge lane: add bread too" {
				t.Errorf("the injection is not after the step's tool result: %+v", msgs)
			}
			return llmtest.ToolCalls(llmtest.Call{ID: "w2", Name: "choir.fs.write", Arguments: `{"path":"list.txt","content":"milk\nbread\n"}`})
		}
		return llmtest.Text("list.txt has milk and bread")
	})
	if err := b.edge.Deliver(lane.UserMessage{Text: "make my list"}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, "Started.")
	if err := b.edge.Deliver(lane.UserMessage{Text: "oh, add bread. and jam"}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, "Passed on.")
	close(release)
	st := b.waitStopped(t, "list")
	if st.Outcome != "completed" || st.Used.Injections != 1 || st.Used.Steps != 3 {
		t.Errorf("job ended %+v", st)
	}
	inj := b.find(t, rpc.EventInjectedInstruction, "core:list")
	if len(inj) != 1 || !strings.Contains(string(inj[0].Payload), `"source":"edge"`) {
		t.Errorf("injections on the job's lane = %+v", inj)
	}
	if got, _ := os.ReadFile(filepath.Join(b.ws, "list.txt")); string(got) != "milk\nbread\n" {
		t.Errorf("list.txt = %q", got)
	}
	b.checkReports(t)
}

// TestCoreCancelFreesLocks cancels a job whose tool holds workspace:X: the
// tool is stopped, its result committed, the locks released (another owner
// gets them at once) and the job reported as cancelled.
func TestCoreCancelFreesLocks(t *testing.T) {
	t.Parallel()
	b := setupCores(t, coreOpts{})
	b.edgeSrv.Add(llmtest.ToolCalls(spawnCall("s1", "long", "Run the long job.")), llmtest.Text("Started."))
	b.coreSrv.Add(llmtest.ToolCalls(llmtest.Call{ID: "x", Name: "choir.exec", Arguments: `{"command":"sleep 60"}`}))
	if err := b.edge.Deliver(lane.UserMessage{Text: "run it"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the exec holding workspace:X", func() bool { return len(b.find(t, rpc.EventToolCallCommitted, "core:long")) == 1 })
	if !b.jobs.Cancel("long", "the user said stop") {
		t.Fatal("CancelCore found no job")
	}
	other, _ := lock.Core("other")
	req, _ := lock.ParseRequest("workspace:X")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	release, err := b.locks.Acquire(ctx, other, []lock.Request{req})
	if err != nil {
		t.Fatalf("workspace:X still held after the cancel: %v", err)
	}
	release()
	st := b.waitStopped(t, "long")
	if st.Outcome != "terminated" || st.Error == nil || st.Error.Kind != "cancelled" {
		t.Errorf("job ended %+v", st)
	}
	i := b.waitMessage(t, `Core job "long" was cancelled: the user said stop`)
	if texts, _ := b.messages(); !strings.Contains(texts[i], "1 steps") {
		t.Errorf("report = %q", texts[i])
	}
	if len(b.find(t, rpc.EventCancelled, "core:long")) != 1 || len(b.find(t, rpc.EventToolResultCommitted, "core:long")) != 1 {
		t.Errorf("log = %v", b.events(t))
	}
	b.checkReports(t)
}
