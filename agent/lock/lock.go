// Package lock is the agent's resource lock manager (spec section 9): the
// arbiter takes a tool's whole lockset from it before the tool runs and
// gives it back, on every exit path, when the result is committed.
//
// # Model
//
// Each resource key (see [Key]) is FREE, S(count) or X(owner). A lockset is
// granted whole or not at all, and nothing is held while a lockset waits, so
// locksets alone can never deadlock. Release gives back the whole set.
//
// The keys workspace and file:<path> form a tree: workspace is its root and
// a file key covers its path and every path below it (fs.search may lock a
// directory). Two requests overlap when they name the same key or one lies
// above the other; overlapping requests conflict unless both are S. Hence
// workspace:X excludes every file lock and waits for all of them (spec
// 9.2), and file:src:S keeps a writer out of file:src/a.go. choirtmp,
// browser_tab and the reserved namespaces stand alone.
//
// # The dirty-read exception, and why it is symmetric
//
// Spec 9.4 lets the edge lane acquire file:<path>:S while a core job holds
// workspace:X, accepting that edge may see a file half-written. This package
// treats that pair (edge's file S, a core's workspace:X) as compatible in
// both directions: edge's file read does not wait for a core's exec, and a
// core's exec does not wait for edge's file reads either. Compatibility
// must be a relation between two locks, not an accident of which came
// first, for the state to be checkable at all; the dirty read that edge
// accepts is the same whichever of the two started first; and the one-way
// reading would let a stream of edge reads, which the exception exempts
// from writer preference, keep a core's workspace:X waiting for ever. The
// exception covers exactly that pair: edge's workspace:S, edge's file X, a
// core's file S, and file locks below a core's directory X all conflict
// as usual, and edge's file S beside edge's own workspace:X is a conflict
// with itself (see below).
//
// # Writer preference and fairness
//
// Spec 9.4 asks that while any waiter requests X, new S grants are blocked.
// Read per key (a waiting file:a.go:X has no business delaying a read of
// b.go), this is one case of the rule the manager applies: a lockset is
// granted only if it conflicts with no held lock and with no lockset that
// has been waiting longer. So a new S never overtakes a waiting X it
// conflicts with (writer preference), a new X never overtakes a waiting S
// either, and a lockset of several keys cannot be starved by a stream of
// single-key locksets that keep one of its keys busy. As long as every
// holder releases, every waiter is served: nothing granted after a waiter
// arrived conflicts with it, so the locks in its way only ever go away.
// Waiters that conflict with no earlier waiter are not held up by it: a
// waiter for file:a.go never waits behind a waiter for file:b.go.
//
// The dirty-read exception passes through writer preference unchanged:
// since edge's file S does not conflict with a core's workspace:X, a core
// waiting for workspace:X does not block edge's file reads. A core waiting
// for file:a.go:X, or for a directory X above it, still does.
//
// # Self-deadlock
//
// Owners, not goroutines, hold locks, and S is not reentrant across a
// waiting writer. Acquire therefore refuses, with [ErrWouldSelfDeadlock],
// a lockset that would wait for a lock its own owner holds: directly (it
// conflicts with a set the owner holds, e.g. an S after an X on the same
// file, or any upgrade from S to X, which v1 does not support), or
// indirectly (it would queue behind a waiter that waits for a set the owner
// holds, as a second read of a file does while a writer waits for the
// first). Whether the owner's own set would be released by another of its
// goroutines cannot be known here, so the request fails instead of hanging.
// A caller that needs several locks takes them in one lockset, and nothing
// that holds a lockset waits for another: a lockset is held only while its
// one tool call runs. A lane may run several calls of one model step at
// once (arbiter.ProposeAll), each under its own lockset of the same owner;
// a call whose lockset conflicts with an earlier call's (see [Conflict])
// asks only once that call has ended. The indirect check above cannot tell
// that the owner's other locksets belong to calls that are running and will
// end, so it may still refuse such a call; ProposeAll then asks again once
// another call of the step has released its locks. Under those rules
// deadlock is impossible by construction.
//
// # Implementation
//
// One mutex guards all state, and every decision (is this lockset grantable,
// which waiters does this release make grantable) is taken inside one
// critical section over canonical locksets, as spec 9.4 asks. Instead of a
// single condition variable each waiter has its own channel: the goroutine
// that releases (or cancels) grants every waiter that became grantable, in
// queue order, and closes their channels. A condition variable would wake
// every waiter on every release to re-check under the mutex, and it cannot
// be combined with context cancellation without a goroutine per wait; the
// channel wakes exactly the goroutines that were granted, and a waiter
// selects on it and on ctx.Done().
package lock

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"
)

// ErrWouldSelfDeadlock is returned when a lockset would wait for a lock its
// own owner already holds. See the package documentation.
var ErrWouldSelfDeadlock = errors.New("would wait for a lock the same owner holds")

// Manager grants locksets. The zero value is ready for use; a Manager must
// not be copied after first use.
type Manager struct {
	mu sync.Mutex
	// nodes holds the per-key state of every key that is held, or has been
	// held since the last sweep (empty nodes are dropped lazily, see
	// sweepNodes), and of the tree ancestors of held file keys.
	nodes   map[Key]*node
	touched int // releases since the last sweep
	held    list
	waiting list
	arrived uint64 // arrival counter: orders locksets for fairness checks
	// afterChange, when set (by tests), runs with mu held after every
	// change of state: a grant, a release, a new or cancelled waiter.
	afterChange func()
}

// node is the state of one key: S(count) and X(owner) of spec 9.1, plus, for
// keys of the workspace tree, how many S and X holds lie strictly below it,
// so that a request can be checked against the keys it covers without
// visiting them.
type node struct {
	s, sEdge                   int32    // S holds on this key; those of them edge's
	x                          *lockset // the X holder, if any
	belowS, belowSEdge, belowX int32    // holds on keys below this one (tree only)
}

func (n *node) empty() bool {
	return n.s == 0 && n.x == nil && n.belowS == 0 && n.belowX == 0
}

type state uint8

const (
	stateNew state = iota
	stateWaiting
	stateHeld
	stateReleased
)

// lockset is one Acquire call: a canonical set of requests of one owner, in
// the waiting queue or in the held list.
type lockset struct {
	m     *Manager
	owner Owner
	reqs  []Request
	state state
	seq   uint64        // arrival order
	since time.Duration // since epoch: when it was granted, or began to wait
	ready chan struct{} // closed when a waiter is granted
	prev  *lockset
	next  *lockset
	// nodes are the nodes of each request's key, each followed by those of
	// its tree ancestors bottom-up, as set by resolve. They stay valid
	// within one critical section, and for as long as ls is held.
	nodes   []*node
	inline  [4]Request // backing store for small locksets
	nodeBuf [8]*node
}

// epoch anchors the times the manager records: reading only the monotonic
// clock (time.Since) costs half as much as time.Now on the fast path.
var epoch = time.Now()

// list is an intrusive doubly linked list of locksets in insertion order.
type list struct {
	head, tail *lockset
	n          int
}

func (l *list) push(ls *lockset) {
	ls.prev, ls.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = ls
	} else {
		l.head = ls
	}
	l.tail = ls
	l.n++
}

func (l *list) remove(ls *lockset) {
	if ls.prev != nil {
		ls.prev.next = ls.next
	} else {
		l.head = ls.next
	}
	if ls.next != nil {
		ls.next.prev = ls.prev
	} else {
		l.tail = ls.prev
	}
	ls.prev, ls.next = nil, nil
	l.n--
}

// New returns an empty Manager.
func New() *Manager { return &Manager{} }

func noRelease() {}

// Acquire grants owner the whole lockset reqs, waiting as long as needed,
// and returns the function that releases it. The release function releases
// the whole set at once, is safe to call more than once and from any
// goroutine; callers defer it right away (or use [Manager.Do]).
//
// The lockset is canonicalised first (see [Canonical]); an empty lockset is
// granted at once and needs no lock. Acquire fails without waiting for an
// invalid owner or request, and with [ErrWouldSelfDeadlock] (see the
// package documentation). If ctx ends while the lockset waits, Acquire
// returns an error wrapping ctx.Err() and leaves no trace: nothing held,
// nothing queued. With an error, the returned release is a no-op, so a
// deferred call to it is harmless.
func (m *Manager) Acquire(ctx context.Context, owner Owner, reqs []Request) (release func(), err error) {
	ls, err := m.prepare(owner, reqs)
	if err != nil || ls == nil {
		return noRelease, err
	}
	if err := ctx.Err(); err != nil {
		return noRelease, fmt.Errorf("acquire %s for %s: %w", ls.describe(), owner, err)
	}
	m.mu.Lock()
	granted, err := m.tryGrant(ls)
	if granted || err != nil {
		m.mu.Unlock()
		if err != nil {
			return noRelease, err
		}
		return ls.release, nil
	}
	ls.ready = make(chan struct{})
	ls.state = stateWaiting
	ls.since = time.Since(epoch)
	m.waiting.push(ls)
	m.changed()
	m.mu.Unlock()

	select {
	case <-ls.ready:
		return ls.release, nil
	case <-ctx.Done():
	}
	m.mu.Lock()
	switch ls.state {
	case stateWaiting:
		m.waiting.remove(ls)
	case stateHeld:
		// Granted while the context ended: give it back, so that a failed
		// Acquire never leaves a lock behind.
		m.ungrant(ls)
	}
	ls.state = stateReleased
	m.wake() // a later waiter may have been queued behind this one
	m.changed()
	m.mu.Unlock()
	return noRelease, fmt.Errorf("acquire %s for %s: %w", ls.describe(), owner, ctx.Err())
}

// TryAcquire grants owner the lockset reqs if it can be granted now, under
// the same rules as Acquire (including writer preference: it does not
// overtake a conflicting waiter). Otherwise it returns ok false and leaves
// no trace. Errors are those of Acquire.
func (m *Manager) TryAcquire(owner Owner, reqs []Request) (release func(), ok bool, err error) {
	ls, err := m.prepare(owner, reqs)
	if err != nil || ls == nil {
		return noRelease, err == nil, err
	}
	m.mu.Lock()
	granted, err := m.tryGrant(ls)
	m.mu.Unlock()
	if !granted {
		return noRelease, false, err
	}
	return ls.release, true, nil
}

// Do acquires the lockset, runs fn, and releases the lockset when fn
// returns or panics. It returns Acquire's error or fn's.
func (m *Manager) Do(ctx context.Context, owner Owner, reqs []Request, fn func() error) error {
	release, err := m.Acquire(ctx, owner, reqs)
	if err != nil {
		return err
	}
	defer release()
	return fn()
}

// prepare validates the owner and canonicalises reqs into a new lockset. It
// returns nil, nil for an empty lockset.
func (m *Manager) prepare(owner Owner, reqs []Request) (*lockset, error) {
	if owner.IsZero() {
		return nil, fmt.Errorf("acquire locks: zero owner: %w", ErrInvalidOwner)
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	ls := &lockset{m: m, owner: owner}
	buf := ls.inline[:]
	if len(reqs) > len(buf) {
		buf = make([]Request, len(reqs))
	}
	n, err := canonicalInto(buf, reqs)
	if err != nil {
		return nil, fmt.Errorf("acquire locks for %s: %w", owner, err)
	}
	ls.reqs = buf[:n:n]
	return ls, nil
}

// tryGrant grants ls if it conflicts neither with a held lock nor with a
// waiter. If it cannot be granted, it checks whether waiting would mean
// waiting for the owner itself. It is called with mu held.
func (m *Manager) tryGrant(ls *lockset) (bool, error) {
	m.arrived++
	ls.seq = m.arrived
	m.resolve(ls)
	if !m.blocked(ls) && !m.conflictsWaiting(ls, m.waiting.tail) {
		ls.since = time.Since(epoch)
		m.grant(ls)
		m.changed()
		return true, nil
	}
	return false, m.selfDeadlock(ls)
}

// conflictsWaiting reports whether ls conflicts with a waiter from last
// back to the head of the queue (none if last is nil).
func (m *Manager) conflictsWaiting(ls, last *lockset) bool {
	for w := last; w != nil; w = w.prev {
		if setsConflict(ls, w) {
			return true
		}
	}
	return false
}

// release is the function Acquire returns.
func (ls *lockset) release() {
	m := ls.m
	m.mu.Lock()
	if ls.state == stateHeld {
		m.ungrant(ls)
		ls.state = stateReleased
		m.wake()
		m.changed()
	}
	m.mu.Unlock()
}

func (m *Manager) changed() {
	if m.afterChange != nil {
		m.afterChange()
	}
}

// wake grants, in queue order, every waiter that conflicts neither with a
// held lock nor with a waiter ahead of it that stays waiting. Granted
// waiters leave the queue as they go, so the waiters ahead of w are exactly
// those that stay waiting.
func (m *Manager) wake() {
	for w := m.waiting.head; w != nil; {
		next := w.next
		m.resolve(w)
		if !m.blocked(w) && !m.conflictsWaiting(w, w.prev) {
			m.waiting.remove(w)
			w.since = time.Since(epoch)
			m.grant(w)
			close(w.ready)
		}
		w = next
	}
}

func setsConflict(a, b *lockset) bool {
	for _, r := range a.reqs {
		for _, q := range b.reqs {
			if conflicts(r, a.owner, q, b.owner) {
				return true
			}
		}
	}
	return false
}

// resolve points ls.nodes at the node of every requested key and of its
// tree ancestors, creating missing nodes, so that checking, granting and
// releasing ls hash each key once. mu is held.
func (m *Manager) resolve(ls *lockset) {
	if m.nodes == nil {
		m.nodes = make(map[Key]*node)
	}
	ns := ls.nodeBuf[:0]
	for _, r := range ls.reqs {
		ns = append(ns, m.node(r.Key))
		if r.Key.ns != nsFile {
			continue
		}
		for p := r.Key.name; ; {
			i := strings.LastIndexByte(p, '/')
			if i < 0 {
				ns = append(ns, m.node(Workspace))
				break
			}
			p = p[:i]
			ns = append(ns, m.node(Key{ns: nsFile, name: p}))
		}
	}
	ls.nodes = ns
}

// ancestors returns the number of tree ancestors of k.
func ancestors(k Key) int {
	if k.ns != nsFile {
		return 0
	}
	return strings.Count(k.name, "/") + 1
}

// blocked reports whether any request of ls conflicts with a held lock: on
// its own key, on a key below it, or on a key above it in the tree. It is
// conflicts() evaluated against the per-key counters (the stress test checks
// that the two agree). ls must be resolved.
func (m *Manager) blocked(ls *lockset) bool {
	edge := ls.owner.IsEdge()
	j := 0
	for _, r := range ls.reqs {
		n := ls.nodes[j]
		j++
		if n.x != nil || (r.Mode == X && n.s > 0) {
			return true
		}
		if r.Key.inTree() {
			if n.belowX > 0 {
				return true
			}
			if r.Mode == X {
				below := n.belowS
				if r.Key.ns == nsWorkspace && ls.owner.IsCore() {
					below -= n.belowSEdge // the dirty-read exception
				}
				if below > 0 {
					return true
				}
			}
		}
		na := ancestors(r.Key)
		for i, a := range ls.nodes[j : j+na] {
			if a.x != nil {
				root := i == na-1
				if !(root && r.Mode == S && edge && a.x.owner.IsCore()) { // the dirty-read exception
					return true
				}
			}
			if r.Mode == X && a.s > 0 {
				return true
			}
		}
		j += na
	}
	return false
}

// grant moves ls into the held list and records its locks. ls must be
// resolved; mu is held.
func (m *Manager) grant(ls *lockset) {
	m.count(ls, 1)
	ls.state = stateHeld
	m.held.push(ls)
}

// ungrant removes ls from the held list and forgets its locks. mu is held.
func (m *Manager) ungrant(ls *lockset) {
	m.count(ls, -1)
	m.held.remove(ls)
	m.touched++
	if m.touched >= len(m.nodes) && len(m.nodes) > sweepMin {
		m.sweepNodes()
	}
}

// count adds (d = 1) or removes (d = -1) the locks of ls to or from the
// nodes of its keys and their ancestors.
func (m *Manager) count(ls *lockset, d int32) {
	edge := ls.owner.IsEdge()
	j := 0
	for _, r := range ls.reqs {
		n := ls.nodes[j]
		j++
		if r.Mode == X {
			if d > 0 {
				n.x = ls
			} else {
				n.x = nil
			}
		} else {
			n.s += d
			if edge {
				n.sEdge += d
			}
		}
		na := ancestors(r.Key)
		for _, a := range ls.nodes[j : j+na] {
			if r.Mode == X {
				a.belowX += d
			} else {
				a.belowS += d
				if edge {
					a.belowSEdge += d
				}
			}
		}
		j += na
	}
}

func (m *Manager) node(k Key) *node {
	n := m.nodes[k]
	if n == nil {
		n = new(node)
		m.nodes[k] = n
	}
	return n
}

// sweepMin is the number of nodes below which empty nodes are never swept.
// Keeping empty nodes of recently used keys spares an allocation and a map
// insert and delete per acquire; sweeping once per len(nodes) releases
// keeps the map proportional to the keys in use at amortised O(1) cost.
const sweepMin = 64

func (m *Manager) sweepNodes() {
	for k, n := range m.nodes {
		if n.empty() {
			delete(m.nodes, k)
		}
	}
	m.touched = 0
}

// selfDeadlock returns ErrWouldSelfDeadlock if ls, which cannot be granted
// now, would wait for a lockset its owner holds: directly, or behind
// waiters that wait for one (transitively). mu is held.
func (m *Manager) selfDeadlock(ls *lockset) error {
	for h := m.held.head; h != nil; h = h.next {
		if h.owner == ls.owner && setsConflict(ls, h) {
			return fmt.Errorf("acquire %s for %s: it already holds %s; take all locks in one lockset: %w",
				ls.describe(), ls.owner, h.describe(), ErrWouldSelfDeadlock)
		}
	}
	// Waiters form a DAG (each waits only for waiters ahead of it), so a
	// walk from the tail towards the head visits each at most once.
	var seen map[*lockset]bool
	var stack []*lockset
	for w := m.waiting.tail; w != nil; w = w.prev {
		if setsConflict(ls, w) {
			stack = append(stack, w)
		}
	}
	for len(stack) > 0 {
		w := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[w] {
			continue
		}
		if seen == nil {
			seen = make(map[*lockset]bool)
		}
		seen[w] = true
		for h := m.held.head; h != nil; h = h.next {
			if h.owner == ls.owner && setsConflict(w, h) {
				return fmt.Errorf("acquire %s for %s: it would queue behind %s of %s, which waits for %s it already holds; take all locks in one lockset: %w",
					ls.describe(), ls.owner, w.describe(), w.owner, h.describe(), ErrWouldSelfDeadlock)
			}
		}
		for p := w.prev; p != nil; p = p.prev {
			if !seen[p] && setsConflict(w, p) {
				stack = append(stack, p)
			}
		}
	}
	return nil
}

func (ls *lockset) describe() string {
	return "[" + strings.Join(Strings(ls.reqs), " ") + "]"
}

// Holding is one lockset in a [Snapshot].
type Holding struct {
	Owner Owner     `json:"owner"`
	Locks []Request `json:"locks"` // canonical
	Since time.Time `json:"since"` // when it was granted, or began to wait
}

// Snapshot is the manager's state at one instant, for status reports and
// tests.
type Snapshot struct {
	Held    []Holding `json:"held"`    // in the order they were granted
	Waiting []Holding `json:"waiting"` // in queue order
}

// Snapshot returns the current holders and waiters.
func (m *Manager) Snapshot() Snapshot {
	m.mu.Lock()
	defer m.mu.Unlock()
	var s Snapshot
	for h := m.held.head; h != nil; h = h.next {
		s.Held = append(s.Held, h.holding())
	}
	for w := m.waiting.head; w != nil; w = w.next {
		s.Waiting = append(s.Waiting, w.holding())
	}
	return s
}

func (ls *lockset) holding() Holding {
	return Holding{Owner: ls.owner, Locks: append([]Request(nil), ls.reqs...), Since: epoch.Add(ls.since)}
}
