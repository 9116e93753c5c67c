package core_test

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/lane/core"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/rpc"
)

// crashMidJob runs a job until its model call of step held (0-based) is in
// flight, and returns the log as choird's replica would hold it then, and
// the snapshot taken when step snapAt's call was in flight (nil for none),
// before cutting the lane off as a crash would.
func crashMidJob(t *testing.T, ws string, held, snapAt int, budgets core.Budgets) ([]rpc.Event, []core.Snapshot) {
	t.Helper()
	b := setupCores(t, coreOpts{ws: ws, budgets: budgets})
	b.edgeSrv.Add(llmtest.ToolCalls(spawnCall("s1", "j", "Write a.txt then b.txt.")), llmtest.Text("Started."))
	heldCh, snapCh := make(chan struct{}), make(chan []core.Snapshot, 1)
	b.coreSrv.SetResponder(func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		n := steps(r)
		if n == snapAt {
			snapCh <- b.jobs.Snapshots()
		}
		if n == held {
			close(heldCh)
			<-ctx.Done()
			return llmtest.Text("never seen")
		}
		if n == 0 {
			return llmtest.ToolCalls(llmtest.Call{Name: "choir.core.report", Arguments: `{"kind":"progress","text":"writing a.txt"}`},
				llmtest.Call{Name: "choir.fs.write", Arguments: `{"path":"a.txt","content":"a"}`})
		}
		return llmtest.ToolCalls(llmtest.Call{Name: "choir.core.report", Arguments: `{"kind":"partial_result","text":"a.txt done"}`},
			llmtest.Call{Name: "choir.fs.write", Arguments: `{"path":"b.txt","content":"b"}`})
	})
	if err := b.edge.Deliver(lane.UserMessage{Text: "write a and b"}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, "Started.")
	<-heldCh
	var snaps []core.Snapshot
	if snapAt >= 0 {
		snaps = <-snapCh
	}
	evs := b.events(t)
	b.stopLane()
	<-b.runDone
	if snaps == nil {
		return evs, nil
	}
	// The tail starts after the snapshot, as an older choird's did, or a
	// tail capped in length: the job's start and first steps are not in it.
	from := snaps[0].ThroughRev
	return slices.DeleteFunc(evs, func(ev rpc.Event) bool { return ev.Rev <= from }), snaps
}

// TestCoreResumesAfterCrash restarts an agent whose job was cut off in the
// middle of a model call: the job resumes from its log, its window rebuilt
// from the tail (the steps it took are in its prompt), its budgets as
// spent, the user is told, and its report follows.
func TestCoreResumesAfterCrash(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	history, _ := crashMidJob(t, ws, 2, -1, core.Budgets{PerJobMaxSteps: 10})

	b := setupCores(t, coreOpts{ws: ws, history: history, budgets: core.Budgets{PerJobMaxSteps: 10}})
	b.coreSrv.Add(llmtest.Text("a.txt and b.txt written").Expect(func(t testing.TB, r *llmtest.Request) {
		var results, restart int
		for _, m := range r.Messages {
			if m.Role == "tool" && strings.Contains(m.Content, `"success"`) {
				results++
			}
			if strings.Contains(m.Content, "The agent restarted and you resume this job") {
				restart++
			}
		}
		// Two steps of two calls each: both reports and both writes.
		if steps(r) != 2 || results != 4 || restart != 1 || jobOf(r) != "j" {
			t.Errorf("resumed prompt: %d steps, %d results, %d restart notes: %+v", steps(r), results, restart, r.Messages)
		}
	}))
	b.waitMessage(t, `Core job "j" was interrupted by a restart and resumes (2 steps done so far).`)
	i := b.waitMessage(t, `Core job "j" completed (3 steps, 2 tool calls`)
	if texts, _ := b.messages(); !strings.Contains(texts[i], "a.txt and b.txt written") {
		t.Errorf("report = %q", texts[i])
	}
	for _, f := range []string{"a.txt", "b.txt"} {
		if _, err := os.Stat(filepath.Join(ws, f)); err != nil {
			t.Error(err)
		}
	}
	b.checkReports(t)
	if n := len(b.find(t, rpc.EventCoreStarted, "")); n != 1 {
		t.Errorf("%d core_started events, want the first one only", n)
	}
}

// TestCoreResumesFromSnapshot restarts from a snapshot taken while the job
// ran, so that the job's start is not in the tail: it resumes with the
// snapshot's briefing and budgets plus what the tail adds, counted once,
// and a note in place of the steps it no longer sees.
func TestCoreResumesFromSnapshot(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	budgets := core.Budgets{PerJobMaxSteps: 10, PerJobMaxToolCalls: 10}
	history, snaps := crashMidJob(t, ws, 2, 1, budgets)
	if len(snaps) != 1 || snaps[0].Used.Steps != 1 || snaps[0].Used.ToolCalls != 1 {
		t.Fatalf("snapshot = %+v", snaps)
	}
	b := setupCores(t, coreOpts{ws: ws, history: history, snaps: snaps, budgets: budgets})
	b.coreSrv.Add(llmtest.Text("done").Expect(func(t testing.TB, r *llmtest.Request) {
		if !strings.Contains(r.System(), "This job was resumed after a restart") || !strings.Contains(r.System(), "writing a.txt") {
			t.Errorf("no resume note: %q", r.System())
		}
		if steps(r) != 1 || jobOf(r) != "j" {
			t.Errorf("resumed window: %+v", r.Messages)
		}
	}))
	b.waitMessage(t, `Core job "j" was interrupted by a restart and resumes (2 steps done so far).`)
	st := b.waitStopped(t, "j")
	if st.Used.Steps != 3 || st.Used.ToolCalls != 2 || st.Outcome != "completed" || st.Partial != "a.txt done" {
		t.Errorf("after the restart: %+v", st)
	}
	b.checkReports(t)
}

// TestCoreBudgetSurvivesRestart shows a restart does not reset a budget: a
// job that used its steps before the crash ends at its first safe point
// after it, reported with its partial result.
func TestCoreBudgetSurvivesRestart(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	history, _ := crashMidJob(t, ws, 2, -1, core.Budgets{PerJobMaxSteps: 10})
	b := setupCores(t, coreOpts{ws: ws, history: history, budgets: core.Budgets{PerJobMaxSteps: 2}})
	i := b.waitMessage(t, `Core job "j" was stopped: budget exceeded, out of steps`)
	if texts, _ := b.messages(); !strings.Contains(texts[i], "Last partial result:\na.txt done") {
		t.Errorf("report = %q", texts[i])
	}
	if n := len(b.coreSrv.Requests()); n != 0 {
		t.Errorf("%d model calls after the restart, want none", n)
	}
	b.checkReports(t)
}

// TestCoreReportResentAfterRestart restarts after a job ended: its report
// is sent again under the same ID (choird's outbox drops the duplicate), or
// written now if the crash came before it.
func TestCoreReportResentAfterRestart(t *testing.T) {
	t.Parallel()
	first := setupCores(t, coreOpts{})
	first.edgeSrv.Add(llmtest.ToolCalls(spawnCall("s1", "j", "Say hi.")), llmtest.Text("Started."))
	// The job answers once the edge has: the log cut at the job's end then
	// holds the edge's whole turn, which a restart would otherwise resume.
	started := make(chan struct{})
	first.coreSrv.SetResponder(func(ctx context.Context, _ *llmtest.Request) llmtest.Step {
		select {
		case <-started:
		case <-ctx.Done():
		}
		return llmtest.Text("hi")
	})
	if err := first.edge.Deliver(lane.UserMessage{Text: "say hi"}); err != nil {
		t.Fatal(err)
	}
	first.waitMessage(t, "Started.")
	close(started)
	first.waitMessage(t, `Core job "j" completed`)
	first.checkReports(t)
	_, firstIDs := first.messages()
	evs := first.events(t)
	stopped := first.find(t, rpc.EventCoreStopped, "")[0]

	for name, history := range map[string][]rpc.Event{
		"ReportCommitted":       evs,
		"ReportNotYetCommitted": slices.DeleteFunc(slices.Clone(evs), func(ev rpc.Event) bool { return ev.Rev > stopped.Rev }),
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setupCores(t, coreOpts{history: history})
			b.waitMessage(t, `Core job "j" completed`)
			_, ids := b.messages()
			want := lane.MessageID("core_report", stopped.Hash)
			if !slices.Contains(ids, want) || !slices.Contains(firstIDs, want) {
				t.Errorf("report IDs: first session %v, resumed %v, want %s in both", firstIDs, ids, want)
			}
			reports := 0
			for _, ev := range b.find(t, rpc.EventModelOutput, "edge") {
				if strings.Contains(string(ev.Payload), `"source":"core_report"`) {
					reports++
				}
			}
			if reports != 1 {
				t.Errorf("%d report events in the log, want 1", reports)
			}
		})
	}

	// A tail that reaches back before the snapshot, for the windows, does
	// not bring back the reports sent before it.
	t.Run("ReportSentBeforeTheSnapshot", func(t *testing.T) {
		t.Parallel()
		head := evs[len(evs)-1].Rev
		b := setupCores(t, coreOpts{history: evs, snapRev: head})
		b.edgeSrv.Add(llmtest.Text("Hello again."))
		if err := b.edge.Deliver(lane.UserMessage{Text: "hi"}); err != nil {
			t.Fatal(err)
		}
		b.waitMessage(t, "Hello again.")
		if texts, ids := b.messages(); slices.Contains(ids, lane.MessageID("core_report", stopped.Hash)) {
			t.Errorf("the report was sent again: %q", texts)
		}
	})
}
