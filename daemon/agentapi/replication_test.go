package agentapi_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/wire"
	"github.com/choirhq/choir/sql/seam"
)

func storedRevs(t *testing.T, pool *pgxpool.Pool, id uuid.UUID) (n, acked int64) {
	t.Helper()
	pool.QueryRow(context.Background(), "SELECT count(*) FROM choir_control.session_events WHERE session_id = $1", id).Scan(&n)
	pool.QueryRow(context.Background(), "SELECT acked_rev FROM choir_control.sessions WHERE session_id = $1", id).Scan(&acked)
	return n, acked
}

func TestReplicate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ContiguousPatchesAreAppendedAndAcknowledged", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		evs := choirdtest.ChainEvents(t, 1, 8, rpc.Genesis)
		resp, err := agentapi.Replicate(ctx, pool, id, choirdtest.Patch(evs[:5], 0, rpc.Genesis))
		if err != nil || resp.AckRev != 5 {
			t.Fatalf("first heartbeat: %+v, %v", resp, err)
		}
		resp, err = agentapi.Replicate(ctx, pool, id, choirdtest.Patch(evs[5:], 5, evs[4].Hash))
		if err != nil || resp.AckRev != 8 {
			t.Fatalf("second heartbeat: %+v, %v", resp, err)
		}
		if n, acked := storedRevs(t, pool, id); n != 8 || acked != 8 {
			t.Errorf("stored %d events, acked %d; want 8, 8", n, acked)
		}
	})

	t.Run("EmptyHeartbeatOnlyTouchesTheSession", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		pool.Exec(ctx, "UPDATE choir_control.sessions SET last_heartbeat_at = now() - interval '1 hour' WHERE session_id = $1", id)
		if _, err := agentapi.Replicate(ctx, pool, id, choirdtest.Patch(nil, 0, rpc.Genesis)); err != nil {
			t.Fatal(err)
		}
		var age time.Duration
		pool.QueryRow(ctx, "SELECT now() - last_heartbeat_at FROM choir_control.sessions WHERE session_id = $1", id).Scan(&age)
		if age > time.Minute {
			t.Errorf("last_heartbeat_at not advanced: %s old", age)
		}
	})

	t.Run("ResentPatchIsNoOp", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		evs := choirdtest.ChainEvents(t, 1, 4, rpc.Genesis)
		req := choirdtest.Patch(evs, 0, rpc.Genesis)
		for range 3 {
			resp, err := agentapi.Replicate(ctx, pool, id, req)
			if err != nil || resp.AckRev != 4 {
				t.Fatalf("heartbeat: %+v, %v", resp, err)
			}
		}
		if n, _ := storedRevs(t, pool, id); n != 4 {
			t.Errorf("stored %d events, want 4", n)
		}
	})

	t.Run("OverlappingResendAppendsOnlyTheNewTail", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		evs := choirdtest.ChainEvents(t, 1, 6, rpc.Genesis)
		if _, err := agentapi.Replicate(ctx, pool, id, choirdtest.Patch(evs[:3], 0, rpc.Genesis)); err != nil {
			t.Fatal(err)
		}
		// The ack was lost: the agent resends from its old base with more.
		resp, err := agentapi.Replicate(ctx, pool, id, choirdtest.Patch(evs, 0, rpc.Genesis))
		if err != nil || resp.AckRev != 6 {
			t.Fatalf("resend: %+v, %v", resp, err)
		}
		if n, acked := storedRevs(t, pool, id); n != 6 || acked != 6 {
			t.Errorf("stored %d, acked %d; want 6, 6", n, acked)
		}
	})

	t.Run("GapIsRejectedNamingWhereToResumeAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		evs := choirdtest.ChainEvents(t, 1, 6, rpc.Genesis)
		if _, err := agentapi.Replicate(ctx, pool, id, choirdtest.Patch(evs[:2], 0, rpc.Genesis)); err != nil {
			t.Fatal(err)
		}
		_, err := agentapi.Replicate(ctx, pool, id, choirdtest.Patch(evs[3:], 3, evs[2].Hash))
		if !errors.Is(err, agentapi.ErrChainGap) || !errors.Is(err, wire.ErrConflict) {
			t.Fatalf("err = %v, want a gap conflict", err)
		}
		if want := "resend from rev 3"; !strings.Contains(err.Error(), want) {
			t.Errorf("err %q lacks %q", err, want)
		}
		if n, acked := storedRevs(t, pool, id); n != 2 || acked != 2 {
			t.Errorf("stored %d, acked %d; want 2, 2", n, acked)
		}
	})

	t.Run("ForkedChainIsRejectedAndWritesNothing", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		evs := choirdtest.ChainEvents(t, 1, 2, rpc.Genesis)
		if _, err := agentapi.Replicate(ctx, pool, id, choirdtest.Patch(evs, 0, rpc.Genesis)); err != nil {
			t.Fatal(err)
		}
		fork := choirdtest.ChainEvents(t, 3, 4, rpc.Hash{1})
		_, err := agentapi.Replicate(ctx, pool, id, choirdtest.Patch(fork, 2, rpc.Hash{1}))
		if !errors.Is(err, agentapi.ErrChainBroken) {
			t.Fatalf("err = %v, want broken chain", err)
		}
		if n, _ := storedRevs(t, pool, id); n != 2 {
			t.Errorf("stored %d, want 2", n)
		}
	})

	t.Run("EndedSessionIsRefused", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		seam.Queries(pool).SessionEnd(ctx, db.SessionEndParams{SessionID: id, EndReason: "test"})
		_, err := agentapi.Replicate(ctx, pool, id, choirdtest.Patch(choirdtest.ChainEvents(t, 1, 1, rpc.Genesis), 0, rpc.Genesis))
		if !errors.Is(err, wire.ErrUnauthenticated) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("ConcurrentHeartbeatsOfOneSessionSerialise", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		evs := choirdtest.ChainEvents(t, 1, 10, rpc.Genesis)
		req := choirdtest.Patch(evs, 0, rpc.Genesis)
		errs := make(chan error, 4)
		for range 4 {
			go func() { _, err := agentapi.Replicate(ctx, pool, id, req); errs <- err }()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Errorf("concurrent resend: %v", err)
			}
		}
		if n, acked := storedRevs(t, pool, id); n != 10 || acked != 10 {
			t.Errorf("stored %d, acked %d; want 10, 10", n, acked)
		}
	})

	t.Run("SnapshotIsStoredWithItsChainHashAndStateSum", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		evs := choirdtest.ChainEvents(t, 1, 4, rpc.Genesis)
		req := choirdtest.Patch(evs, 0, rpc.Genesis)
		req.Snapshot = &rpc.Snapshot{Rev: 3, Hash: evs[2].Hash, State: json.RawMessage(`{"b": 1, "a": [true]}`)}
		if _, err := agentapi.Replicate(ctx, pool, id, req); err != nil {
			t.Fatal(err)
		}
		var hash, sum []byte
		if err := pool.QueryRow(ctx, "SELECT hash, state_sha256 FROM choir_control.session_snapshots WHERE session_id = $1 AND rev = 3",
			id).Scan(&hash, &sum); err != nil {
			t.Fatal(err)
		}
		want := sha256.Sum256([]byte(`{"a":[true],"b":1}`))
		if !bytes.Equal(hash, evs[2].Hash[:]) || !bytes.Equal(sum, want[:]) {
			t.Errorf("stored hash %x sum %x; want %s and %x", hash, sum, evs[2].Hash, want)
		}
	})

	t.Run("PatchNotContinuingItsOwnBaseIsABadRequest", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		evs := choirdtest.ChainEvents(t, 1, 3, rpc.Genesis)
		req := choirdtest.Patch([]rpc.Event{evs[0], evs[2]}, 0, rpc.Genesis)
		if _, err := agentapi.Replicate(ctx, pool, id, req); !errors.Is(err, wire.ErrBadRequest) {
			t.Fatalf("err = %v, want a bad request", err)
		}
		if n, acked := storedRevs(t, pool, id); n != 0 || acked != 0 {
			t.Errorf("stored %d, acked %d; want nothing", n, acked)
		}
	})

	t.Run("HeartbeatsLeaveNoReplayRowsOtherCallsDo", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		store := agentapi.ReplayStore{Pool: pool}
		for verb, want := range map[rpc.Verb]bool{rpc.VerbHeartbeat: false, rpc.VerbRequestApproval: true} {
			key := rpc.ReplayKey{SessionID: id.String(), RequestID: "req-" + string(verb)}
			if err := store.Save(ctx, key, rpc.ReplayRecord{Verb: verb, Response: []byte(`{}`)}); err != nil {
				t.Fatal(err)
			}
			if _, found, err := store.Load(ctx, key); err != nil || found != want {
				t.Errorf("%s: stored %v (%v), want %v", verb, found, err, want)
			}
		}
	})

	t.Run("DatabaseRefusesEventsOfNoSessionAndDeletingASessionWithEvents", func(t *testing.T) {
		t.Parallel()
		pool := dbtest.NewPool(t)
		id := choirdtest.NewSession(t, pool, "alpha")
		if _, err := agentapi.Replicate(ctx, pool, id, choirdtest.Patch(choirdtest.ChainEvents(t, 1, 2, rpc.Genesis), 0, rpc.Genesis)); err != nil {
			t.Fatal(err)
		}
		_, err := pool.Exec(ctx, "DELETE FROM choir_control.sessions WHERE session_id = $1", id)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "23503" {
			t.Errorf("deleting a session with events: %v, want a foreign key violation", err)
		}
		evs := choirdtest.ChainEvents(t, 1, 1, rpc.Genesis)
		_, err = seam.Queries(pool).EventsAppend(ctx, []db.EventsAppendParams{{SessionID: uuid.New(), Rev: 1, EventType: "user_msg",
			Lane: "edge", Payload: evs[0].Payload, HashPrev: rpc.Genesis[:], Hash: evs[0].Hash[:], CreatedAt: evs[0].CreatedAt}})
		if !errors.As(err, &pe) || pe.Code != "23503" || !strings.Contains(pe.Message, "does not exist") {
			t.Errorf("an event of no session: %v, want a foreign key violation", err)
		}
	})
}
