package lock_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/lock"
)

type testBundle struct {
	t *testing.T
	m *lock.Manager
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	return &testBundle{t: t, m: lock.New()}
}

// hold acquires locks for owner, failing the test if it cannot be granted
// at once, and returns the release function.
func (b *testBundle) hold(owner string, locks ...string) func() {
	b.t.Helper()
	release, ok, err := b.m.TryAcquire(mustOwner(b.t, owner), reqs(b.t, locks...))
	if err != nil || !ok {
		b.t.Fatalf("hold %s %q: ok %v, err %v", owner, locks, ok, err)
	}
	return release
}

// pending is an Acquire running in its own goroutine.
type pending struct {
	cancel context.CancelFunc
	done   chan acquired
}

type acquired struct {
	release func()
	err     error
}

// wait starts Acquire for owner in a goroutine and returns once it is
// queued (the number of waiters in the snapshot has grown).
func (b *testBundle) wait(owner string, locks ...string) *pending {
	b.t.Helper()
	before := len(b.m.Snapshot().Waiting)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	p := &pending{cancel: cancel, done: make(chan acquired, 1)}
	o, rs := mustOwner(b.t, owner), reqs(b.t, locks...)
	go func() {
		release, err := b.m.Acquire(ctx, o, rs)
		p.done <- acquired{release, err}
	}()
	b.t.Cleanup(cancel)
	for len(b.m.Snapshot().Waiting) == before {
		select {
		case a := <-p.done:
			b.t.Fatalf("wait %s %q: returned at once: %v", owner, locks, a.err)
		case <-time.After(50 * time.Microsecond):
		}
	}
	return p
}

// granted waits for p's Acquire to succeed and returns its release.
func (p *pending) granted(t *testing.T) func() {
	t.Helper()
	select {
	case a := <-p.done:
		if a.err != nil {
			t.Fatalf("waiter failed: %v", a.err)
		}
		return a.release
	case <-time.After(5 * time.Second):
		t.Fatal("waiter was not granted within 5s")
	}
	return nil
}

// stillWaiting fails the test if p has returned.
func (p *pending) stillWaiting(t *testing.T) {
	t.Helper()
	select {
	case a := <-p.done:
		t.Fatalf("waiter returned (err %v), want it still waiting", a.err)
	case <-time.After(10 * time.Millisecond):
	}
}

type holding struct {
	owner string
	locks []string
}

type outcome int

const (
	granted outcome = iota
	blocked
	selfDeadlock
)

func (o outcome) String() string {
	return [...]string{"granted", "blocked", "ErrWouldSelfDeadlock"}[o]
}

// TestRules checks every rule of spec 9 with one held state (and queued
// waiters where the rule is about them) and one new request, made with
// TryAcquire, which follows Acquire's rules without waiting.
func TestRules(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		held    []holding
		waiting []holding
		req     holding
		want    outcome
	}{
		// Spec 9.1: S with S, X alone.
		{name: "SharedBesideShared", held: []holding{{"core:a", []string{"file:a.go:S"}}},
			req: holding{"core:b", []string{"file:a.go:S"}}, want: granted},
		{name: "ExclusiveExcludesShared", held: []holding{{"core:a", []string{"file:a.go:X"}}},
			req: holding{"core:b", []string{"file:a.go:S"}}, want: blocked},
		{name: "SharedExcludesExclusive", held: []holding{{"core:a", []string{"file:a.go:S"}}},
			req: holding{"core:b", []string{"file:a.go:X"}}, want: blocked},
		{name: "ExclusiveExcludesExclusive", held: []holding{{"core:a", []string{"file:a.go:X"}}},
			req: holding{"edge", []string{"file:a.go:X"}}, want: blocked},
		{name: "CoresHoldExclusiveOnDifferentFiles", held: []holding{{"core:refactor-auth", []string{"file:src/auth.go:X"}}},
			req: holding{"core:write-tests", []string{"file:src/auth_test.go:X"}}, want: granted},
		{name: "ManySharedHolders", held: []holding{{"core:a", []string{"file:a.go:S"}}, {"edge", []string{"file:a.go:S"}}, {"core:b", []string{"file:a.go:S"}}},
			req: holding{"core:c", []string{"file:a.go:S"}}, want: granted},
		{name: "LastSharedHolderGatesExclusive", held: []holding{{"core:a", []string{"file:a.go:S"}}, {"core:b", []string{"file:a.go:S"}}},
			req: holding{"core:c", []string{"file:a.go:X"}}, want: blocked},

		// Spec 9.2: workspace dominates file keys; choirtmp is independent.
		{name: "WorkspaceXExcludesFileS", held: []holding{{"core:a", []string{"workspace:X"}}},
			req: holding{"core:b", []string{"file:a.go:S"}}, want: blocked},
		{name: "WorkspaceXExcludesFileX", held: []holding{{"core:a", []string{"workspace:X"}}},
			req: holding{"edge", []string{"file:a.go:X"}}, want: blocked},
		{name: "WorkspaceXWaitsForFileS", held: []holding{{"core:a", []string{"file:deep/er/a.go:S"}}},
			req: holding{"core:b", []string{"workspace:X"}}, want: blocked},
		{name: "WorkspaceXWaitsForFileX", held: []holding{{"core:a", []string{"file:a.go:X"}}},
			req: holding{"edge", []string{"workspace:X"}}, want: blocked},
		{name: "WorkspaceXExcludesWorkspaceX", held: []holding{{"core:a", []string{"workspace:X"}}},
			req: holding{"core:b", []string{"workspace:X"}}, want: blocked},
		{name: "WorkspaceSBesideFileS", held: []holding{{"core:a", []string{"workspace:S"}}},
			req: holding{"core:b", []string{"file:a.go:S"}}, want: granted},
		{name: "WorkspaceSExcludesFileX", held: []holding{{"core:a", []string{"workspace:S"}}},
			req: holding{"core:b", []string{"file:a.go:X"}}, want: blocked},
		{name: "FileXExcludesWorkspaceS", held: []holding{{"core:a", []string{"file:a/b.go:X"}}},
			req: holding{"core:b", []string{"workspace:S"}}, want: blocked},
		{name: "ChoirTmpIndependentOfWorkspaceX", held: []holding{{"core:a", []string{"workspace:X"}}},
			req: holding{"core:b", []string{"choirtmp:X"}}, want: granted},
		{name: "WorkspaceXIndependentOfChoirTmpX", held: []holding{{"core:a", []string{"choirtmp:X"}}},
			req: holding{"core:b", []string{"workspace:X"}}, want: granted},
		{name: "ChoirTmpIsExclusive", held: []holding{{"core:a", []string{"choirtmp:X"}}},
			req: holding{"edge", []string{"choirtmp:X"}}, want: blocked},
		{name: "BrowserTabIndependentOfWorkspace", held: []holding{{"core:a", []string{"workspace:X"}}},
			req: holding{"core:b", []string{"browser_tab:X"}}, want: granted},
		{name: "BrowserTabIsExclusive", held: []holding{{"core:a", []string{"browser_tab:X"}}},
			req: holding{"edge", []string{"browser_tab:X"}}, want: blocked},
		{name: "ReservedKeysDifferByName", held: []holding{{"core:a", []string{"net:brave:X"}}},
			req: holding{"core:b", []string{"net:smtp:X", "mem:main:X", "repo:main:X", "ext:notion:X"}}, want: granted},
		{name: "ReservedKeysConflictByName", held: []holding{{"core:a", []string{"ext:notion:X"}}},
			req: holding{"core:b", []string{"ext:notion:S"}}, want: blocked},
		{name: "ReservedKeysIndependentOfWorkspace", held: []holding{{"core:a", []string{"workspace:X"}}},
			req: holding{"core:b", []string{"repo:main:X", "mem:main:X"}}, want: granted},

		// File keys form a tree under workspace.
		{name: "DirectorySExcludesFileXBelow", held: []holding{{"core:a", []string{"file:src:S"}}},
			req: holding{"core:b", []string{"file:src/a.go:X"}}, want: blocked},
		{name: "DirectorySBesideFileSBelow", held: []holding{{"core:a", []string{"file:src:S"}}},
			req: holding{"core:b", []string{"file:src/a.go:S"}}, want: granted},
		{name: "FileSBelowExcludesDirectoryX", held: []holding{{"core:a", []string{"file:src/a/b.go:S"}}},
			req: holding{"core:b", []string{"file:src:X"}}, want: blocked},
		{name: "DirectoryXExcludesFileSBelow", held: []holding{{"core:a", []string{"file:src:X"}}},
			req: holding{"core:b", []string{"file:src/a/b.go:S"}}, want: blocked},
		{name: "SiblingWithSharedPrefixIsIndependent", held: []holding{{"core:a", []string{"file:src:X"}}},
			req: holding{"core:b", []string{"file:src2/a.go:X", "file:src.go:X", "file:sr:X"}}, want: granted},

		// Spec 9.3: all or nothing.
		{name: "OneBusyKeyBlocksTheWholeSet", held: []holding{{"core:a", []string{"file:b.go:X"}}},
			req: holding{"core:b", []string{"file:a.go:X", "file:b.go:S", "choirtmp:X"}}, want: blocked},

		// Spec 9.4: the dirty-read exception, and what it does not cover.
		{name: "EdgeReadsFileDuringCoreWorkspaceX", held: []holding{{"core:a", []string{"workspace:X"}}},
			req: holding{"edge", []string{"file:a.go:S", "file:src:S"}}, want: granted},
		{name: "CoreWorkspaceXBesideEdgeFileRead", held: []holding{{"edge", []string{"file:a.go:S"}}},
			req: holding{"core:a", []string{"workspace:X"}}, want: granted},
		{name: "EdgeWorkspaceSIsNoDirtyRead", held: []holding{{"core:a", []string{"workspace:X"}}},
			req: holding{"edge", []string{"workspace:S"}}, want: blocked},
		{name: "EdgeFileXIsNoDirtyRead", held: []holding{{"core:a", []string{"workspace:X"}}},
			req: holding{"edge", []string{"file:a.go:X"}}, want: blocked},
		{name: "CoreFileSIsNoDirtyRead", held: []holding{{"core:a", []string{"workspace:X"}}},
			req: holding{"core:b", []string{"file:a.go:S"}}, want: blocked},
		{name: "CoreWorkspaceXWaitsForEdgeFileX", held: []holding{{"edge", []string{"file:a.go:X"}}},
			req: holding{"core:a", []string{"workspace:X"}}, want: blocked},
		{name: "CoreWorkspaceXWaitsForCoreFileS", held: []holding{{"edge", []string{"file:a.go:S"}}, {"core:b", []string{"file:b.go:S"}}},
			req: holding{"core:a", []string{"workspace:X"}}, want: blocked},
		{name: "DirtyReadOnlyAgainstWorkspace", held: []holding{{"core:a", []string{"file:src:X"}}},
			req: holding{"edge", []string{"file:src/a.go:S"}}, want: blocked},
		{name: "DirtyReadNeedsEveryKeyFree", held: []holding{{"core:a", []string{"workspace:X", "choirtmp:X"}}},
			req: holding{"edge", []string{"file:a.go:S", "choirtmp:X"}}, want: blocked},

		// Spec 9.4: writer preference, read per key, and FIFO among
		// conflicting waiters.
		{name: "WaitingWriterBlocksNewReader",
			held:    []holding{{"core:a", []string{"file:a.go:S"}}},
			waiting: []holding{{"core:b", []string{"file:a.go:X"}}},
			req:     holding{"core:c", []string{"file:a.go:S"}}, want: blocked},
		{name: "WaitingWriterBlocksEdgeReaderOfThatFile",
			held:    []holding{{"core:a", []string{"file:a.go:S"}}},
			waiting: []holding{{"core:b", []string{"file:a.go:X"}}},
			req:     holding{"edge", []string{"file:a.go:S"}}, want: blocked},
		{name: "WaitingWriterLeavesOtherKeysAlone",
			held:    []holding{{"core:a", []string{"file:a.go:S"}}},
			waiting: []holding{{"core:b", []string{"file:a.go:X"}}},
			req:     holding{"core:c", []string{"file:b.go:S", "choirtmp:X"}}, want: granted},
		{name: "WaitingWorkspaceXBlocksCoreFileRead",
			held:    []holding{{"core:a", []string{"file:a.go:X"}}},
			waiting: []holding{{"core:b", []string{"workspace:X"}}},
			req:     holding{"core:c", []string{"file:b.go:S"}}, want: blocked},
		{name: "WaitingWorkspaceXDoesNotBlockEdgeFileRead",
			held:    []holding{{"core:a", []string{"file:a.go:X"}}},
			waiting: []holding{{"core:b", []string{"workspace:X"}}},
			req:     holding{"edge", []string{"file:b.go:S"}}, want: granted},
		{name: "WaitingWorkspaceXBlocksEdgeWorkspaceS",
			held:    []holding{{"core:a", []string{"file:a.go:S"}}},
			waiting: []holding{{"core:b", []string{"workspace:X"}}},
			req:     holding{"edge", []string{"workspace:S"}}, want: blocked},
		{name: "NewWriterDoesNotOvertakeWaitingReaders",
			held:    []holding{{"core:a", []string{"file:a.go:X"}}},
			waiting: []holding{{"core:b", []string{"file:a.go:S", "file:b.go:S"}}},
			req:     holding{"core:c", []string{"file:b.go:X"}}, want: blocked},
		{name: "NewReaderJoinsWaitingReadersKeyWhenNoWriterWaits",
			held:    []holding{{"core:a", []string{"file:a.go:X"}}},
			waiting: []holding{{"core:b", []string{"file:a.go:S", "file:b.go:S"}}},
			req:     holding{"core:c", []string{"file:b.go:S"}}, want: granted},

		// No upgrades, and no silent self-deadlock.
		{name: "OwnerReadsTwice", held: []holding{{"core:a", []string{"file:a.go:S"}}},
			req: holding{"core:a", []string{"file:a.go:S"}}, want: granted},
		{name: "NoUpgradeFromSharedToExclusive", held: []holding{{"core:a", []string{"file:a.go:S"}}},
			req: holding{"core:a", []string{"file:a.go:X"}}, want: selfDeadlock},
		{name: "OwnerCannotReadWhatItWrites", held: []holding{{"core:a", []string{"file:a.go:X"}}},
			req: holding{"core:a", []string{"file:a.go:S"}}, want: selfDeadlock},
		{name: "OwnerWorkspaceXBlocksItsFileLocks", held: []holding{{"core:a", []string{"workspace:X"}}},
			req: holding{"core:a", []string{"file:a.go:S"}}, want: selfDeadlock},
		{name: "EdgeOwnWorkspaceXIsNoDirtyRead", held: []holding{{"edge", []string{"workspace:X"}}},
			req: holding{"edge", []string{"file:a.go:S"}}, want: selfDeadlock},
		{name: "SelfConflictReportedEvenIfOthersBlockToo",
			held: []holding{{"core:a", []string{"file:a.go:S"}}, {"core:b", []string{"file:a.go:S"}}},
			req:  holding{"core:a", []string{"file:a.go:X"}}, want: selfDeadlock},
		{name: "ReaderBehindWriterWaitingForTheSameOwner",
			held:    []holding{{"edge", []string{"file:a.go:S"}}},
			waiting: []holding{{"core:b", []string{"file:a.go:X"}}},
			req:     holding{"edge", []string{"file:a.go:S"}}, want: selfDeadlock},
		{name: "SelfDeadlockThroughAChainOfWaiters",
			held: []holding{{"core:a", []string{"file:a.go:S"}}},
			waiting: []holding{
				{"core:b", []string{"file:a.go:X", "file:b.go:X"}},
				{"core:c", []string{"file:b.go:S", "file:c.go:X"}},
			},
			req: holding{"core:a", []string{"file:c.go:S"}}, want: selfDeadlock},
		{name: "OwnWaitingSetIsNoDeadlock",
			held:    []holding{{"core:b", []string{"file:a.go:X"}}},
			waiting: []holding{{"core:a", []string{"file:a.go:X"}}},
			req:     holding{"core:a", []string{"file:a.go:S"}}, want: blocked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			var releases []func()
			for _, h := range tc.held {
				releases = append(releases, b.hold(h.owner, h.locks...))
			}
			var waiters []*pending
			for _, w := range tc.waiting {
				waiters = append(waiters, b.wait(w.owner, w.locks...))
			}
			before := b.m.Snapshot()

			release, ok, err := b.m.TryAcquire(mustOwner(t, tc.req.owner), reqs(t, tc.req.locks...))
			var got outcome
			switch {
			case errors.Is(err, lock.ErrWouldSelfDeadlock):
				got = selfDeadlock
			case err != nil:
				t.Fatalf("TryAcquire: %v", err)
			case ok:
				got = granted
			default:
				got = blocked
			}
			if got != tc.want {
				t.Fatalf("%s %q: %v, want %v", tc.req.owner, tc.req.locks, got, tc.want)
			}
			if got != granted {
				// A refused lockset leaves no trace, not even part of it.
				if after := b.m.Snapshot(); !sameState(before, after) {
					t.Fatalf("refused request changed the state:\nbefore %+v\nafter  %+v", before, after)
				}
			}
			release()

			// Acquire agrees with TryAcquire: it fails at once with
			// ErrWouldSelfDeadlock rather than hanging.
			if tc.want == selfDeadlock {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err := b.m.Acquire(ctx, mustOwner(t, tc.req.owner), reqs(t, tc.req.locks...))
				if !errors.Is(err, lock.ErrWouldSelfDeadlock) {
					t.Fatalf("Acquire: %v, want ErrWouldSelfDeadlock", err)
				}
			}

			for _, r := range releases {
				r()
			}
			for _, w := range waiters {
				w.granted(t)()
			}
			if s := b.m.Snapshot(); len(s.Held)+len(s.Waiting) != 0 {
				t.Fatalf("state not empty after releasing everything: %+v", s)
			}
		})
	}
}

func sameState(a, b lock.Snapshot) bool {
	eq := func(x, y []lock.Holding) bool {
		return slices.EqualFunc(x, y, func(p, q lock.Holding) bool {
			return p.Owner == q.Owner && slices.Equal(p.Locks, q.Locks) && p.Since.Equal(q.Since)
		})
	}
	return eq(a.Held, b.Held) && eq(a.Waiting, b.Waiting)
}

func TestAcquire(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	coreA, coreB, coreC := mustOwner(t, "core:a"), mustOwner(t, "core:b"), mustOwner(t, "core:c")

	t.Run("EmptyLocksetNeedsNoLock", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		defer b.hold("core:a", "workspace:X", "choirtmp:X", "browser_tab:X")()
		release, err := b.m.Acquire(ctx, coreB, nil)
		if err != nil {
			t.Fatal(err)
		}
		release()
		release()
	})
	t.Run("InvalidInputFailsAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if _, err := b.m.Acquire(ctx, lock.Owner{}, reqs(t, "workspace:X")); !errors.Is(err, lock.ErrInvalidOwner) {
			t.Errorf("zero owner: %v", err)
		}
		if _, err := b.m.Acquire(ctx, coreA, []lock.Request{{Mode: lock.X}}); !errors.Is(err, lock.ErrInvalidKey) {
			t.Errorf("zero key: %v", err)
		}
		if _, err := b.m.Acquire(ctx, coreA, []lock.Request{{Key: lock.Workspace}}); !errors.Is(err, lock.ErrInvalidMode) {
			t.Errorf("zero mode: %v", err)
		}
		if _, _, err := b.m.TryAcquire(lock.Owner{}, nil); !errors.Is(err, lock.ErrInvalidOwner) {
			t.Errorf("TryAcquire zero owner: %v", err)
		}
	})
	t.Run("ReleaseIsIdempotent", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r1 := b.hold("core:a", "file:a.go:S")
		r2 := b.hold("core:b", "file:a.go:S")
		r1()
		r1() // must not release core:b's S
		if _, ok, _ := b.m.TryAcquire(coreC, reqs(t, "file:a.go:X")); ok {
			t.Fatal("X granted while core:b still holds S")
		}
		r2()
		b.hold("core:c", "file:a.go:X")()
	})
	t.Run("ReleaseFreesTheWholeSet", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.hold("core:a", "file:a.go:X", "file:src:S", "choirtmp:X", "browser_tab:X")()
		b.hold("core:b", "workspace:X", "choirtmp:X", "browser_tab:X")()
		if s := b.m.Snapshot(); len(s.Held) != 0 {
			t.Fatalf("held after release: %+v", s.Held)
		}
	})
	t.Run("WaiterIsGrantedOnRelease", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.hold("core:a", "workspace:X")
		w := b.wait("core:b", "file:a.go:X")
		w.stillWaiting(t)
		r()
		w.granted(t)()
	})
	t.Run("ConflictingWaitersAreServedInArrivalOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.hold("core:a", "file:a.go:X")
		w1 := b.wait("core:b", "file:a.go:X")
		w2 := b.wait("core:c", "file:a.go:S")
		w3 := b.wait("edge", "file:a.go:X")
		r()
		r1 := w1.granted(t)
		w2.stillWaiting(t)
		r1()
		r2 := w2.granted(t)
		w3.stillWaiting(t)
		r2()
		w3.granted(t)()
	})
	t.Run("ReleaseGrantsAllCompatibleWaitersAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.hold("core:a", "workspace:X")
		ws := []*pending{b.wait("core:b", "file:a.go:S"), b.wait("core:c", "file:a.go:S"), b.wait("core:d", "file:b.go:X")}
		r()
		var rs []func()
		for _, w := range ws {
			rs = append(rs, w.granted(t))
		}
		if s := b.m.Snapshot(); len(s.Held) != 3 {
			t.Fatalf("held = %+v, want three locksets", s.Held)
		}
		for _, r := range rs {
			r()
		}
	})
	t.Run("UnrelatedReleaseDoesNotLetReaderOvertakeWriter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ra := b.hold("core:a", "file:a.go:S")
		rz := b.hold("core:z", "choirtmp:X")
		writer := b.wait("core:b", "file:a.go:X")
		reader := b.wait("core:c", "file:a.go:S")
		rz() // wakes the queue; the reader still conflicts with the writer ahead
		reader.stillWaiting(t)
		writer.stillWaiting(t)
		ra()
		rw := writer.granted(t)
		reader.stillWaiting(t)
		rw()
		reader.granted(t)()
	})
	t.Run("WaiterIsNotHeldUpByUnrelatedEarlierWaiter", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ra := b.hold("core:a", "file:a.go:X")
		rb := b.hold("core:b", "file:b.go:X")
		w1 := b.wait("core:c", "file:a.go:S")
		w2 := b.wait("core:d", "file:b.go:S")
		rb()
		w2.granted(t)()
		w1.stillWaiting(t)
		ra()
		w1.granted(t)()
	})
	t.Run("MultiKeyWaiterIsNotStarvedBySingleKeyStream", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		rb := b.hold("core:a", "file:b.go:X")
		w := b.wait("core:w", "file:a.go:X", "file:b.go:X")
		// file:a.go is free, but granting it would let it be busy again
		// whenever b.go frees up.
		for range 3 {
			if _, ok, _ := b.m.TryAcquire(coreC, reqs(t, "file:a.go:S")); ok {
				t.Fatal("single-key request overtook the waiting lockset")
			}
		}
		rb()
		w.granted(t)()
	})
	t.Run("CancelWhileWaitingLeavesNoTrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		r := b.hold("core:a", "file:a.go:S")
		writer := b.wait("core:b", "file:a.go:X", "choirtmp:X")
		reader := b.wait("core:c", "file:a.go:S") // behind the writer
		reader.stillWaiting(t)
		writer.cancel()
		select {
		case a := <-writer.done:
			if !errors.Is(a.err, context.Canceled) {
				t.Fatalf("cancelled Acquire: %v, want context.Canceled", a.err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("cancelled Acquire did not return")
		}
		// The reader queued behind the writer is served at once.
		rr := reader.granted(t)
		s := b.m.Snapshot()
		if len(s.Waiting) != 0 || len(s.Held) != 2 {
			t.Fatalf("state after cancel: %+v", s)
		}
		for _, h := range s.Held {
			if h.Owner == coreB {
				t.Fatalf("cancelled owner still holds %v", h.Locks)
			}
		}
		// choirtmp was never taken.
		b.hold("core:d", "choirtmp:X")()
		r()
		rr()
	})
	t.Run("DeadlineWhileWaiting", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		defer b.hold("core:a", "browser_tab:X")()
		ctx, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
		defer cancel()
		_, err := b.m.Acquire(ctx, coreB, reqs(t, "browser_tab:X"))
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "browser_tab:X") {
			t.Fatalf("Acquire = %v, want a deadline error naming the lockset", err)
		}
		if s := b.m.Snapshot(); len(s.Waiting) != 0 {
			t.Fatalf("waiter left behind: %+v", s.Waiting)
		}
	})
	t.Run("DoneContextFailsEvenWhenFree", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		if _, err := b.m.Acquire(ctx, coreA, reqs(t, "workspace:X")); !errors.Is(err, context.Canceled) {
			t.Fatalf("Acquire = %v", err)
		}
		if s := b.m.Snapshot(); len(s.Held) != 0 {
			t.Fatalf("held: %+v", s.Held)
		}
	})
}

func TestDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	core := mustOwner(t, "core:a")

	t.Run("HoldsTheLocksWhileFnRuns", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		err := b.m.Do(ctx, core, reqs(t, "workspace:X"), func() error {
			if s := b.m.Snapshot(); len(s.Held) != 1 || s.Held[0].Owner != core {
				t.Errorf("inside Do: %+v", s)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		b.hold("core:b", "workspace:X")()
	})
	t.Run("ReturnsFnErrorAndReleases", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		boom := errors.New("boom")
		if err := b.m.Do(ctx, core, reqs(t, "workspace:X"), func() error { return boom }); !errors.Is(err, boom) {
			t.Fatalf("Do = %v", err)
		}
		b.hold("core:b", "workspace:X")()
	})
	t.Run("ReleasesOnPanic", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		func() {
			defer func() {
				if r := recover(); r != "tool exploded" {
					t.Fatalf("recovered %v", r)
				}
			}()
			_ = b.m.Do(ctx, core, reqs(t, "workspace:X", "choirtmp:X"), func() error { panic("tool exploded") })
		}()
		if s := b.m.Snapshot(); len(s.Held) != 0 {
			t.Fatalf("locks held after panic: %+v", s.Held)
		}
		b.hold("core:b", "workspace:X", "choirtmp:X")()
	})
	t.Run("DoesNotRunFnWithoutTheLocks", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		defer b.hold("core:a", "workspace:X")()
		ran := false
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := b.m.Do(ctx, core, reqs(t, "file:a.go:S"), func() error { ran = true; return nil })
		if !errors.Is(err, lock.ErrWouldSelfDeadlock) || ran {
			t.Fatalf("Do = %v, ran %v", err, ran)
		}
	})
}

func TestSnapshot(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.hold("core:a", "workspace:X", "choirtmp:X")
	re := b.hold("edge", "file:./README.md:S")
	w := b.wait("core:b", "file:a.go:X")
	s := b.m.Snapshot()
	if len(s.Held) != 2 || len(s.Waiting) != 1 {
		t.Fatalf("snapshot = %+v", s)
	}
	got, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	var v struct {
		Held, Waiting []struct {
			Owner string
			Locks []string
			Since time.Time
		}
	}
	if err := json.Unmarshal(got, &v); err != nil {
		t.Fatal(err)
	}
	if v.Held[0].Owner != "core:a" || !slices.Equal(v.Held[0].Locks, []string{"workspace:X", "choirtmp:X"}) ||
		v.Held[1].Owner != "edge" || !slices.Equal(v.Held[1].Locks, []string{"file:README.md:S"}) ||
		v.Waiting[0].Owner != "core:b" || !slices.Equal(v.Waiting[0].Locks, []string{"file:a.go:X"}) {
		t.Fatalf("snapshot JSON = %s", got)
	}
	for _, h := range append(v.Held, v.Waiting...) {
		if h.Since.IsZero() || time.Since(h.Since) > time.Minute {
			t.Errorf("since = %v", h.Since)
		}
	}
	// The snapshot is a copy.
	s.Held[0].Locks[0] = lock.Request{Key: lock.BrowserTab, Mode: lock.S}
	if b.m.Snapshot().Held[0].Locks[0].Key != lock.Workspace {
		t.Fatal("snapshot aliases the manager's state")
	}
	r()
	re()
	w.granted(t)()
}
