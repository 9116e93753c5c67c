package session_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/daemon/hold"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/sql/seam"
)

// TestRolloverStartsTheSuccessorsOwed checks, on the real schema, which
// ended sessions the rollover starts a successor for: one whose rollover
// stopped it and whose start never happened (choird stopped in between)
// at once, one whose budget was used up only from the midnight after its
// end, neither once a later session exists or a person's stop holds the
// agent.
func TestRolloverStartsTheSuccessorsOwed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	cfg := choirdtest.TwoAgentsConfig(t)
	q := seam.Queries(pool)
	end := func(agent string, o admin.StartOverrides, keepRolloverAt bool) uuid.UUID {
		t.Helper()
		s, err := session.CreateSession(ctx, pool, cfg, agent, o, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		id := s.Session.ID
		past := time.Now().Add(-time.Hour)
		if _, err := q.SessionRolloverArm(ctx, db.SessionRolloverArmParams{SessionID: id, RolloverAt: &past}); err != nil {
			t.Fatal(err)
		}
		if err := q.SessionMarkSuccessorDue(ctx, db.SessionMarkSuccessorDueParams{SessionID: id, KeepRolloverAt: keepRolloverAt}); err != nil {
			t.Fatal(err)
		}
		if _, err := session.EndSession(ctx, pool, nil, id, "ended", "test"); err != nil {
			t.Fatal(err)
		}
		return id
	}
	rolled := end("assistant", admin.StartOverrides{}, true)
	spent := end("helper", admin.StartOverrides{DM: "second", Workspace: "other"}, false)

	var mu sync.Mutex
	var started []string
	now := time.Now()
	w := &session.RolloverWorker{Rollover: session.Rollover{Pool: pool, Now: func() time.Time { return now },
		RolloverFunc: func(context.Context, string, uuid.UUID) (bool, error) { return false, nil },
		RestartFunc: func(_ context.Context, agent string, from uuid.UUID) error {
			mu.Lock()
			defer mu.Unlock()
			started = append(started, agent+" "+from.String())
			return nil
		}}}
	run := func() []string {
		t.Helper()
		mu.Lock()
		started = nil
		mu.Unlock()
		if err := w.Work(ctx, nil); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(started)
	}
	if got, want := run(), []string{"assistant " + rolled.String()}; !slices.Equal(got, want) {
		t.Errorf("before midnight: started %v, want only the rolled-over session's successor %v", got, want)
	}
	now = session.NextMidnight(time.Now(), time.UTC).Add(time.Second)
	if got, want := run(), []string{"assistant " + rolled.String(), "helper " + spent.String()}; !slices.Equal(got, want) {
		t.Errorf("after midnight: started %v, want %v", got, want)
	}
	// A later session of assistant, a person's stop of helper: nothing.
	if _, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process"); err != nil {
		t.Fatal(err)
	}
	if _, err := hold.Place(ctx, pool, "helper", "test"); err != nil {
		t.Fatal(err)
	}
	if got := run(); len(got) != 0 {
		t.Errorf("with a later session and a person's stop: started %v, want none", got)
	}
}

// TestResumeAfterAMissedRolloverHasAFreshBudget: a session choird starts on
// its own continues the budget of the one before, unless that one was due
// to roll over (choird was down at its midnight): its day is over.
func TestResumeAfterAMissedRolloverHasAFreshBudget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		due   time.Duration // from now
		fresh bool
	}{
		{"DueLaterContinuesTheBudget", time.Hour, false},
		{"DuePassedStartsAFreshOne", -time.Minute, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pool := dbtest.NewPool(t)
			cfg := choirdtest.TwoAgentsConfig(t)
			q := seam.Queries(pool)
			prev, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
			if err != nil {
				t.Fatal(err)
			}
			at := time.Now().Add(tc.due)
			if _, err := q.SessionRolloverArm(ctx, db.SessionRolloverArmParams{SessionID: prev.Session.ID, RolloverAt: &at}); err != nil {
				t.Fatal(err)
			}
			if _, err := session.EndSession(ctx, pool, nil, prev.Session.ID, "crashed", "choird restarted"); err != nil {
				t.Fatal(err)
			}
			next, err := session.CreateSessionAs(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process", session.ByChoird)
			if err != nil {
				t.Fatal(err)
			}
			if fresh := next.Session.BudgetFrom == nil; fresh != tc.fresh {
				t.Errorf("fresh budget = %v, want %v", fresh, tc.fresh)
			}
			if next.Session.ResumedFrom == nil || *next.Session.ResumedFrom != prev.Session.ID {
				t.Errorf("resumed from %v, want %s", next.Session.ResumedFrom, prev.Session.ID)
			}
		})
	}
}
