package arbiter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/choirhq/choir/agent/proposal"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/rpc"
)

// maxSummary bounds the one-line question an approval shows a person.
const maxSummary = 500

// approvalNote tells the model what a pending approval means for it.
const approvalNote = "Filed for a person to approve or reject; nothing is applied until then. " +
	"Do not wait: carry on or finish your answer. The outcome will appear in your context when it is decided."

// requestApproval executes a meta tool (spec 8.10): the validated input
// becomes an approval request, and the tool answers at once with the
// approval's ID. The run never blocks on a person; several approvals may
// be pending together. The request ID derives from the call ID, so a retry
// of the same call (a transport retry, or the same call proposed again)
// finds the first approval instead of filing a second.
//
// srcs are the untrusted sources of the proposing lane, which the card
// names (issue 30).
func (a *Arbiter) requestApproval(ctx context.Context, def *tool.Def, p Proposal, srcs []string) (tool.Result, error) {
	if a.cfg.Approvals == nil {
		return tool.Result{}, fmt.Errorf("%s needs approval, and no connection to choird is configured for it", p.Tool)
	}
	if err := a.checkProposal(p); err != nil {
		return tool.ErrorResult("proposal refused before any person saw it; fix it and propose again: %s", err.Error()), nil
	}
	if d := def.Runtime().TimeoutMS; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(d)*time.Millisecond)
		defer cancel()
	}
	summary := ProposalSummary(p.Tool, p.Input)
	reqID := ApprovalRequestID(p.CallID)
	if key := tool.CallKey(ctx); key != "" {
		// A call that wrote ahead: its key is unique to the agent, so the
		// same call filed again after a restart, from a new session, finds
		// the first approval.
		reqID = "approval:" + key
	}
	resp, err := a.cfg.Approvals.RequestApproval(ctx, reqID,
		rpc.ApprovalRequest{RequestType: p.Tool, Summary: summary, Payload: p.Input, Sources: srcs})
	if err != nil {
		return tool.Result{}, fmt.Errorf("file the approval request: %w", err)
	}
	out := map[string]any{"approval_id": resp.ApprovalID, "status": resp.Status, "request": summary}
	line := fmt.Sprintf("approval %s %s", resp.ApprovalID, resp.Status)
	if resp.Status == rpc.ApprovalPending {
		out["note"] = approvalNote
	} else {
		// The same call filed before and already decided (a retry after
		// the person answered).
		out["note"] = "This request was already " + string(resp.Status) + "."
	}
	b, err := json.Marshal(out)
	if err != nil {
		return tool.Result{}, err
	}
	return tool.Result{Status: tool.StatusSuccess, Summary: line, Output: b}, nil
}

// checkProposal validates a tool or skill proposal with the validators the
// image build and the agent's start-up use, against the live registry;
// choird checks config and repo changes, which it alone can see.
func (a *Arbiter) checkProposal(p Proposal) error {
	var known func(string) bool
	if a.cfg.Tools != nil {
		known = a.cfg.Tools.Has
	}
	switch p.Tool {
	case proposal.TypeTool:
		_, err := proposal.ParseTool(p.Input, known)
		return err
	case proposal.TypeSkill:
		s, spec, err := proposal.ParseSkill(p.Input)
		if err != nil {
			return err
		}
		return proposal.CheckSkill(s, spec, known, nil)
	}
	return nil
}

// ApprovalRequestID is the REQUEST_APPROVAL request ID of the meta tool
// call callID: the same for every attempt of that call.
func ApprovalRequestID(callID string) string {
	id := "approval:" + callID
	if rpc.ValidID(id) {
		return id
	}
	// A provider's call ID with characters the envelope does not allow.
	sum := sha256.Sum256([]byte(callID))
	return "approval:" + hex.EncodeToString(sum[:16])
}

// ProposalSummary is the one line a person reads to decide a proposal: the
// change and the name, then the rationale.
func ProposalSummary(toolName string, input json.RawMessage) string {
	var in struct {
		Change string `json:"change"`
		Name   string `json:"name"`
		Spec   struct {
			Name string `json:"name"`
		} `json:"spec"`
		Rationale string `json:"rationale"`
	}
	json.Unmarshal(input, &in) //nolint:errcheck // the input was validated against the tool's schema
	kind, name := "", in.Name
	switch toolName {
	case tool.NameProposeTool:
		kind = "tool"
	case tool.NameProposeSkill:
		kind, name = "skill", in.Spec.Name
	case tool.NameProposeConfig:
		kind = "config change"
	case tool.NameProposeRepo:
		var r proposal.Repo
		json.Unmarshal(input, &r) //nolint:errcheck // validated against the schema
		kind, name = "repo change", r.Branch
	}
	head := strings.Join(strings.Fields(strings.Join([]string{in.Change, kind, name}, " ")), " ")
	if head == "" {
		head = toolName
	}
	line := head
	if r := strings.Join(strings.Fields(in.Rationale), " "); r != "" {
		line += ": " + r
	}
	if len(line) > maxSummary {
		cut := maxSummary - len("…")
		for cut > 0 && !utf8RuneStart(line[cut]) {
			cut--
		}
		line = line[:cut] + "…"
	}
	return line
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
