package session_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory/pipeline"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// BenchmarkCrashDetection measures how long after its threshold a silent
// session is marked crashed, with crash detection running as choird runs
// it (River's periodic job, every session.DefaultCrashInterval, on the control
// queue). Each
// iteration silences 16 sessions at moments spread over a second and waits
// until all are crashed; the lateness of each is ended_at minus its last
// heartbeat minus the threshold. The target is p99 <= 1 s. A first round,
// before the clock starts, lets River elect its leader.
func BenchmarkCrashDetection(b *testing.B) {
	ctx := context.Background()
	pool := dbtest.NewPool(b)
	const sessions, threshold = 16, 2 * time.Second
	embedder, err := embed.New(config.Embedding{Provider: config.EmbeddingOffline, Dimensions: 8}, nil, embed.Options{})
	if err != nil {
		b.Fatal(err)
	}
	memory := pipeline.Workers{Pool: pool, Embedder: embedder}
	client, err := jobs.NewClient(jobs.Deps{Pool: pool, Features: []jobs.Feature{memory,
		session.CrashDetection{Pool: pool, Threshold: func() time.Duration { return threshold },
			SessionEnded: memory.SessionEndedTx}}})
	if err != nil {
		b.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer client.Stop(ctx) //nolint:errcheck
	q := seam.Queries(pool)
	for i := range sessions {
		if _, err := q.AgentUpsert(ctx, db.AgentUpsertParams{AgentID: fmt.Sprintf("silent-%d", i), Config: json.RawMessage(`{}`)}); err != nil {
			b.Fatal(err)
		}
	}
	var late []time.Duration
	// round silences the sessions and returns how late each was crashed.
	round := func() []time.Duration {
		var late []time.Duration
		ids := make([]uuid.UUID, sessions)
		var wg sync.WaitGroup
		for i := range sessions {
			wg.Go(func() {
				// Spread the last heartbeats over a second, so that they fall
				// anywhere in the detection period.
				time.Sleep(time.Duration(i) * time.Second / sessions)
				h := make([]byte, 32)
				rand.Read(h)
				s, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: fmt.Sprintf("silent-%d", i), LeaseTokenHash: h,
					BaseHash: make([]byte, 32), ResourceBindings: json.RawMessage(`{}`)})
				if err != nil {
					b.Error(err)
					return
				}
				// Said hello: the start-up grace does not apply.
				if _, err := pool.Exec(ctx, `UPDATE choir_control.sessions SET hello_at = now(), last_heartbeat_at = now()
					WHERE session_id = $1`, s.SessionID); err != nil {
					b.Error(err)
				}
				ids[i] = s.SessionID
			})
		}
		wg.Wait()
		deadline := time.Now().Add(threshold + 10*time.Second)
		for {
			var open int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.sessions WHERE session_id = ANY($1) AND status <> 'crashed'`,
				ids).Scan(&open); err != nil {
				b.Fatal(err)
			}
			if open == 0 {
				break
			}
			if time.Now().After(deadline) {
				b.Fatalf("%d sessions still not crashed %s after their threshold", open, 10*time.Second)
			}
			time.Sleep(20 * time.Millisecond)
		}
		rows, err := pool.Query(ctx, `SELECT (extract(epoch FROM ended_at - last_heartbeat_at) * 1e6)::bigint
			FROM choir_control.sessions WHERE session_id = ANY($1)`, ids)
		if err != nil {
			b.Fatal(err)
		}
		for rows.Next() {
			var us int64
			rows.Scan(&us) //nolint:errcheck
			late = append(late, time.Duration(us)*time.Microsecond-threshold)
		}
		rows.Close()
		return late
	}
	// A first round, not counted, waits out River's start (electing the
	// leader that schedules periodic jobs), which choird pays once.
	round()
	b.ResetTimer()
	for range b.N {
		late = append(late, round()...)
	}
	b.StopTimer()
	slices.Sort(late)
	b.ReportMetric(float64(late[len(late)/2].Milliseconds()), "late-p50-ms")
	b.ReportMetric(float64(late[len(late)*99/100].Milliseconds()), "late-p99-ms")
	b.ReportMetric(float64(late[len(late)-1].Milliseconds()), "late-max-ms")
}
