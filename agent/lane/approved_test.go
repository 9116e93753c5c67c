package lane_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/rpc"
)

// gatedTool is a tool whose every call waits for a person's approval
// (runtime.approval), as an MCP tool its manifest marks so; it counts its
// runs and keeps their inputs.
type gatedTool struct {
	runs   atomic.Int64
	mu     sync.Mutex
	inputs []string
}

func (g *gatedTool) Spec() tool.Spec {
	return tool.Spec{LLM: tool.LLMView{Name: "ext.files.delete", Description: "Delete a file on the file server.",
		Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"}},"required":["path"],"additionalProperties":false}`)},
		Runtime: tool.Runtime{TimeoutMS: 5000, SideEffect: tool.SideEffectExternal, Version: "1.0", Approval: true}}
}

func (g *gatedTool) Execute(_ context.Context, _ tool.Env, input json.RawMessage) (tool.Result, error) {
	g.runs.Add(1)
	g.mu.Lock()
	g.inputs = append(g.inputs, string(input))
	g.mu.Unlock()
	return tool.SuccessResult("deleted", map[string]any{"deleted": true}), nil
}

// decider files approvals as choird does, one per request ID, and answers
// with the status a person gave.
type decider struct {
	mu     sync.Mutex
	ids    map[string]string
	status map[string]rpc.ApprovalStatus
}

func (d *decider) RequestApproval(_ context.Context, requestID string, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error) {
	if err := req.Validate(); err != nil {
		return rpc.ApprovalResponse{}, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	id, ok := d.ids[requestID]
	if !ok {
		id = fmt.Sprintf("appr-%d", len(d.ids)+1)
		d.ids[requestID] = id
		d.status[id] = rpc.ApprovalPending
	}
	return rpc.ApprovalResponse{ApprovalID: id, Status: d.status[id]}, nil
}

func (d *decider) decide(id string, s rpc.ApprovalStatus) {
	d.mu.Lock()
	d.status[id] = s
	d.mu.Unlock()
}

type gatedBundle struct {
	*bundle
	tool    *gatedTool
	decider *decider
	// flushed are the revisions the lane awaited choird's ack of.
	flushed chan int64
	// failFlushes is how many flushes fail next, as when the session
	// ends before choird acknowledges.
	failFlushes atomic.Int32
}

func setupGated(t *testing.T, steps ...llmtest.Step) *gatedBundle {
	t.Helper()
	return setupGatedOn(t, nil, steps...)
}

// setupGatedOn is setupGated on a resumed chain whose tail is hist.
func setupGatedOn(t *testing.T, hist []rpc.Event, steps ...llmtest.Step) *gatedBundle {
	t.Helper()
	srv := llmtest.NewServer(t, steps...)
	g := &gatedBundle{tool: &gatedTool{}, decider: &decider{ids: map[string]string{}, status: map[string]rpc.ApprovalStatus{}},
		flushed: make(chan int64, 16)}
	reg, err := tool.New([]tool.Tool{g.tool})
	if err != nil {
		t.Fatal(err)
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if n := len(hist); n > 0 {
		log, app, err = commitlog.NewWithHistory(hist[n-1].Rev, hist[n-1].Hash, hist)
	}
	if err != nil {
		t.Fatal(err)
	}
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Env: tool.Env{Workspace: t.TempDir()}, Approvals: g.decider})
	g.bundle = &bundle{log: log, out: newSink(), srv: srv, done: make(chan error, 1)}
	g.edge = lane.NewEdge(lane.EdgeConfig{Arbiter: arb, Log: log, Tools: reg, LLM: &llm.Client{}, Model: srv.Model, Out: g.out,
		Identity: lane.Identity{Instructions: "You are the edge lane."},
		FlushFunc: func(_ context.Context, rev int64) error {
			if g.failFlushes.Add(-1) >= 0 {
				return context.Canceled
			}
			if acked, _ := log.Head(); acked < rev {
				return fmt.Errorf("flush to %d beyond the head %d", rev, acked)
			}
			g.flushed <- rev
			return nil
		}})
	ctx, cancel := context.WithCancel(context.Background())
	arbDone := make(chan struct{})
	go func() { arb.Run(ctx); close(arbDone) }()
	go func() { g.done <- g.edge.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-g.done; <-arbDone })
	return g
}

// askToDelete is the turn that files the approval: the model calls the
// gated tool and answers once it is told the call pends.
func askToDelete(id *string) []llmtest.Step {
	return []llmtest.Step{
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "ext.files.delete", Arguments: `{"path":"old.txt"}`}),
		llmtest.Text("I asked for approval.").Expect(func(t testing.TB, r *llmtest.Request) {
			var res struct {
				Output struct {
					ApprovalID string `json:"approval_id"`
					Status     string `json:"status"`
				} `json:"output"`
			}
			json.Unmarshal([]byte(lastToolResult(t, r)), &res) //nolint:errcheck // checked below
			if res.Output.Status != "pending" || res.Output.ApprovalID == "" {
				t.Errorf("tool answer = %s", lastToolResult(t, r))
			}
			*id = res.Output.ApprovalID
		}),
	}
}

func TestEdgeApprovedCallRuns(t *testing.T) {
	t.Parallel()

	t.Run("ApprovedWhileIdleRunsOnceAndTheLaneTellsTheUser", func(t *testing.T) {
		t.Parallel()
		var id string
		steps := append(askToDelete(&id),
			llmtest.Text("Done: old.txt is deleted.").Expect(func(t testing.TB, r *llmtest.Request) {
				if !hasMessage(r, "system", "Choir ran the approved ext.files.delete call") || !hasMessage(r, "system", `"deleted":true`) {
					t.Errorf("the approved call's result is not in the prompt: %+v", r.Messages)
				}
				if m := r.Last(); m.Role != "system" || !strings.Contains(m.Content, "No new message from the user") {
					t.Errorf("last message = %+v", m)
				}
			}),
			// The model makes the approved call again: it does not run twice.
			llmtest.ToolCalls(llmtest.Call{ID: "2", Name: "ext.files.delete", Arguments: `{"path":"old.txt"}`}),
			llmtest.Text("It was already done.").Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); !strings.Contains(c, "already_ran") {
					t.Errorf("the second call's answer = %s", c)
				}
			}))
		g := setupGated(t, steps...)
		g.edge.Deliver(lane.UserMessage{Text: "delete old.txt"})
		if got := g.out.next(t); got != "I asked for approval." {
			t.Fatalf("answer = %q", got)
		}
		if n := g.tool.runs.Load(); n != 0 {
			t.Fatalf("the gated tool ran %d times before the approval", n)
		}
		g.decider.decide(id, rpc.ApprovalApproved)
		r := lane.ApprovalResolution{ApprovalID: id, Status: "approved", ResolvedBy: "telegram:dm-1", ResolvedAt: time.Now(),
			RequestType: "ext.files.delete", Payload: json.RawMessage(`{ "path": "old.txt" }`)}
		g.edge.ResolveApproval(r)
		if got := g.out.next(t); got != "Done: old.txt is deleted." {
			t.Fatalf("the lane told the user %q", got)
		}
		g.tool.mu.Lock()
		inputs := g.tool.inputs
		g.tool.mu.Unlock()
		if len(inputs) != 1 || inputs[0] != `{ "path": "old.txt" }` {
			t.Errorf("the gated tool ran with %q; want once, with the approved input", inputs)
		}
		evs := g.waitEvent(t, rpc.EventInjectedInstruction, 1)
		if p := payload(t, evs[0]); p["source"] != "approval" || p["approval_id"] != id || p["tool"] != "ext.files.delete" {
			t.Errorf("approval event = %s", evs[0].Payload)
		}
		// The call ran only after choird was to hold the event that took the
		// approval.
		select {
		case rev := <-g.flushed:
			if rev != evs[0].Rev {
				t.Errorf("flushed to %d, want the approval event's %d", rev, evs[0].Rev)
			}
		default:
			t.Error("the approved call ran without awaiting choird's ack of the approval event")
		}
		calls := g.ofType(t, rpc.EventToolCallCommitted)
		if last := payload(t, calls[len(calls)-1]); last["call_id"] != "approved-"+id || calls[len(calls)-1].Rev <= evs[0].Rev {
			t.Errorf("the approved call = %s at %d, after the approval event at %d", calls[len(calls)-1].Payload,
				calls[len(calls)-1].Rev, evs[0].Rev)
		}

		// The same outcome pushed again (choird pushed it before the ack,
		// or at the hello of a resumed session) is dropped.
		g.edge.ResolveApproval(r)
		g.edge.Deliver(lane.UserMessage{Text: "do it again"})
		if got := g.out.next(t); got != "It was already done." {
			t.Fatalf("answer = %q", got)
		}
		if n := g.tool.runs.Load(); n != 1 {
			t.Errorf("the gated tool ran %d times, want once", n)
		}
		if n := len(g.ofType(t, rpc.EventInjectedInstruction)); n != 1 {
			t.Errorf("%d approval events, want one", n)
		}
		g.srv.Done()
	})

	t.Run("OutcomeTheResumedTailTookIsDropped", func(t *testing.T) {
		t.Parallel()
		// The previous session took approval appr-9 and choird holds the
		// event; the outcome pushed again at the hello runs nothing.
		ev := rpc.Event{Rev: 1, Type: rpc.EventInjectedInstruction, Lane: "edge", CreatedAt: time.Now(),
			Payload: json.RawMessage(`{"source":"approval","approval_id":"appr-9","status":"approved","text":"Approval appr-9 was approved."}`)}
		if err := ev.Seal(rpc.Genesis); err != nil {
			t.Fatal(err)
		}
		g := setupGatedOn(t, []rpc.Event{ev}, llmtest.Text("hello"))
		g.edge.ResolveApproval(lane.ApprovalResolution{ApprovalID: "appr-9", Status: "approved", ResolvedBy: "telegram:dm-1",
			ResolvedAt: time.Now(), RequestType: "ext.files.delete", Payload: json.RawMessage(`{"path":"old.txt"}`)})
		g.edge.Deliver(lane.UserMessage{Text: "hi"})
		if got := g.out.next(t); got != "hello" {
			t.Fatalf("answer = %q", got)
		}
		if n := g.tool.runs.Load(); n != 0 {
			t.Errorf("the approved call ran %d times in the session after the one that took it", n)
		}
		if n := len(g.ofType(t, rpc.EventInjectedInstruction)); n != 1 {
			t.Errorf("%d approval events, want the one of the tail", n)
		}
		g.srv.Done()
	})

	t.Run("OutcomeNotAcknowledgedIsGivenBack", func(t *testing.T) {
		t.Parallel()
		var id string
		g := setupGated(t, append(askToDelete(&id), llmtest.Text("Done: old.txt is deleted."))...)
		g.edge.Deliver(lane.UserMessage{Text: "delete old.txt"})
		g.out.next(t)
		// The session ends while the lane waits for choird's ack: the call
		// does not run, and the outcome is given back in the log.
		g.failFlushes.Store(1)
		r := lane.ApprovalResolution{ApprovalID: id, Status: "approved", ResolvedBy: "telegram:dm-1", ResolvedAt: time.Now(),
			RequestType: "ext.files.delete", Payload: json.RawMessage(`{"path":"old.txt"}`)}
		g.edge.ResolveApproval(r)
		evs := g.waitEvent(t, rpc.EventInjectedInstruction, 2)
		if p := payload(t, evs[1]); p["approval_id"] != id || p["released"] != true {
			t.Errorf("second approval event = %s, want the outcome released", evs[1].Payload)
		}
		if n := g.tool.runs.Load(); n != 0 {
			t.Fatalf("the call ran %d times without choird's ack", n)
		}
		// Pushed again (in the next session, or this one): it runs now.
		g.edge.ResolveApproval(r)
		if got := g.out.next(t); got != "Done: old.txt is deleted." {
			t.Fatalf("the lane told the user %q", got)
		}
		if n := g.tool.runs.Load(); n != 1 {
			t.Errorf("the call ran %d times, want once", n)
		}
		g.srv.Done()
	})

	t.Run("RejectedIsNotedOnceAndStartsNoTurn", func(t *testing.T) {
		t.Parallel()
		var id string
		steps := append(askToDelete(&id),
			llmtest.Text("It was rejected, so nothing was deleted.").Expect(func(t testing.TB, r *llmtest.Request) {
				if !hasMessage(r, "system", "was rejected by timeout. It did not run") {
					t.Errorf("the rejection is not in the prompt: %+v", r.Messages)
				}
			}))
		g := setupGated(t, steps...)
		g.edge.Deliver(lane.UserMessage{Text: "delete old.txt"})
		g.out.next(t)
		calls := len(g.srv.Requests())
		r := lane.ApprovalResolution{ApprovalID: id, Status: "rejected", ResolvedBy: "timeout", ResolvedAt: time.Now(),
			RequestType: "ext.files.delete", Payload: json.RawMessage(`{"path":"old.txt"}`)}
		g.edge.ResolveApproval(r)
		g.waitEvent(t, rpc.EventInjectedInstruction, 1)
		g.edge.ResolveApproval(r)
		g.edge.Deliver(lane.UserMessage{Text: "and?"})
		g.out.next(t)
		if n := len(g.srv.Requests()); n != calls+1 {
			t.Errorf("%d model calls after the rejection, want only the one answering the user", n-calls)
		}
		if n := len(g.ofType(t, rpc.EventInjectedInstruction)); n != 1 {
			t.Errorf("%d approval events, want one", n)
		}
		if n := g.tool.runs.Load(); n != 0 {
			t.Errorf("the rejected call ran %d times", n)
		}
		g.srv.Done()
	})
}
