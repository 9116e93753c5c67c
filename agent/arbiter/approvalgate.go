package arbiter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/rpc"
)

// gate holds a call of a tool whose runtime view requires approval
// (runtime.approval, e.g. an MCP tool its server's manifest marks so)
// until a person approves that exact call: the request ID derives from the
// tool and its input, so the first call files the request and answers
// pending, and the same call made once it is approved runs (the edge lane
// makes it as soon as choird pushes the approval, tool.Approved). ok reports
// that it may run; otherwise res is what the model is told.
//
// It also holds the calls the untrusted-input policy holds (d.held,
// policy.go): their card names the sources the lane read.
func (a *Arbiter) gate(ctx context.Context, p Proposal, d decision) (res tool.Result, ok bool, err error) {
	// The call the edge lane runs once a person approved it carries the
	// approval; the input must be exactly what the person was shown.
	if ap, ok := tool.ApprovedFor(ctx, p.Tool, p.Input); ok {
		if !a.ran.take(ap.ID) {
			return alreadyRan(ap.ID), false, nil
		}
		return tool.Result{}, true, nil
	}
	if a.cfg.Approvals == nil {
		return tool.Result{}, false, fmt.Errorf("%s needs approval, and no connection to choird is configured for it", p.Tool)
	}
	var canon any
	if json.Unmarshal(p.Input, &canon) != nil {
		canon = string(p.Input)
	}
	in, _ := json.Marshal(canon) // sorted keys: the same input, the same request
	sum := sha256.Sum256(append([]byte(p.Tool+"\x00"), in...))
	reqID := "approval:gate-" + hex.EncodeToString(sum[:16])
	summary := ProposalSummary(p.Tool, p.Input)
	resp, err := a.cfg.Approvals.RequestApproval(ctx, reqID,
		rpc.ApprovalRequest{RequestType: p.Tool, Summary: summary, Payload: p.Input, Sources: d.sources})
	if err != nil {
		return tool.Result{}, false, fmt.Errorf("file the approval request: %w", err)
	}
	if resp.Status == rpc.ApprovalApproved {
		// One approval, one run: Choir ran it already when the approval
		// came, or the model made the same call twice.
		if !a.ran.take(resp.ApprovalID) {
			return alreadyRan(resp.ApprovalID), false, nil
		}
		return tool.Result{}, true, nil
	}
	out := map[string]any{"approval_id": resp.ApprovalID, "status": resp.Status, "request": summary}
	status := tool.StatusSuccess
	switch resp.Status {
	case rpc.ApprovalPending:
		out["note"] = "This tool needs a person's approval; nothing ran. " +
			"Once it is approved, Choir runs exactly this call for you and its result appears in your context; do not call it again."
		if d.held() {
			out["note"] = "This call needs a person's approval because " + d.why + ", and this lane has read what others wrote (" +
				strings.Join(d.sources, ", ") + "); nothing ran. If a person approves it, Choir runs exactly this call and its " +
				"result appears in your context; do not call it again."
		}
	default:
		status = tool.StatusError
		out["note"] = "A person rejected this call; it did not run."
	}
	b, err := json.Marshal(out)
	if err != nil {
		return tool.Result{}, false, err
	}
	return tool.Result{Status: status, Summary: fmt.Sprintf("approval %s %s", resp.ApprovalID, resp.Status), Output: b}, false, nil
}

// approvedRuns holds the approvals whose call has run in this session, so
// that one approval runs its call once. The zero value is ready.
type approvedRuns struct{ m sync.Map }

// take records that approval id's call runs now; false if it ran before.
func (r *approvedRuns) take(id string) bool {
	_, before := r.m.LoadOrStore(id, struct{}{})
	return !before
}

// alreadyRan is the answer to a gated call whose approval was used.
func alreadyRan(id string) tool.Result {
	b, _ := json.Marshal(map[string]any{"approval_id": id, "status": "already_ran",
		"note": "This approved call already ran once, when it was approved; its result is in your context. It did not run again."})
	return tool.Result{Status: tool.StatusSuccess, Summary: "approval " + id + " already used", Output: b}
}
