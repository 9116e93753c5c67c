package arbiter_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/rpc"
)

// TestGateRunsAnApprovedCallOnce: a gated call runs under the approval
// the edge lane carries only with exactly the approved input (key order
// aside), and once; the same call made again, by the lane or by the model
// after choird answers approved, does not run again; an approval of
// another input lets nothing run.
func TestGateRunsAnApprovedCallOnce(t *testing.T) {
	t.Parallel()
	var runs atomic.Int64
	gated := funcTool{spec: tool.Spec{
		LLM: tool.LLMView{Name: "ext.files.delete", Description: "delete a file",
			Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"n":{"type":"integer"}},"additionalProperties":false}`)},
		Runtime: tool.Runtime{TimeoutMS: 5000, SideEffect: tool.SideEffectExternal, Version: "1", Approval: true},
	}, fn: func(context.Context) (tool.Result, error) {
		runs.Add(1)
		return tool.SuccessResult("deleted", map[string]bool{"deleted": true}), nil
	}}
	reg, err := builtin.Build(builtin.Config{Tools: []tool.Tool{gated}})
	if err != nil {
		t.Fatal(err)
	}
	_, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	ap := &approvals{byReq: map[string]rpc.ApprovalResponse{}}
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Env: tool.Env{Workspace: t.TempDir()}, Approvals: ap})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { arb.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })

	call := func(ctx context.Context, id, input string) string {
		t.Helper()
		out, err := arb.Propose(ctx, arbiter.Proposal{Owner: lock.Edge, CallID: id, Tool: "ext.files.delete", Input: json.RawMessage(input)})
		if err != nil {
			t.Fatal(err)
		}
		return string(out.ForModel())
	}
	other := tool.WithApproved(ctx, tool.Approved{ID: "appr-z", Tool: "ext.files.delete", Payload: json.RawMessage(`{"path":"b.txt"}`)})
	if got := call(other, "c1", `{"path":"a.txt","n":1}`); !strings.Contains(got, "pending") || runs.Load() != 0 {
		t.Errorf("under another input's approval: %s, %d runs; want it filed and not run", got, runs.Load())
	}
	approved := tool.WithApproved(ctx, tool.Approved{ID: "appr-y", Tool: "ext.files.delete",
		Payload: json.RawMessage(`{ "n": 1, "path": "a.txt" }`)})
	if got := call(approved, "approved-appr-y", `{"path":"a.txt","n":1}`); !strings.Contains(got, `"deleted":true`) || runs.Load() != 1 {
		t.Errorf("under its approval: %s, %d runs; want it run", got, runs.Load())
	}
	if got := call(approved, "approved-appr-y-again", `{"path":"a.txt","n":1}`); !strings.Contains(got, "already_ran") || runs.Load() != 1 {
		t.Errorf("again under the same approval: %s, %d runs; want already_ran and no run", got, runs.Load())
	}

	// choird answers approved to the model's own call, once per approval.
	ap.mu.Lock()
	for req, r := range ap.byReq {
		r.Status = rpc.ApprovalApproved
		ap.byReq[req] = r
	}
	ap.mu.Unlock()
	if got := call(ctx, "c2", `{"path":"a.txt","n":1}`); !strings.Contains(got, `"deleted":true`) || runs.Load() != 2 {
		t.Errorf("the model's call once approved: %s, %d runs; want it run", got, runs.Load())
	}
	if got := call(ctx, "c3", `{"n":1,"path":"a.txt"}`); !strings.Contains(got, "already_ran") || runs.Load() != 2 {
		t.Errorf("the model's second call: %s, %d runs; want already_ran", got, runs.Load())
	}
}
