package session_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"
	"go.uber.org/goleak"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory/pipeline"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

func TestCrashDetect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	q := seam.Queries(pool)

	newSession := func(agent string, heartbeatAge time.Duration, status string) uuid.UUID {
		t.Helper()
		if _, err := q.AgentUpsert(ctx, db.AgentUpsertParams{AgentID: agent, Config: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		h := make([]byte, 32)
		rand.Read(h)
		s, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: agent, LeaseTokenHash: h,
			BaseHash: make([]byte, 32), ResourceBindings: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		for _, kind := range []string{"workspace", "dm"} {
			if _, err := q.LeaseAcquire(ctx, db.LeaseAcquireParams{ResourceKind: kind, ResourceName: agent + "-" + kind,
				AgentID: agent, SessionID: s.SessionID}); err != nil {
				t.Fatal(err)
			}
		}
		_, err = pool.Exec(ctx, `UPDATE choir_control.sessions
			SET last_heartbeat_at = now() - $2 * interval '1 millisecond', status = $3 WHERE session_id = $1`,
			s.SessionID, heartbeatAge.Milliseconds(), status)
		if err != nil {
			t.Fatal(err)
		}
		return s.SessionID
	}
	stale := newSession("stale", time.Hour, "active")
	staleStopping := newSession("stale-stopping", 30*time.Second, "stopping")
	fresh := newSession("fresh", 0, "active")

	embedder, err := embed.New(config.Embedding{Provider: config.EmbeddingOffline, Dimensions: 8}, nil, embed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	memory := pipeline.Workers{Pool: pool, Embedder: embedder}
	client, err := jobs.NewClient(jobs.Deps{Pool: pool, Features: []jobs.Feature{memory,
		session.CrashDetection{Pool: pool, Threshold: func() time.Duration { return 10 * time.Second },
			StartGrace: time.Millisecond, SessionEnded: memory.SessionEndedTx}}})
	if err != nil {
		t.Fatal(err)
	}
	completed, cancel := client.Subscribe(river.EventKindJobCompleted, river.EventKindJobFailed)
	defer cancel()
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer client.Stop(ctx)

	// Wait for one crash detection run to finish (the periodic job runs on
	// start); the deadline only guards against a hang.
	select {
	case ev := <-completed:
		if ev.Kind != river.EventKindJobCompleted || ev.Job.Kind != "crash_detect" {
			t.Fatalf("first job event = %s %s: %v", ev.Kind, ev.Job.Kind, ev.Job.Errors)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no crash detection run within 30 s")
	}

	for _, c := range []struct {
		name       string
		id         uuid.UUID
		wantStatus string
		wantLeases int
	}{
		{"StaleActiveSessionIsCrashed", stale, "crashed", 0},
		{"StaleStoppingSessionIsCrashed", staleStopping, "crashed", 0},
		{"FreshSessionIsLeftAlone", fresh, "active", 2},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, err := q.SessionGetByID(ctx, c.id)
			if err != nil {
				t.Fatal(err)
			}
			if s.Status != c.wantStatus {
				t.Errorf("status = %s, want %s", s.Status, c.wantStatus)
			}
			if c.wantStatus == "crashed" && (s.EndedAt == nil || s.EndReason == "") {
				t.Errorf("crashed session lacks ended_at/end_reason: %v %q", s.EndedAt, s.EndReason)
			}
			var leases int
			pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.resource_leases
				WHERE session_id = $1 AND released_at IS NULL`, c.id).Scan(&leases)
			if leases != c.wantLeases {
				t.Errorf("%d leases held, want %d", leases, c.wantLeases)
			}
		})
	}

	t.Run("CrashedSessionsAreQueuedForMemory", func(t *testing.T) {
		var n int
		pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'memory_chunk_session'
			AND args->>'session_id' IN ($1, $2)`, stale.String(), staleStopping.String()).Scan(&n)
		if n != 2 {
			t.Errorf("%d chunking jobs for the 2 crashed sessions", n)
		}
	})

	t.Run("FreedResourcesCanBeLeasedAgain", func(t *testing.T) {
		if _, err := q.AgentUpsert(ctx, db.AgentUpsertParams{AgentID: "next", Config: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		h := make([]byte, 32)
		rand.Read(h)
		s, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: "next", LeaseTokenHash: h,
			BaseHash: make([]byte, 32), ResourceBindings: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := q.LeaseAcquire(ctx, db.LeaseAcquireParams{ResourceKind: "workspace", ResourceName: "stale-workspace",
			AgentID: "next", SessionID: s.SessionID}); err != nil {
			t.Fatalf("lease of a crashed session's workspace: %v", err)
		}
	})
}
