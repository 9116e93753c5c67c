package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestStress runs edge and core lanes against one manager with random
// locksets over a small key space, and checks the invariants of spec 9 after
// every grant, release, enqueue and cancellation (under the manager's mutex)
// and, independently, from the goroutines that hold the locks.
//
// It runs for 1s by default (200ms with -short). Set CHOIR_LOCK_STRESS to a
// duration, e.g. CHOIR_LOCK_STRESS=2m, for a longer run.
func TestStress(t *testing.T) {
	t.Parallel()
	d := time.Second
	if testing.Short() {
		d = 200 * time.Millisecond
	}
	if s := os.Getenv("CHOIR_LOCK_STRESS"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil {
			t.Fatalf("CHOIR_LOCK_STRESS: %v", err)
		}
	}
	// Any wait longer than this is starvation: locks are held for
	// microseconds.
	const starved = 3 * time.Second

	m := New()
	chk := &checker{t: t, m: m}
	m.afterChange = chk.check

	keys := []Key{Workspace, ChoirTmp, BrowserTab}
	for _, p := range []string{"a.go", "b.go", "src", "src/x.go", "src/y.go", "src/sub/z.go"} {
		k, err := FileKey(p)
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, k)
	}
	sh := newShadow()

	type lane struct {
		owner Owner
		// single: the owner runs in this goroutine only, and never holds a
		// lockset while it asks for another, so it must never be told it
		// would deadlock with itself.
		single bool
	}
	var lanes []lane
	for range 3 {
		lanes = append(lanes, lane{owner: Edge}) // edge with parallel tool calls
	}
	for i := range 8 {
		o, _ := Core(fmt.Sprintf("job-%d", i))
		lanes = append(lanes, lane{owner: o, single: true})
	}
	pair, _ := Core("pair")
	lanes = append(lanes, lane{owner: pair}, lane{owner: pair})

	var stats struct {
		grants, tries, cancels, selfDeadlocks, panics atomic.Int64
		maxWait                                       atomic.Int64
	}
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	for gi, ln := range lanes {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(gi), uint64(time.Now().UnixNano())))
			grants := 0
			for time.Now().Before(deadline) {
				set := randomSet(rng, keys, ln.owner)
				canon, err := Canonical(set)
				if err != nil {
					t.Error(err)
					return
				}
				hold := func() {
					sh.enter(t, ln.owner, canon)
					switch rng.IntN(3) {
					case 0:
					case 1:
						runtime.Gosched()
					default:
						time.Sleep(time.Duration(rng.IntN(20)) * time.Microsecond)
					}
					sh.leave(ln.owner, canon)
				}

				var release func()
				start := time.Now()
				switch r := rng.IntN(100); {
				case r < 10: // TryAcquire
					var ok bool
					release, ok, err = m.TryAcquire(ln.owner, set)
					if err == nil && !ok {
						stats.tries.Add(1)
						continue
					}
				case r < 15: // cancelled or timed out while (probably) waiting
					ctx, cancel := context.WithTimeout(context.Background(), time.Duration(rng.IntN(200))*time.Microsecond)
					release, err = m.Acquire(ctx, ln.owner, set)
					cancel()
					if errors.Is(err, context.DeadlineExceeded) {
						stats.cancels.Add(1)
						continue
					}
				case r < 20: // Do with a panicking function: the deferred release must run
					ctx, cancel := context.WithTimeout(context.Background(), starved)
					panicked := false
					func() {
						defer func() { panicked = recover() != nil }()
						err = m.Do(ctx, ln.owner, set, func() error {
							hold()
							panic("tool panicked")
						})
					}()
					cancel()
					if panicked {
						grants++
						stats.panics.Add(1)
						continue
					}
				default:
					ctx, cancel := context.WithTimeout(context.Background(), starved)
					release, err = m.Acquire(ctx, ln.owner, set)
					cancel()
				}
				for w := int64(time.Since(start)); ; {
					cur := stats.maxWait.Load()
					if w <= cur || stats.maxWait.CompareAndSwap(cur, w) {
						break
					}
				}
				switch {
				case errors.Is(err, ErrWouldSelfDeadlock) && !ln.single:
					stats.selfDeadlocks.Add(1)
					continue
				case errors.Is(err, context.DeadlineExceeded):
					t.Errorf("%s starved: waited %v for %q", ln.owner, starved, Strings(canon))
					return
				case err != nil:
					t.Errorf("%s %q: %v", ln.owner, Strings(canon), err)
					return
				}
				grants++
				stats.grants.Add(1)
				hold()
				release()
				if rng.IntN(10) == 0 {
					release() // idempotent
				}
			}
			if grants == 0 {
				t.Errorf("%s made no progress in %v", ln.owner, d)
			}
		})
	}
	wg.Wait()

	if s := m.Snapshot(); len(s.Held)+len(s.Waiting) != 0 {
		t.Fatalf("state not empty at the end: %+v", s)
	}
	m.mu.Lock()
	for k, n := range m.nodes {
		if !n.empty() {
			t.Errorf("node %s not empty at the end: %+v", k, *n)
		}
	}
	m.mu.Unlock()
	t.Logf("%v, %d goroutines: %d grants, %d invariant checks, %d locksets waited (queue up to %d), %d TryAcquire refusals, %d cancellations, %d self-deadlocks refused, %d panics released, max acquire latency %v",
		d, len(lanes), stats.grants.Load(), chk.checks, chk.enqueued, chk.maxWaiting, stats.tries.Load(), stats.cancels.Load(),
		stats.selfDeadlocks.Load(), stats.panics.Load(), time.Duration(stats.maxWait.Load()))
}

// randomSet returns 1 to 3 random requests; edge asks for X less often.
func randomSet(rng *rand.Rand, keys []Key, o Owner) []Request {
	n := 1 + rng.IntN(3)
	set := make([]Request, n)
	px := 35
	if o.IsEdge() {
		px = 15
	}
	for i := range set {
		set[i] = Request{Key: keys[rng.IntN(len(keys))], Mode: S}
		if rng.IntN(100) < px {
			set[i].Mode = X
		}
	}
	return set
}

// specConflict is spec 9 written out again, independently of conflicts(),
// on the string form of the keys.
func specConflict(a Request, ao Owner, b Request, bo Owner) bool {
	if a.Mode == S && b.Mode == S {
		return false
	}
	ka, kb := a.Key.String(), b.Key.String()
	fa, aFile := strings.CutPrefix(ka, "file:")
	fb, bFile := strings.CutPrefix(kb, "file:")
	overlap := ka == kb ||
		(ka == "workspace" && bFile) || (kb == "workspace" && aFile) ||
		(aFile && bFile && (strings.HasPrefix(fa+"/", fb+"/") || strings.HasPrefix(fb+"/", fa+"/")))
	if !overlap {
		return false
	}
	dirty := func(r Request, ro Owner, h Request, ho Owner) bool {
		return ro.String() == "edge" && r.Mode == S && strings.HasPrefix(r.Key.String(), "file:") &&
			strings.HasPrefix(ho.String(), "core:") && h.Key.String() == "workspace" && h.Mode == X
	}
	return !dirty(a, ao, b, bo) && !dirty(b, bo, a, ao)
}

func specSetsConflict(a, b *lockset) bool {
	for _, r := range a.reqs {
		for _, q := range b.reqs {
			if specConflict(r, a.owner, q, b.owner) {
				return true
			}
		}
	}
	return false
}

// checker verifies the manager's invariants. check runs with m.mu held.
type checker struct {
	t           *testing.T
	m           *Manager
	checks      int
	enqueued    int // changes that grew the queue: a lockset began to wait
	lastWaiting int
	maxWaiting  int
	failures    int
}

func (c *checker) fail(format string, args ...any) {
	c.failures++
	if c.failures <= 10 {
		c.t.Errorf(format, args...)
	}
}

func (c *checker) check() {
	c.checks++
	m := c.m
	var held, waiting []*lockset
	for h := m.held.head; h != nil; h = h.next {
		if h.state != stateHeld {
			c.fail("lockset %s of %s in the held list in state %d", h.describe(), h.owner, h.state)
		}
		held = append(held, h)
	}
	for w := m.waiting.head; w != nil; w = w.next {
		if w.state != stateWaiting {
			c.fail("lockset %s of %s in the queue in state %d", w.describe(), w.owner, w.state)
		}
		waiting = append(waiting, w)
	}
	if len(held) != m.held.n || len(waiting) != m.waiting.n {
		c.fail("list lengths %d/%d, counted %d/%d", m.held.n, m.waiting.n, len(held), len(waiting))
	}
	if len(waiting) > c.lastWaiting {
		c.enqueued++
	}
	c.lastWaiting = len(waiting)
	c.maxWaiting = max(c.maxWaiting, len(waiting))

	// Safety: no two held locksets conflict. This covers no two X holders,
	// no X beside S, no file lock beside workspace:X except edge's dirty
	// read, and the file tree.
	for i, a := range held {
		for _, b := range held[i+1:] {
			if specSetsConflict(a, b) {
				c.fail("conflicting locksets held: %s by %s and %s by %s", a.describe(), a.owner, b.describe(), b.owner)
			}
		}
	}

	// No partial grant: the per-key counters are exactly the sum of the
	// whole held locksets.
	want := map[Key]node{}
	for _, h := range held {
		edge := h.owner.IsEdge()
		for _, r := range h.reqs {
			n := want[r.Key]
			if r.Mode == X {
				if n.x != nil {
					c.fail("two X holders of %s", r.Key)
				}
				n.x = h
			} else {
				n.s++
				if edge {
					n.sEdge++
				}
			}
			want[r.Key] = n
			if r.Key.ns != nsFile {
				continue
			}
			anc := []Key{Workspace}
			parts := strings.Split(r.Key.name, "/")
			for i := 1; i < len(parts); i++ {
				anc = append(anc, Key{ns: nsFile, name: strings.Join(parts[:i], "/")})
			}
			for _, k := range anc {
				a := want[k]
				if r.Mode == X {
					a.belowX++
				} else {
					a.belowS++
					if edge {
						a.belowSEdge++
					}
				}
				want[k] = a
			}
		}
	}
	for k, n := range m.nodes {
		if *n != want[k] {
			c.fail("node %s = %+v, want %+v", k, *n, want[k])
		}
	}
	for k := range want {
		if m.nodes[k] == nil {
			c.fail("node %s missing", k)
		}
	}

	// Fairness: nothing granted after a waiter arrived conflicts with it
	// (writer preference, and no overtaking of locksets).
	for _, w := range waiting {
		for _, h := range held {
			if h.seq > w.seq && specSetsConflict(w, h) {
				c.fail("%s of %s was granted ahead of the earlier waiter %s of %s", h.describe(), h.owner, w.describe(), w.owner)
			}
		}
	}

	// Liveness: no waiter is left waiting that could be granted (it
	// conflicts with a holder or with a waiter ahead of it). Together with
	// "no grant overtakes a conflicting waiter" this is what serves every
	// waiter eventually.
	for i, w := range waiting {
		blocked := slices.ContainsFunc(held, func(h *lockset) bool { return specSetsConflict(w, h) }) ||
			slices.ContainsFunc(waiting[:i], func(p *lockset) bool { return specSetsConflict(w, p) })
		if !blocked {
			c.fail("waiter %s of %s could be granted but waits", w.describe(), w.owner)
		}
	}
}

// shadow checks mutual exclusion from outside the manager: the holders
// register what they hold between Acquire's return and the release, a
// window inside the real holding, so an overlap seen here is a real one.
// Counters are updated before they are checked (Dekker style), so of two
// overlapping holders at least one sees the other.
type shadow struct {
	mu   sync.Mutex
	keys map[Key]*shadowKey
	// file locks other than edge's S, edge's file S, core and edge
	// workspace:X
	fileStrict, fileEdgeS, wsXCore, wsXEdge atomic.Int32
}

type shadowKey struct{ s, x atomic.Int32 }

func newShadow() *shadow { return &shadow{keys: map[Key]*shadowKey{}} }

func (sh *shadow) key(k Key) *shadowKey {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	v := sh.keys[k]
	if v == nil {
		v = new(shadowKey)
		sh.keys[k] = v
	}
	return v
}

func (sh *shadow) enter(t *testing.T, o Owner, set []Request) {
	for _, r := range set {
		k := sh.key(r.Key)
		if r.Mode == X {
			if k.x.Add(1) != 1 || k.s.Load() != 0 {
				t.Errorf("%s got %s while another holds the key", o, r)
			}
		} else if k.s.Add(1); k.x.Load() != 0 {
			t.Errorf("%s got %s while another holds it X", o, r)
		}
		switch {
		case r.Key == Workspace && r.Mode == X && o.IsCore():
			if sh.wsXCore.Add(1); sh.fileStrict.Load() != 0 {
				t.Errorf("%s got workspace:X while a file lock other than edge's S is held", o)
			}
		case r.Key == Workspace && r.Mode == X:
			if sh.wsXEdge.Add(1); sh.fileStrict.Load()+sh.fileEdgeS.Load() != 0 {
				t.Errorf("edge got workspace:X while a file lock is held")
			}
		case r.Key.ns == nsFile && r.Mode == S && o.IsEdge():
			if sh.fileEdgeS.Add(1); sh.wsXEdge.Load() != 0 {
				t.Errorf("edge got %s while it holds workspace:X", r)
			}
		case r.Key.ns == nsFile:
			if sh.fileStrict.Add(1); sh.wsXCore.Load()+sh.wsXEdge.Load() != 0 {
				t.Errorf("%s got %s while workspace:X is held", o, r)
			}
		}
	}
}

func (sh *shadow) leave(o Owner, set []Request) {
	for _, r := range set {
		k := sh.key(r.Key)
		if r.Mode == X {
			k.x.Add(-1)
		} else {
			k.s.Add(-1)
		}
		switch {
		case r.Key == Workspace && r.Mode == X && o.IsCore():
			sh.wsXCore.Add(-1)
		case r.Key == Workspace && r.Mode == X:
			sh.wsXEdge.Add(-1)
		case r.Key.ns == nsFile && r.Mode == S && o.IsEdge():
			sh.fileEdgeS.Add(-1)
		case r.Key.ns == nsFile:
			sh.fileStrict.Add(-1)
		}
	}
}
