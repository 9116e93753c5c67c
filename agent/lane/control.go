package lane

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/rpc"
)

// This file holds what reaches the edge lane besides user messages:
// injected instructions, approval outcomes, cancel, compaction and stop
// requests. They wait in a mailbox and are applied by the lane's own
// goroutine at a safe point (spec 7.8): between model steps of a running
// turn, once every tool result of the step is committed, or at once when
// the lane is IDLE. Only an approved call that ran makes an IDLE lane call
// the model by itself, to tell the user (approved.go); a compaction
// request starts the working memory's compaction beside the lane.

// Injection is an instruction the user added with /inject: appended to the
// edge's context at the next safe point, never queued as a message.
type Injection struct {
	InboxID int64  `json:"inbox_id"`
	Text    string `json:"text"`
}

// ApprovalResolution is how an approval the lane asked for ended.
// RequestType and Payload are what was approved, as choird showed it: an
// approved gated call runs with exactly that (approved.go).
type ApprovalResolution struct {
	ApprovalID  string          `json:"approval_id"`
	Status      string          `json:"status"`
	ResolvedBy  string          `json:"resolved_by"`
	ResolvedAt  time.Time       `json:"resolved_at"`
	RequestType string          `json:"request_type,omitempty"`
	Payload     json.RawMessage `json:"payload,omitempty"`
}

// ErrDuplicateInbox is returned for a message or injection whose inbox row
// this session has already taken: choird redelivers rows it has not yet seen
// committed, so a second copy is expected now and then and is dropped.
var ErrDuplicateInbox = errors.New("inbox row already taken in this session")

// injectionSource and approvalSource tell the two kinds of
// injected_instruction event apart.
const (
	injectionSource = "user"
	approvalSource  = "approval"
)

// injectedEvent is the payload of an injected_instruction event the user
// caused with /inject. choird marks the inbox row delivered when it sees
// inbox_id replicated.
type injectedEvent struct {
	Source  string `json:"source"`
	InboxID int64  `json:"inbox_id"`
	Text    string `json:"text"`
}

// approvalEvent is the payload of an injected_instruction event that
// brings an approval's outcome into the lane's context. Text is what the
// model is shown.
type approvalEvent struct {
	Source     string    `json:"source"`
	ApprovalID string    `json:"approval_id"`
	Status     string    `json:"status"`
	ResolvedBy string    `json:"resolved_by"`
	ResolvedAt time.Time `json:"resolved_at"`
	Tool       string    `json:"tool,omitempty"`
	CallID     string    `json:"call_id,omitempty"`
	Text       string    `json:"text"`
	// Released gives an outcome back: its approved call could not run in
	// this session, and choird pushes it to the next (approved.go).
	Released bool `json:"released,omitempty"`
}

// cancelEvent is the payload of a cancelled event.
type cancelEvent struct {
	Scope  string `json:"scope"`
	Reason string `json:"reason,omitempty"`
	// State is the lane's state when the turn stopped.
	State State `json:"state"`
	// Reply is what the user was told.
	Reply string `json:"reply"`
}

// mailbox is what waits for the next safe point; guarded by Edge.mu.
type mailbox struct {
	injections []Injection
	approvals  []ApprovalResolution
	compact    bool
	// cancel is set while a cancel of the running turn waits; cancelScope
	// and cancelReason describe it.
	cancel       bool
	cancelScope  string
	cancelReason string
	// stop is set once the lane is asked to end; it is never cleared.
	stop       bool
	stopReason string
	// taken holds the approvals whose outcome this chain took
	// (approved.go); nil until first needed.
	taken map[string]struct{}
	// afterTurn stops the lane at its next IDLE, not inside a turn.
	afterTurn bool
}

// wakeUp tells the lane's goroutine that its mailbox has something.
func (e *Edge) wakeUp() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// takeInbox records an inbox row as taken, or reports that it already was.
// Rows without an ID (tests, the console before the inbox existed) are
// never deduplicated.
func (e *Edge) takeInbox(id int64) error {
	if id <= 0 {
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.inbox[id]; ok {
		return fmt.Errorf("inbox row %d: %w", id, ErrDuplicateInbox)
	}
	e.inbox[id] = struct{}{}
	return nil
}

// Inject queues an instruction for the lane's next safe point: between two
// model steps of the running turn, or at once if the lane is IDLE, where it
// is committed and becomes part of the next turn's context.
func (e *Edge) Inject(in Injection) error {
	if err := e.takeInbox(in.InboxID); err != nil {
		return err
	}
	e.mu.Lock()
	e.box.injections = append(e.box.injections, in)
	e.mu.Unlock()
	e.wakeUp()
	return nil
}

// ResolveApproval brings an approval's outcome into the lane's context at
// its next safe point, once however often it is pushed. An approved gated
// call runs then, and an IDLE lane takes a turn to tell the user what came
// of it (approved.go); any other outcome causes no model call.
func (e *Edge) ResolveApproval(r ApprovalResolution) {
	e.mu.Lock()
	e.box.approvals = append(e.box.approvals, r)
	e.mu.Unlock()
	e.wakeUp()
}

// RequestCompaction compacts the lane's window at its next safe point, as
// choir.memory.compact would.
func (e *Edge) RequestCompaction() {
	e.mu.Lock()
	e.box.compact = true
	e.mu.Unlock()
	e.wakeUp()
}

// Cancel stops the running turn at its next safe point: a model call in
// flight is abandoned (nothing of it is committed), a tool call in flight
// runs to its committed result. It reports false when the lane is not in a
// turn, and then does nothing.
func (e *Edge) Cancel(scope, reason string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.state == EdgeIdle || e.state == EdgeTerminated {
		return false
	}
	e.box.cancel, e.box.cancelScope, e.box.cancelReason = true, scope, reason
	if e.abortStep != nil {
		e.abortStep()
	}
	return true
}

// Stop ends the lane at its next safe point: the model step in flight
// finishes (a final answer is still delivered), nothing further starts, and
// Run returns. Messages still queued are left to choird, which redelivers
// them to the next session.
func (e *Edge) Stop(reason string) {
	e.mu.Lock()
	if !e.box.stop {
		e.box.stop, e.box.stopReason = true, reason
	}
	e.mu.Unlock()
	e.wakeUp()
}

// StopAfterTurn asks the lane to stop once the turn in progress, if any,
// has ended: at its next IDLE. A message not yet taken stays in choird's
// inbox for the next session. Stop still stops the turn at a safe point.
func (e *Edge) StopAfterTurn(reason string) {
	e.mu.Lock()
	if !e.box.stop && !e.box.afterTurn {
		e.box.afterTurn, e.box.stopReason = true, reason
	}
	e.mu.Unlock()
	e.wakeUp()
}

func (e *Edge) stopping() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.box.stop || e.box.afterTurn
}

// errTurnStopped ends a turn that a cancel or a stop ended at a safe point;
// the user has been told.
var errTurnStopped = errors.New("turn stopped at a safe point")

// safePoint applies the mailbox between two model steps of a turn. It
// appends what the model must see to msgs, and returns errTurnStopped when
// the turn must end here.
func (e *Edge) safePoint(ctx context.Context, msgs []llm.Message) ([]llm.Message, error) {
	e.mu.Lock()
	box := e.box
	e.box.injections, e.box.approvals, e.box.compact, e.box.cancel = nil, nil, false, false
	e.mu.Unlock()
	// Approvals first: they are facts the model asked for; then what the
	// user added. A stopping lane leaves them to the next session, which
	// choird pushes them to again.
	if !box.stop {
		seen, _, err := e.takeApprovals(ctx, box.approvals)
		msgs = append(msgs, seen...)
		if err != nil {
			return msgs, err
		}
	}
	for _, in := range box.injections {
		if err := e.commitInjection(ctx, in); err != nil {
			return msgs, err
		}
		msgs = append(msgs, llm.UserMessage(injectedText(in.Text)))
	}
	if e.jobs != nil {
		told, err := e.jobs.Deliver(ctx)
		if err != nil {
			return msgs, err
		}
		msgs = append(msgs, told...)
	}
	switch {
	case box.stop:
		return msgs, e.stopTurn(ctx, "shutdown", box.stopReason,
			"I am shutting down and stopped before finishing your last message; please ask again once I am back.")
	case box.cancel:
		return msgs, e.stopTurn(ctx, box.cancelScope, box.cancelReason, "Cancelled: I stopped working on your last message.")
	}
	if box.compact {
		// It runs beside the turn; the next step's prompt carries it once
		// it is swapped in.
		e.mu.Lock()
		before := e.layout.before
		e.mu.Unlock()
		e.requestCompaction(ctx, before)
	}
	return msgs, nil
}

// approvalWake is a turn an IDLE lane owes once approved calls ran: the
// head before their outcomes were taken, and what the model is shown of
// them.
type approvalWake struct {
	before int64
	seen   []llm.Message
}

// idle applies the mailbox while no turn runs. It reports whether the lane
// must stop, and the turn it must take when approved calls ran.
func (e *Edge) idle(ctx context.Context) (stop bool, wake *approvalWake, err error) {
	e.mu.Lock()
	box := e.box
	e.box.injections, e.box.approvals, e.box.compact, e.box.cancel = nil, nil, false, false
	e.mu.Unlock()
	if box.stop || box.afterTurn {
		// Injections and approval outcomes not committed stay untaken in
		// choird and come back with the next session.
		return true, nil, nil
	}
	before, _ := e.cfg.Log.Head()
	seen, ran, err := e.takeApprovals(ctx, box.approvals)
	if ran {
		wake = &approvalWake{before: before, seen: seen}
	}
	if err != nil {
		return false, wake, err
	}
	for _, in := range box.injections {
		if err := e.commitInjection(ctx, in); err != nil {
			return false, wake, err
		}
	}
	if e.jobs != nil {
		if _, err := e.jobs.Deliver(ctx); err != nil {
			return false, wake, err
		}
	}
	if box.compact {
		head, _ := e.cfg.Log.Head()
		e.requestCompaction(ctx, head)
	}
	e.checkIdle(ctx)
	return false, wake, nil
}

func (e *Edge) commitInjection(ctx context.Context, in Injection) error {
	if _, err := e.cfg.Arbiter.Commit(ctx, rpc.EventInjectedInstruction, "edge",
		injectedEvent{Source: injectionSource, InboxID: in.InboxID, Text: in.Text}); err != nil {
		return fmt.Errorf("commit injected instruction: %w", err)
	}
	return nil
}

// commitApproval commits the event that takes an approval's outcome, the
// one choird counts as its acknowledgement; runs says the approved call
// runs now (approved.go).
func (e *Edge) commitApproval(ctx context.Context, r ApprovalResolution, runs bool) (rpc.Event, approvalEvent, error) {
	ev := approvalEvent{Source: approvalSource, ApprovalID: r.ApprovalID, Status: r.Status, ResolvedBy: r.ResolvedBy,
		ResolvedAt: r.ResolvedAt.UTC()}
	what := "your request"
	call, found := e.findApproval(r.ApprovalID)
	if found {
		ev.Tool, ev.CallID = call.tool, call.callID
		what = "your " + call.tool + " request"
		if call.summary != "" {
			what += " (" + call.summary + ")"
		}
	}
	ev.Text = fmt.Sprintf("Approval %s: %s was %s by %s.", r.ApprovalID, what, r.Status, r.ResolvedBy)
	switch {
	case runs:
		ev.Text += " Choir runs exactly the approved call now; do not make it again."
	case r.Status == string(rpc.ApprovalApproved) && call.onApproved != "":
		ev.Text += " " + call.onApproved
	case r.Status == string(rpc.ApprovalApproved):
		ev.Text += " choird applies it; nothing is needed from you."
	default:
		ev.Text += " It did not run; the user was told."
	}
	committed, err := e.cfg.Arbiter.Commit(ctx, rpc.EventInjectedInstruction, "edge", ev)
	if err != nil {
		return committed, ev, fmt.Errorf("commit approval %s: %w", r.ApprovalID, err)
	}
	return committed, ev, nil
}

// approvalCall is the call that filed an approval. onApproved is what the
// model must do once it is approved, when the tool itself acts on the
// approval (choir.email.send called again) rather than choird.
type approvalCall struct{ tool, callID, summary, onApproved string }

// findApproval looks in the log for the tool result that filed the
// approval, to tell the model which of its proposals was decided. The log
// is the memory here: it survives a restart, a map would not.
func (e *Edge) findApproval(id string) (approvalCall, bool) {
	head, _ := e.cfg.Log.Head()
	evs, err := e.cfg.Log.Range(e.cfg.Log.Oldest(), head)
	if err != nil {
		return approvalCall{}, false
	}
	for _, ev := range slices.Backward(evs) {
		if ev.Type != rpc.EventToolResultCommitted || !strings.Contains(string(ev.Payload), id) {
			continue
		}
		var p struct {
			CallID string `json:"call_id"`
			Tool   string `json:"tool"`
			Output struct {
				Output struct {
					ApprovalID string `json:"approval_id"`
					Request    string `json:"request"`
					OnApproved string `json:"on_approved"`
				} `json:"output"`
			} `json:"output"`
		}
		if json.Unmarshal(ev.Payload, &p) == nil && p.Output.Output.ApprovalID == id {
			return approvalCall{tool: p.Tool, callID: p.CallID, summary: p.Output.Output.Request,
				onApproved: p.Output.Output.OnApproved}, true
		}
	}
	return approvalCall{}, false
}

// stopTurn ends the running turn: the cancel is committed and the user told.
func (e *Edge) stopTurn(ctx context.Context, scope, reason, reply string) error {
	ev, err := e.cfg.Arbiter.Commit(ctx, rpc.EventCancelled, "edge", cancelEvent{Scope: scope, Reason: reason, State: e.State(), Reply: reply})
	if err != nil {
		return fmt.Errorf("commit cancel: %w", err)
	}
	e.set(EdgeFinalizing)
	if err := e.send(ctx, "cancel", ev, reply); err != nil {
		return fmt.Errorf("send cancel notice: %w", err)
	}
	return errTurnStopped
}

func injectedText(text string) string { return "Injected instruction: " + text }
