package lane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/rpc"
)

// This file is what the edge lane does with an approval's outcome (issue
// 31): it takes each outcome once, and an approved gated call (a
// runtime.approval tool, choir.email.send) runs at once, with exactly the
// approved input, through the arbiter; then the lane gets a turn of its
// own, with no user message, in which the model tells the user what came
// of it. A rejection or a timeout is noted in the lane's context (once)
// and starts no turn: choird told the chat already. A proposal's outcome
// is noted likewise: choird applies it and reports each step to the chat.
//
// Exactly once across restarts: choird pushes an outcome until the
// agent's replicated log shows it taken, that is, until it sees the
// injected_instruction event of source "approval" naming it
// (HeartbeatApply). The lane commits that event first and, before an
// approved call runs, has it acknowledged by choird (EdgeConfig.FlushFunc):
// a session that dies before then lost the event with it, and the next
// session is pushed the outcome again and runs the call; once choird holds
// the event it never pushes the outcome again, so the call never runs
// twice. A session that ends while it waits for that acknowledgement
// gives the outcome back (release) in the same flush. A session that dies
// while the call runs leaves it run at most once.

// approvedCallID is the call ID of the run of approval id's gated call.
func approvedCallID(id string) string { return "approved-" + id }

// takeApproval reports whether the outcome of approval id is new to this
// chain, and records it taken. The log's tail seeds what was taken, so an
// outcome pushed again after a restart whose event did reach choird is
// dropped.
func (e *Edge) takeApproval(id string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.box.taken == nil {
		e.box.taken = map[string]struct{}{}
		head, _ := e.cfg.Log.Head()
		if evs, err := e.cfg.Log.Range(e.cfg.Log.Oldest(), head); err == nil {
			for _, ev := range evs {
				switch id, released := approvalIDOf(ev); {
				case id == "":
				case released:
					delete(e.box.taken, id)
				default:
					e.box.taken[id] = struct{}{}
				}
			}
		}
	}
	if _, ok := e.box.taken[id]; ok {
		return false
	}
	e.box.taken[id] = struct{}{}
	return true
}

// approvalIDOf returns the approval whose outcome an event took, or gave
// back (released), or "".
func approvalIDOf(ev rpc.Event) (id string, released bool) {
	if ev.Type != rpc.EventInjectedInstruction {
		return "", false
	}
	var p approvalEvent
	if json.Unmarshal(ev.Payload, &p) != nil || p.Source != approvalSource {
		return "", false
	}
	return p.ApprovalID, p.Released
}

// approvedCall is the call an approval lets run: its tool and the input
// that is exactly what a person approved. ok is false for an outcome that
// runs nothing here (a rejection, a proposal).
func (e *Edge) approvedCall(r ApprovalResolution) (def *tool.Def, input json.RawMessage, ok bool) {
	if r.Status != string(rpc.ApprovalApproved) || r.RequestType == "" || len(r.Payload) == 0 || e.cfg.Tools == nil {
		return nil, nil, false
	}
	def, found := e.cfg.Tools.Lookup(r.RequestType)
	if !found {
		return nil, nil, false
	}
	input, err := def.ApprovedInput(r.Payload)
	if err != nil {
		if !errors.Is(err, tool.ErrNotRunnable) {
			e.cfg.Logger.Warn("approved call unreadable; not run", slog.String("approval_id", r.ApprovalID),
				slog.String("error", err.Error()))
		}
		return nil, nil, false
	}
	return def, input, true
}

// takeApprovals takes the outcomes that reached the lane, each once, and
// runs the approved calls among them. seen is what the model must be
// shown of them; ran reports that a call ran, so that an IDLE lane gives
// the model a turn to tell the user.
func (e *Edge) takeApprovals(ctx context.Context, rs []ApprovalResolution) (seen []llm.Message, ran bool, err error) {
	for i, r := range rs {
		if _, _, runs := e.approvedCall(r); runs && e.CoresRunning() {
			// The edge may run only read-only tools while a core job runs
			// (spec 7.2): the call waits, untaken, for the next wake after
			// the jobs end (a job's report wakes the lane).
			e.deferApproval(ctx, r)
			continue
		}
		if !e.takeApproval(r.ApprovalID) {
			e.cfg.Logger.InfoContext(ctx, "approval outcome already taken; dropped", slog.String("approval_id", r.ApprovalID))
			continue
		}
		def, input, runs := e.approvedCall(r)
		ev, p, err := e.commitApproval(ctx, r, runs)
		if err != nil {
			e.untake(rs[i:])
			return seen, ran, err
		}
		seen = append(seen, llm.SystemMessage(p.Text))
		if !runs {
			continue
		}
		res, err := e.runApproved(ctx, r, def, input, ev)
		if err != nil {
			return seen, ran, err
		}
		seen, ran = append(seen, res), true
	}
	return seen, ran, nil
}

// deferApproval puts an outcome back in the mailbox, without waking the
// lane.
func (e *Edge) deferApproval(ctx context.Context, r ApprovalResolution) {
	e.cfg.Logger.InfoContext(ctx, "approved call waits for the core jobs to end", slog.String("approval_id", r.ApprovalID))
	e.mu.Lock()
	e.box.approvals = append(e.box.approvals, r)
	e.mu.Unlock()
}

// untake forgets outcomes not taken after all (their event was never
// committed): choird pushes them again.
func (e *Edge) untake(rs []ApprovalResolution) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, r := range rs {
		delete(e.box.taken, r.ApprovalID)
	}
}

// runApproved runs approval r's call once choird holds the event that took
// it (ev), and returns what the model is told of its result.
func (e *Edge) runApproved(ctx context.Context, r ApprovalResolution, def *tool.Def, input json.RawMessage, ev rpc.Event) (llm.Message, error) {
	if e.cfg.FlushFunc != nil {
		if err := e.cfg.FlushFunc(ctx, ev.Rev); err != nil {
			e.release(ctx, r)
			return llm.Message{}, fmt.Errorf("approval %s: choird did not acknowledge its outcome, so the call did not run: %w",
				r.ApprovalID, err)
		}
	}
	e.toolCalls.Add(1)
	actx := tool.WithApproved(ctx, tool.Approved{ID: r.ApprovalID, Tool: def.Name(), Payload: r.Payload})
	out, err := e.cfg.Arbiter.Propose(actx, arbiter.Proposal{Owner: lock.Edge, CallID: approvedCallID(r.ApprovalID),
		Tool: def.Name(), Input: input})
	if err != nil {
		return llm.Message{}, fmt.Errorf("run approved call of approval %s: %w", r.ApprovalID, err)
	}
	e.cfg.Logger.InfoContext(ctx, "approved call ran", slog.String("approval_id", r.ApprovalID),
		slog.String("tool", def.Name()), slog.Bool("rejected", out.Rejected != nil))
	return llm.SystemMessage(fmt.Sprintf("Approval %s: Choir ran the approved %s call (call %s) with exactly the approved input. "+
		"Its result: %s", r.ApprovalID, def.Name(), approvedCallID(r.ApprovalID), out.ForModel())), nil
}

// release gives back an outcome whose call could not run (the session
// ends, or choird cannot be reached): an event that choird, seeing it
// with the one that took the outcome, does not count as taken, so the
// next session is pushed the outcome again. The session's last flush
// carries both; one that never reaches choird leaves neither.
func (e *Edge) release(ctx context.Context, r ApprovalResolution) {
	e.untake([]ApprovalResolution{r})
	ev := approvalEvent{Source: approvalSource, ApprovalID: r.ApprovalID, Status: r.Status, ResolvedBy: r.ResolvedBy,
		ResolvedAt: r.ResolvedAt.UTC(), Released: true,
		Text: fmt.Sprintf("Approval %s: its call did not run in this session; Choir runs it in the next.", r.ApprovalID)}
	if _, err := e.cfg.Arbiter.Commit(context.WithoutCancel(ctx), rpc.EventInjectedInstruction, "edge", ev); err != nil {
		e.cfg.Logger.WarnContext(ctx, "approval not released", slog.String("approval_id", r.ApprovalID),
			slog.String("error", err.Error()))
	}
}

// approvalTurnNote closes the prompt of the turn an approved call starts:
// nobody wrote, and the model is to tell the user what happened.
const approvalTurnNote = "No new message from the user: a person's approval ran the call above. " +
	"Tell the user in a short reply what came of it; do not make the same call again."

// approvalTurn is the turn an IDLE lane takes once approved calls ran:
// the context so far (through before, the head before the outcomes were
// taken), what was taken, and the note. Its answer goes to the DM like
// any other.
func (e *Edge) approvalTurn(ctx context.Context, before int64, seen []llm.Message) error {
	e.set(EdgeContextReady)
	msgs := append(e.layoutPrompt(before), seen...)
	return e.turn(ctx, append(msgs, llm.SystemMessage(approvalTurnNote)))
}
