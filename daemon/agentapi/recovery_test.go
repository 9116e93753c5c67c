package agentapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
	"github.com/choirhq/choir/sql/seam"
)

func TestHello(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	helloReq := func(s session.StartedSession) (rpc.Call, rpc.InitHelloRequest) {
		call := rpc.Call{Session: rpc.Session{ID: s.Session.ID.String(), AgentID: "assistant"}, Verb: "INIT_HELLO"}
		return call, rpc.InitHelloRequest{AgentID: "assistant", SessionID: call.Session.ID, ImageVersion: "img-1",
			ToolManifestHash: "t1", SkillManifestHash: "s1"}
	}

	t.Run("FirstSessionStartsFreshAndRecordsTheHello", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		s, err := session.CreateSession(ctx, pool, choirdtest.TwoAgentsConfig(t), "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := agentapi.Hello(ctx, pool, choirdtest.SessionCall(s), choirdtest.HelloRequest(s))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != rpc.HelloFresh || resp.AckedRev != 0 || resp.AckedHash != rpc.Genesis {
			t.Errorf("resp = %+v", resp)
		}
		if resp.ResourceBindings.Workspace != "main" || !slices.Equal(resp.ResourceBindings.Secrets, []string{"model-key"}) {
			t.Errorf("bindings = %+v", resp.ResourceBindings)
		}
		row, _ := seam.Queries(pool).SessionGetByID(ctx, s.Session.ID)
		if row.HelloAt == nil || row.ImageVersion != "img-1" {
			t.Errorf("hello not recorded: %v %q", row.HelloAt, row.ImageVersion)
		}
	})

	t.Run("AHelloForAnotherSessionIsDenied", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		s, err := session.CreateSession(ctx, pool, choirdtest.TwoAgentsConfig(t), "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		call, req := helloReq(s)
		req.AgentID = "helper"
		if _, err := agentapi.Hello(ctx, pool, call, req); !errors.Is(err, wire.ErrPermissionDenied) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("AfterACrashTheNextSessionGetsSnapshotPlusTailAcrossSessions", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		cfg := choirdtest.TwoAgentsConfig(t)
		q := seam.Queries(pool)

		// Session 1 replicates revs 1-4 and snapshots at 2, then crashes.
		s1, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		evs := choirdtest.ChainEvents(t, 1, 7, rpc.Genesis)
		if _, err := agentapi.Replicate(ctx, pool, s1.Session.ID, choirdtest.Patch(evs[:4], 0, rpc.Genesis)); err != nil {
			t.Fatal(err)
		}
		if err := q.SnapshotInsert(ctx, db.SnapshotInsertParams{SessionID: s1.Session.ID, Rev: 2,
			Snapshot: json.RawMessage(`{"lane_state":{"edge":"idle"}}`)}); err != nil {
			t.Fatal(err)
		}
		session.EndSession(ctx, pool, nil, s1.Session.ID, "crashed", "test crash")

		// Session 2 resumes, replicates 5-7, and is stopped.
		s2, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		resp, err := agentapi.Hello(ctx, pool, choirdtest.SessionCall(s2), choirdtest.HelloRequest(s2))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Status != rpc.HelloResumed || resp.Snapshot == nil || resp.Snapshot.Rev != 2 ||
			len(resp.TailEvents) != 2 || resp.AckedRev != 4 || resp.AckedHash != evs[3].Hash {
			t.Fatalf("resume after crash: status %s snapshot %+v tail %d acked %d", resp.Status, resp.Snapshot, len(resp.TailEvents), resp.AckedRev)
		}
		if resp.Snapshot.Hash != evs[1].Hash {
			t.Errorf("snapshot hash is not the hash of rev 2")
		}
		if _, err := agentapi.Replicate(ctx, pool, s2.Session.ID, choirdtest.Patch(evs[4:], 4, evs[3].Hash)); err != nil {
			t.Fatal(err)
		}
		session.EndSession(ctx, pool, nil, s2.Session.ID, "ended", "stopped")

		// Session 3 sees the whole chain: snapshot 2 and tail 3-7.
		s3, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		resp, err = agentapi.Hello(ctx, pool, choirdtest.SessionCall(s3), choirdtest.HelloRequest(s3))
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.TailEvents) != 5 || resp.TailEvents[0].Rev != 3 || resp.AckedRev != 7 {
			t.Fatalf("third session: tail %d from %d, acked %d", len(resp.TailEvents), resp.TailEvents[0].Rev, resp.AckedRev)
		}
		for i, e := range resp.TailEvents {
			if err := e.Verify(evs[i+1].Hash); err != nil {
				t.Errorf("tail event %d does not verify after a round trip through Postgres: %v", e.Rev, err)
			}
		}
	})

	t.Run("OnlyASuccessorWithAFreshBudgetResetsTheSnapshotsCounters", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		cfg := choirdtest.TwoAgentsConfig(t)
		q := seam.Queries(pool)
		evs := choirdtest.ChainEvents(t, 1, 6, rpc.Genesis)
		// hello starts a session by, replicates evs[from:to] with a
		// snapshot at the last, reports ResetBudgets, and ends it.
		hello := func(by session.Origin, from, to int) bool {
			t.Helper()
			s, err := session.CreateSessionAs(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process", by)
			if err != nil {
				t.Fatal(err)
			}
			resp, err := agentapi.Hello(ctx, pool, choirdtest.SessionCall(s), choirdtest.HelloRequest(s))
			if err != nil {
				t.Fatal(err)
			}
			if to > from {
				prev := rpc.Genesis
				if from > 0 {
					prev = evs[from-1].Hash
				}
				if _, err := agentapi.Replicate(ctx, pool, s.Session.ID, choirdtest.Patch(evs[from:to], int64(from), prev)); err != nil {
					t.Fatal(err)
				}
				if err := q.SnapshotInsert(ctx, db.SnapshotInsertParams{SessionID: s.Session.ID, Rev: int64(to),
					Snapshot: json.RawMessage(`{"edge":{"tokens_used":900}}`)}); err != nil {
					t.Fatal(err)
				}
				// A reconnect of the same session keeps its own counters.
				again, err := agentapi.Hello(ctx, pool, choirdtest.SessionCall(s), choirdtest.HelloRequest(s))
				if err != nil || again.Snapshot == nil || again.ResetBudgets {
					t.Errorf("a reconnect of session %s resets its budgets: %+v, %v", s.Session.ID, again, err)
				}
			}
			session.EndSession(ctx, pool, nil, s.Session.ID, "ended", "stopped")
			return resp.ResetBudgets
		}
		if hello(session.ByPerson, 0, 2) {
			t.Error("a first session with nothing to resume resets budgets")
		}
		if hello(session.ByChoird, 2, 4) {
			t.Error("a session choird started on its own resets the budget it continues")
		}
		if !hello(session.ByRollover, 4, 5) {
			t.Error("the day's rollover does not reset the budgets")
		}
		if !hello(session.ByPerson, 0, 0) {
			t.Error("a person's start does not reset the budgets")
		}
	})

	t.Run("ASnapshotFailingItsHashCheckFallsBackToTheOneBeforeWithALongerTail", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		cfg := choirdtest.TwoAgentsConfig(t)
		s1, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		// Snapshots at 3, 6 and 9 arrive with the heartbeats, as the agent
		// sends them.
		evs := choirdtest.ChainEvents(t, 1, 10, rpc.Genesis)
		for _, end := range []int64{3, 6, 9, 10} {
			from := end - 3
			if end == 10 {
				from = 9
			}
			req := choirdtest.Patch(evs[from:end], from, chainHash(evs, from))
			if end != 10 {
				req.Snapshot = &rpc.Snapshot{Rev: end, Hash: evs[end-1].Hash,
					State: json.RawMessage(`{"edge":{"window_from":` + strconv.FormatInt(end, 10) + `,"note":"ünïcode and \"quotes\""}}`)}
			}
			if _, err := agentapi.Replicate(ctx, pool, s1.Session.ID, req); err != nil {
				t.Fatal(err)
			}
		}
		session.EndSession(ctx, pool, nil, s1.Session.ID, "crashed", "test crash")
		resume := func(t *testing.T) (rpc.InitHelloResponse, string) {
			t.Helper()
			s, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			resp, err := agentapi.HelloWith(ctx, pool, slog.New(slog.NewJSONHandler(&logs, nil)), choirdtest.SessionCall(s), choirdtest.HelloRequest(s))
			if err != nil {
				t.Fatal(err)
			}
			session.EndSession(ctx, pool, nil, s.Session.ID, "ended", "test")
			return resp, logs.String()
		}

		// Intact, the newest snapshot wins: its state survived jsonb.
		resp, logs := resume(t)
		if resp.Snapshot == nil || resp.Snapshot.Rev != 9 || len(resp.TailEvents) != 1 || logs != "" {
			t.Fatalf("intact: snapshot %+v, tail %d, logs %q", resp.Snapshot, len(resp.TailEvents), logs)
		}

		// The newest state altered: fall back to 6, tail 7-10, and say so.
		pool.Exec(ctx, `UPDATE choir_control.session_snapshots SET snapshot = '{"edge":{"window_from":1}}' WHERE rev = 9`)
		resp, logs = resume(t)
		if resp.Snapshot == nil || resp.Snapshot.Rev != 6 || len(resp.TailEvents) != 4 || resp.TailEvents[0].Rev != 7 {
			t.Fatalf("after tampering with 9: snapshot %+v, tail %d", resp.Snapshot, len(resp.TailEvents))
		}
		if !strings.Contains(logs, "snapshot failed its hash check") || !strings.Contains(logs, `"snapshot_rev":9`) ||
			!strings.Contains(logs, "state has SHA-256") {
			t.Errorf("the fallback is not logged with its reason: %s", logs)
		}

		// A snapshot whose chain hash is not its event's is skipped too;
		// with none left the whole chain is the tail.
		pool.Exec(ctx, `UPDATE choir_control.session_snapshots SET hash = $1 WHERE rev = 6`, evs[0].Hash[:])
		pool.Exec(ctx, `UPDATE choir_control.session_snapshots SET state_sha256 = $1 WHERE rev = 3`, evs[0].Hash[:])
		resp, logs = resume(t)
		if resp.Snapshot != nil || len(resp.TailEvents) != 10 || resp.AckedRev != 10 {
			t.Fatalf("with every snapshot bad: snapshot %+v, tail %d", resp.Snapshot, len(resp.TailEvents))
		}
		if n := strings.Count(logs, "snapshot failed its hash check"); n != 3 || !strings.Contains(logs, "but the event at rev 6 has") {
			t.Errorf("%d fallbacks logged, want 3: %s", n, logs)
		}
	})
}

// chainHash is the hash of revision rev in evs (revisions 1..), or the
// genesis hash for rev 0.
func chainHash(evs []rpc.Event, rev int64) rpc.Hash {
	if rev == 0 {
		return rpc.Genesis
	}
	return evs[rev-1].Hash
}
