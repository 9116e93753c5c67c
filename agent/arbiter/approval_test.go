package arbiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/rpc"
)

// approvals plays choird's REQUEST_APPROVAL: one approval per request ID,
// as the pending_approvals row unique on (session, request_id) does.
type approvals struct {
	mu    sync.Mutex
	byReq map[string]rpc.ApprovalResponse
	reqs  []rpc.ApprovalRequest
	ids   []string
	fail  error
}

func (a *approvals) RequestApproval(_ context.Context, requestID string, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail != nil {
		return rpc.ApprovalResponse{}, a.fail
	}
	if err := req.Validate(); err != nil {
		return rpc.ApprovalResponse{}, err
	}
	a.reqs = append(a.reqs, req)
	a.ids = append(a.ids, requestID)
	if r, ok := a.byReq[requestID]; ok {
		return r, nil
	}
	r := rpc.ApprovalResponse{ApprovalID: "appr-" + string(rune('a'+len(a.byReq))), Status: rpc.ApprovalPending}
	a.byReq[requestID] = r
	return r, nil
}

func setupApprovals(t *testing.T) (*bundle, *approvals) {
	t.Helper()
	ws := t.TempDir()
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	ap := &approvals{byReq: map[string]rpc.ApprovalResponse{}}
	locks := lock.New()
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Locks: locks, Env: tool.Env{Workspace: ws}, Approvals: ap})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { arb.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &bundle{arb: arb, log: log, ws: ws, locks: locks}, ap
}

const proposeToolInput = `{"change":"add","name":"choir.repo.status","description":"Show the git status of the workspace.",
"parameters":{"type":"object"},"behavior":"Runs git status and returns it.","runtime":{"side_effect":"read","trust":"own"},
"rationale":"The user asks about\nuncommitted work every day."}`

func TestMetaToolsRequestApproval(t *testing.T) {
	t.Parallel()

	t.Run("ProposalIsFiledAndAnsweredAtOnce", func(t *testing.T) {
		t.Parallel()
		b, ap := setupApprovals(t)
		out, err := b.arb.Propose(context.Background(), arbiter.Proposal{Owner: lock.Edge, CallID: "edge-1-call_1",
			Tool: tool.NameProposeTool, Input: json.RawMessage(proposeToolInput)})
		if err != nil {
			t.Fatal(err)
		}
		if out.Rejected != nil || out.Result.Status != tool.StatusSuccess || len(out.Locks) != 0 {
			t.Fatalf("outcome = %+v", out)
		}
		var res struct {
			ApprovalID string `json:"approval_id"`
			Status     string `json:"status"`
			Note       string `json:"note"`
			Request    string `json:"request"`
		}
		if err := json.Unmarshal(out.Result.Output, &res); err != nil {
			t.Fatal(err)
		}
		want := "add tool choir.repo.status: The user asks about uncommitted work every day."
		if res.ApprovalID != "appr-a" || res.Status != "pending" || res.Note == "" || res.Request != want {
			t.Errorf("tool answer = %+v", res)
		}
		if len(ap.reqs) != 1 {
			t.Fatalf("%d approval requests, want 1", len(ap.reqs))
		}
		r := ap.reqs[0]
		if r.RequestType != tool.NameProposeTool || r.Summary != want || ap.ids[0] != "approval:edge-1-call_1" {
			t.Errorf("request = %+v under id %s", r, ap.ids[0])
		}
		var payload, input map[string]any
		json.Unmarshal(r.Payload, &payload)
		json.Unmarshal([]byte(proposeToolInput), &input)
		if payload["name"] != input["name"] || payload["behavior"] != input["behavior"] || len(payload) != len(input) {
			t.Errorf("payload = %s, want the validated input", r.Payload)
		}
		if got := strings.Join(types(b.events(t)), ","); got != "tool_call_committed,tool_result_committed" {
			t.Errorf("events = %s", got)
		}
	})

	t.Run("SameCallFindsTheFirstApproval", func(t *testing.T) {
		t.Parallel()
		b, ap := setupApprovals(t)
		var first, second arbiter.Outcome
		for i, o := range []*arbiter.Outcome{&first, &second} {
			var err error
			*o, err = b.arb.Propose(context.Background(), arbiter.Proposal{Owner: lock.Edge, CallID: "edge-7-call_x",
				Tool: tool.NameProposeTool, Input: json.RawMessage(proposeToolInput)})
			if err != nil {
				t.Fatalf("attempt %d: %v", i, err)
			}
		}
		if string(first.Result.Output) != string(second.Result.Output) || len(ap.byReq) != 1 {
			t.Errorf("a retried call filed %d approvals: %s, %s", len(ap.byReq), first.Result.Output, second.Result.Output)
		}
	})

	t.Run("SeveralArePendingAtOnce", func(t *testing.T) {
		t.Parallel()
		b, ap := setupApprovals(t)
		skill := `{"change":"add","spec":{"name":"triage","description":"Sort the inbox.","initial_state":"a",
"states":{"a":{"objective":"Sort.","transitions":[{"on":"complete","to":"b"}]},"b":{"terminal":true}},"max_steps":5},"rationale":"Mail piles up."}`
		var wg sync.WaitGroup
		for i, in := range []struct{ tool, input string }{
			{tool.NameProposeTool, proposeToolInput}, {tool.NameProposeSkill, skill}} {
			wg.Go(func() {
				out, err := b.arb.Propose(context.Background(), arbiter.Proposal{Owner: lock.Edge,
					CallID: "edge-" + string(rune('1'+i)), Tool: in.tool, Input: json.RawMessage(in.input)})
				if err != nil || out.Result.Status != tool.StatusSuccess {
					t.Errorf("%s: %+v, %v", in.tool, out, err)
				}
			})
		}
		wg.Wait()
		if len(ap.byReq) != 2 {
			t.Fatalf("%d approvals filed, want 2", len(ap.byReq))
		}
		var summaries []string
		for _, r := range ap.reqs {
			summaries = append(summaries, r.Summary)
		}
		if !strings.Contains(strings.Join(summaries, "|"), "add skill triage: Mail piles up.") {
			t.Errorf("summaries = %q", summaries)
		}
	})

	t.Run("InvalidProposalIsRejectedWithoutAsking", func(t *testing.T) {
		t.Parallel()
		b, ap := setupApprovals(t)
		out := propose(t, b, lock.Edge, tool.NameProposeTool, `{"change":"add","name":"x"}`)
		if out.Rejected == nil || out.Rejected.Kind != "invalid_input" {
			t.Fatalf("outcome = %+v", out)
		}
		if len(ap.reqs) != 0 {
			t.Errorf("an invalid proposal reached choird: %+v", ap.reqs)
		}
	})

	t.Run("ProposalFailingTheValidatorsNeverReachesAPerson", func(t *testing.T) {
		t.Parallel()
		b, ap := setupApprovals(t)
		// Schema-valid, but the manifest the loader builds is not: a lock
		// on a field the input does not have, and a name already taken.
		bad := `{"change":"add","name":"%s","description":"d","parameters":{"type":"object","properties":{}},
"behavior":"b","runtime":{"side_effect":"read","trust":"own","locks":[{"resource":"file:{path}","mode":"S"}]},"rationale":"r"}`
		out := propose(t, b, lock.Edge, tool.NameProposeTool, fmt.Sprintf(bad, "choir.fs.read"))
		if out.Result.Status != tool.StatusError || !strings.Contains(out.Result.Summary, "already exists") {
			t.Errorf("outcome = %+v", out.Result)
		}
		out = propose(t, b, lock.Edge, tool.NameProposeTool, fmt.Sprintf(bad, "notes.count"))
		if out.Result.Status != tool.StatusError || !strings.Contains(out.Result.Summary, "{path}") {
			t.Errorf("outcome = %+v", out.Result)
		}
		skill := `{"change":"add","spec":{"name":"s","description":"d","initial_state":"a","states":{"a":{"objective":"o",
"allowed_tools":["no.such.tool"],"transitions":[{"on":"complete","to":"b"}]},"b":{"terminal":true}},"max_steps":3},"rationale":"r"}`
		out = propose(t, b, lock.Edge, tool.NameProposeSkill, skill)
		if out.Result.Status != tool.StatusError || !strings.Contains(out.Result.Summary, "no.such.tool") {
			t.Errorf("skill outcome = %+v", out.Result)
		}
		if len(ap.reqs) != 0 {
			t.Errorf("an invalid proposal reached choird: %+v", ap.reqs)
		}
	})

	t.Run("ChoirdFailureIsAToolError", func(t *testing.T) {
		t.Parallel()
		b, ap := setupApprovals(t)
		ap.fail = errors.New("choird unreachable")
		out := propose(t, b, lock.Edge, tool.NameProposeTool, proposeToolInput)
		if out.Result.Status != tool.StatusError || !strings.Contains(out.Result.Summary, "choird unreachable") {
			t.Errorf("outcome = %+v", out.Result)
		}
	})
}

func TestApprovalRequestID(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ call, want string }{
		{"edge-3-call_abc", "approval:edge-3-call_abc"},
		{"edge-3-call/with space", "approval:"},
	} {
		got := arbiter.ApprovalRequestID(c.call)
		if !rpc.ValidID(got) || !strings.HasPrefix(got, c.want) || got != arbiter.ApprovalRequestID(c.call) {
			t.Errorf("ApprovalRequestID(%q) = %q", c.call, got)
		}
	}
}
