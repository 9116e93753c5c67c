package arbiter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/rpc"
)

// gate holds a call of a tool whose runtime view requires approval
// (runtime.approval, e.g. an MCP tool its server's manifest marks so)
// until a person approves that exact call: the request ID derives from the
// tool and its input, so the first call files the request and answers
// pending, and the same call made once it is approved runs. ok reports
// that it may run; otherwise res is what the model is told.
func (a *Arbiter) gate(ctx context.Context, p Proposal) (res tool.Result, ok bool, err error) {
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
		rpc.ApprovalRequest{RequestType: p.Tool, Summary: summary, Payload: p.Input})
	if err != nil {
		return tool.Result{}, false, fmt.Errorf("file the approval request: %w", err)
	}
	if resp.Status == rpc.ApprovalApproved {
		return tool.Result{}, true, nil
	}
	out := map[string]any{"approval_id": resp.ApprovalID, "status": resp.Status, "request": summary}
	status := tool.StatusSuccess
	switch resp.Status {
	case rpc.ApprovalPending:
		out["note"] = "This tool needs a person's approval; nothing ran. " +
			"Once it is approved (it will appear in your context), make the same call again with the same input."
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
