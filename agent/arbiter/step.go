package arbiter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/tool"
)

// ProposeAll runs the proposals of one model step, all of one owner, and
// returns their outcomes in the order of ps (issue 15, item 6).
//
// Every proposal is checked first, as Propose checks it; a rejected one is
// logged as Propose logs it, and holds up nothing. The accepted ones run
// at the same time, each under its own lockset, except that a proposal
// whose lockset conflicts with an earlier one's (by the lock manager's
// rules, [lock.Conflict]) waits for every such earlier proposal to end
// before it asks for its locks. So conflicting calls run in the order of
// the step, and the owner never waits for a lock it holds itself. Commits
// still go through the arbiter's loop one by one, so the log stays one
// chain.
//
// A tool that fails or panics is a result, as with Propose, and never
// costs the other proposals theirs. The returned error is reserved for the
// arbiter failing on some proposals (joined, one per proposal); the
// outcomes of the others are returned with it, and a proposal the arbiter
// failed on has a zero Outcome.
func (a *Arbiter) ProposeAll(ctx context.Context, ps []Proposal) ([]Outcome, error) {
	if len(ps) == 0 {
		return nil, nil
	}
	for _, p := range ps[1:] {
		if p.Owner != ps[0].Owner {
			return nil, fmt.Errorf("propose the calls of one step: %s is proposed by %s and %s by %s; "+
				"one step's calls have one owner, so propose each owner's calls apart",
				ps[0].CallID, ps[0].Owner, p.CallID, p.Owner)
		}
	}
	calls := make([]stepCall, len(ps))
	for i := range ps {
		c := &calls[i]
		c.done = make(chan struct{})
		c.def, c.reqs, c.dec, c.rej = a.check(ps[i])
		if c.rej != nil {
			continue
		}
		for j := range calls[:i] {
			if calls[j].rej == nil && lock.Conflict(c.reqs, calls[j].reqs) {
				c.after = append(c.after, calls[j].done)
			}
		}
	}
	s := &step{changed: make(chan struct{})}
	members := newIntentGroup(calls, a.cfg.IntentGroupWait)
	out := make([]Outcome, len(ps))
	errs := make([]error, len(ps))
	var wg sync.WaitGroup
	for i := range ps {
		wg.Go(func() {
			defer close(calls[i].done)
			out[i], errs[i] = a.stepRun(ctx, s, ps[i], &calls[i], members[i])
		})
	}
	wg.Wait()
	return out, errors.Join(errs...)
}

// stepCall is one proposal of a ProposeAll: its check, and the earlier
// proposals of the step it waits for.
type stepCall struct {
	def   *tool.Def
	reqs  []lock.Request
	rej   *Rejection
	dec   decision
	after []chan struct{} // done of each earlier proposal whose lockset conflicts
	done  chan struct{}   // closed when this proposal has ended
}

// step is what the proposals of one ProposeAll share: how many of them are
// taking or holding their locks, and a channel closed (and replaced)
// whenever one of them releases its locks.
type step struct {
	mu      sync.Mutex
	active  int
	changed chan struct{}
}

// stepRun runs one proposal of a step, as Propose does once its turn has
// come.
func (a *Arbiter) stepRun(ctx context.Context, s *step, p Proposal, c *stepCall, g *groupMember) (Outcome, error) {
	defer g.done() // on every path that never reaches its intent
	if c.rej != nil {
		return a.reject(ctx, p, c.dec, c.rej)
	}
	def, reqs, d := c.def, c.reqs, c.dec
	if len(c.after) > 0 {
		for _, done := range c.after {
			select {
			case <-done:
			case <-ctx.Done():
				return a.abandon(ctx, p, fmt.Errorf("wait for the earlier calls of its step: %w", ctx.Err()))
			}
		}
		// The calls it waited for may have changed the tree its paths
		// resolve in (choir.exec can make a symbolic link), so it is
		// checked again as Propose would check it now. Its locks may come
		// out different, and conflict with a call it did not wait for:
		// acquire then waits for that call's release.
		var rej *Rejection
		if def, reqs, d, rej = a.check(p); rej != nil {
			return a.reject(ctx, p, d, rej)
		}
	}
	release, err := a.acquireInStep(ctx, s, p, reqs)
	if err != nil {
		return a.abandon(ctx, p, err)
	}
	defer release()
	return a.run(ctx, def, p, d, reqs, g)
}

// acquireInStep takes a proposal's locks while other proposals of its step
// may hold theirs. The lock manager refuses, as a self-deadlock, a lockset
// that would queue behind another owner's waiter which waits for a lock
// this owner holds: it cannot know that the holder is a running call that
// will end. Here it is known, so the proposal asks again once a call of the
// step has released its locks. That ends: there are finitely many
// releases, and once no call of the step holds anything the refusal, if
// any, is the manager's own verdict and is returned.
func (a *Arbiter) acquireInStep(ctx context.Context, s *step, p Proposal, reqs []lock.Request) (func(), error) {
	for {
		// active counts this proposal from before it asks the manager, so
		// a sibling that gets its locks while this one is refused is seen.
		s.mu.Lock()
		changed := s.changed
		s.active++
		s.mu.Unlock()
		release, err := a.cfg.Locks.Acquire(ctx, p.Owner, reqs)
		if err == nil {
			return func() {
				release()
				s.mu.Lock()
				s.active--
				close(s.changed)
				s.changed = make(chan struct{})
				s.mu.Unlock()
			}, nil
		}
		s.mu.Lock()
		s.active--
		sibling := s.active > 0 || s.changed != changed
		s.mu.Unlock()
		if !errors.Is(err, lock.ErrWouldSelfDeadlock) || !sibling {
			return func() {}, err
		}
		a.cfg.Logger.DebugContext(ctx, "tool call waits for another call of its step to release its locks",
			slog.String("call_id", p.CallID), slog.String("error", err.Error()))
		select {
		case <-changed:
		case <-ctx.Done():
			return func() {}, fmt.Errorf("wait for another call of its step to release its locks: %w", ctx.Err())
		}
	}
}
