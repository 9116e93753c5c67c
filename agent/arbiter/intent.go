package arbiter

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/usage"
)

// This file holds the write-ahead intents of calls with side effects
// (issue 31): the intent is committed and acknowledged by choird before
// the tool runs, so that after a crash choird's replica shows every call
// that may have acted, and Reconcile decides each one left without a
// result by its idempotency class instead of running it blindly again.

// Fault points of a call with side effects, in the order they are passed.
// [Config.Fault] is told each one; the kill-anywhere suite stops the agent
// there.
const (
	// FaultAfterIntent: the intent is acknowledged; the tool has not run.
	FaultAfterIntent = "after_intent"
	// FaultAfterEffect: the tool has returned; its result is not committed.
	FaultAfterEffect = "after_effect"
	// FaultAfterResult: the result is committed, not yet acknowledged.
	FaultAfterResult = "after_result"
)

// writeAhead reports whether a call of def waits for its intent: every
// tool that may act, when the arbiter has a way to make the log durable.
func (a *Arbiter) writeAhead(def *tool.Def) bool {
	return a.cfg.Durable != nil && def.Runtime().SideEffect != tool.SideEffectRead
}

// intent makes the tool_call_committed payload of an accepted call: an
// intent with its digest, class and a fresh key when it writes ahead.
func (a *Arbiter) intent(def *tool.Def, p Proposal, locks []string) commitlog.ToolCall {
	c := commitlog.ToolCall{CallID: p.CallID, Tool: p.Tool, Input: p.Input, Locks: locks}
	if !a.writeAhead(def) {
		return c
	}
	sum := sha256.Sum256(p.Input)
	c.WriteAhead, c.InputSHA256 = true, hex.EncodeToString(sum[:])
	c.Idempotency, c.IdempotencyKey = string(def.Idempotency(p.Input)), tool.NewCallKey()
	return c
}

// durable waits until choird has acknowledged the intent at rev. An error
// means the tool must not run: the call is answered with why.
func (a *Arbiter) durable(ctx context.Context, c commitlog.ToolCall, rev int64) error {
	if !c.WriteAhead {
		return nil
	}
	if err := a.cfg.Durable(ctx, rev); err != nil {
		return fmt.Errorf("the host did not acknowledge the call's intent, so it did not run: %w", err)
	}
	a.fault(FaultAfterIntent, c)
	return nil
}

func (a *Arbiter) fault(point string, c commitlog.ToolCall) {
	if a.cfg.Fault != nil && c.WriteAhead {
		a.cfg.Fault(point, c.Tool, c.CallID)
	}
}

// InDoubt is a call a crash interrupted after its intent that was not run
// again: it may or may not have taken effect.
type InDoubt struct {
	Lane   string
	CallID string
	Tool   string
	Input  json.RawMessage
	// Rev is the revision of the intent.
	Rev int64
}

// inDoubtText is the error of an in-doubt result: what the lane's model
// reads, and the audit view.
const inDoubtText = "interrupted by a restart after it started: it may or may not have taken effect, and it was not " +
	"run again because running it twice is not safe. Check its effect before doing it again; the user has been told."

// Reconcile decides every intent in the log that has no result (issue 31,
// item 2), before the lanes resume: an idempotent call runs again, a keyed
// call runs again with its key (the tool or choird makes a second effect a
// no-op), and an unsafe one gets the result in_doubt. Each decision is
// committed as the call's result, so a second restart does not decide it
// again. It returns the calls left in doubt, for the user to be told.
//
// Call it once the arbiter's loop runs and before any lane proposes.
func (a *Arbiter) Reconcile(ctx context.Context) ([]InDoubt, error) {
	log := a.cfg.Appender.Log()
	head, _ := log.Head()
	evs, err := log.Range(log.Oldest(), head)
	if err != nil {
		return nil, fmt.Errorf("read the log to reconcile: %w", err)
	}
	var open []rpc.Event
	closed := map[string]bool{}
	for i := len(evs) - 1; i >= 0; i-- {
		ev := evs[i]
		switch ev.Type {
		case rpc.EventToolResultCommitted:
			if r, err := commitlog.Decode[commitlog.ToolResult](ev); err == nil {
				closed[r.CallID] = true
			}
		case rpc.EventToolCallCommitted:
			if c, err := commitlog.Decode[commitlog.ToolCall](ev); err == nil && c.WriteAhead && !closed[c.CallID] {
				open = append(open, ev)
			}
		}
	}
	var doubts []InDoubt
	for i := len(open) - 1; i >= 0; i-- { // in the order they were made
		d, err := a.reconcile(ctx, open[i])
		if err != nil {
			return doubts, err
		}
		if d != nil {
			doubts = append(doubts, *d)
		}
	}
	return doubts, nil
}

// reconcile decides one open intent.
func (a *Arbiter) reconcile(ctx context.Context, ev rpc.Event) (*InDoubt, error) {
	c, _ := commitlog.Decode[commitlog.ToolCall](ev)
	p := Proposal{CallID: c.CallID, Tool: c.Tool, Input: c.Input}
	owner, oerr := lock.ParseOwner(ev.Lane)
	p.Owner = owner
	def, known := a.cfg.Tools.Lookup(c.Tool)
	class := tool.Idempotency(c.Idempotency)
	rerun := oerr == nil && known && (class == tool.IdempotencyIdempotent || class == tool.IdempotencyKeyed)
	logger := a.cfg.Logger.With(slog.String("call_id", c.CallID), slog.String("tool", c.Tool), slog.String("idempotency", c.Idempotency))
	if !rerun {
		logger.WarnContext(ctx, "a call interrupted by a restart is in doubt: not run again", slog.Int64("intent_rev", ev.Rev))
		err := a.commitReconciled(ctx, ev.Lane, c, commitlog.ToolInDoubt, 0, nil, inDoubtText, nil)
		return &InDoubt{Lane: ev.Lane, CallID: c.CallID, Tool: c.Tool, Input: c.Input, Rev: ev.Rev}, err
	}
	reqs := make([]lock.Request, 0, len(c.Locks))
	for _, l := range c.Locks {
		if r, err := lock.ParseRequest(l); err == nil {
			reqs = append(reqs, r)
		}
	}
	release, err := a.cfg.Locks.Acquire(ctx, owner, reqs)
	if err != nil {
		return nil, fmt.Errorf("reconcile %s: acquire its locks: %w", c.CallID, err)
	}
	defer release()
	logger.InfoContext(ctx, "a call interrupted by a restart runs again", slog.Int64("intent_rev", ev.Rev))
	start := time.Now()
	// A call the policy held is held again: its approval, if a person
	// gave it, lets the re-run through.
	res, _, execErr := a.execute(tool.WithRerun(tool.WithCallKey(ctx, c.IdempotencyKey)), def, p,
		decision{sources: c.Sources, policy: c.Policy})
	status, res, errText := a.settle(res, execErr)
	recs := a.validUsage(p, res.Usage)
	res.Usage = nil
	if err := a.commitReconciled(context.WithoutCancel(ctx), ev.Lane, c, status, time.Since(start), res.JSON(), errText, recs); err != nil {
		return nil, err
	}
	if len(recs) > 0 && a.cfg.UsageFunc != nil {
		a.cfg.UsageFunc(ev.Lane, recs)
	}
	return nil, nil
}

func (a *Arbiter) commitReconciled(ctx context.Context, lane string, c commitlog.ToolCall, status commitlog.ToolStatus,
	dur time.Duration, output json.RawMessage, errText string, recs []usage.Record) error {
	_, err := a.Commit(ctx, rpc.EventToolResultCommitted, lane, commitlog.ToolResult{CallID: c.CallID, Tool: c.Tool,
		Status: status, DurationMS: dur.Milliseconds(), Output: output, Error: errText, Usage: recs, Reconciled: true})
	if err != nil {
		return fmt.Errorf("commit the reconciled result of %s: %w", c.CallID, err)
	}
	return nil
}

// DefaultIntentGroupWait bounds how long a call's acknowledgement waits
// for the other intents of its step (Config.IntentGroupWait): a sibling
// may wait for a lock another lane holds, and the call must not wait with
// it.
const DefaultIntentGroupWait = 5 * time.Millisecond

// intentGroup is the calls of one step that start at once (accepted, and
// waiting for no earlier call of the step). Their intents are committed
// within moments of each other, but each asking for its own
// acknowledgement would cost a heartbeat in turn; so each waits until all
// of them are committed (or the group's wait passes), and the first
// heartbeat then carries every intent of the step.
type intentGroup struct {
	wait    time.Duration
	mu      sync.Mutex
	pending int
	all     chan struct{} // closed when pending reaches 0
}

// groupMember is one call's place in its step's intentGroup; nil for a
// call alone.
type groupMember struct {
	g    *intentGroup
	once sync.Once
}

// newIntentGroup returns the members of the calls that start at once, by
// index (nil for the others), or all nil when fewer than two do.
func newIntentGroup(calls []stepCall, wait time.Duration) []*groupMember {
	members := make([]*groupMember, len(calls))
	g := &intentGroup{all: make(chan struct{}), wait: cmp.Or(wait, DefaultIntentGroupWait)}
	for i := range calls {
		if calls[i].rej == nil && len(calls[i].after) == 0 {
			g.pending++
			members[i] = &groupMember{g: g}
		}
	}
	if g.pending < 2 {
		clear(members)
	}
	return members
}

// done says the call's intent is committed, or that it never will be
// (rejected, abandoned); only its first call counts.
func (m *groupMember) done() {
	if m == nil {
		return
	}
	m.once.Do(func() {
		m.g.mu.Lock()
		defer m.g.mu.Unlock()
		if m.g.pending--; m.g.pending == 0 {
			close(m.g.all)
		}
	})
}

// wait waits until every intent of the group is committed, for at most
// the group's wait.
func (m *groupMember) wait(ctx context.Context) {
	if m == nil {
		return
	}
	t := time.NewTimer(m.g.wait)
	defer t.Stop()
	select {
	case <-m.g.all:
	case <-t.C:
	case <-ctx.Done():
	}
}
