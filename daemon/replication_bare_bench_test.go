package daemon_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/dbtest"
)

// BenchmarkHeartbeatBareSQL is the ceiling the heartbeat path is measured
// against on this machine: the same 32 sessions × N events, each heartbeat
// one transaction that locks a session row, copies the events into a table
// with only a primary key (no chain check, no JSON, no hashing) and moves
// the acknowledged revision. No RPC, no validation: what Postgres and pgx
// alone cost here.
func BenchmarkHeartbeatBareSQL(b *testing.B) {
	for _, perBeat := range []int{10, 100} {
		b.Run(fmt.Sprintf("32x%d", perBeat), func(b *testing.B) { benchBareSQL(b, 32, perBeat) })
	}
}

func benchBareSQL(b *testing.B, sessions, perBeat int) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, dbtest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, `
		CREATE TABLE bare_sessions (id int PRIMARY KEY, acked_rev bigint NOT NULL, acked_hash bytea NOT NULL);
		CREATE TABLE bare_events (id int, rev bigint, type text, lane text, payload jsonb, created_at timestamptz,
		                          hash_prev bytea, hash bytea, PRIMARY KEY (id, rev));
		INSERT INTO bare_sessions SELECT g, 0, '\x00' FROM generate_series(1, 32) g`); err != nil {
		b.Fatal(err)
	}
	payload := []byte(`{"text":"a user message of ordinary length, about as long as a short sentence or two in a chat"}`)
	revs := make([]int64, sessions+1)
	var mu sync.Mutex
	var lat []time.Duration
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		var wg sync.WaitGroup
		for s := 1; s <= sessions; s++ {
			wg.Go(func() {
				t0 := time.Now()
				rows := make([][]any, perBeat)
				h := sha256.Sum256(payload)
				for j := range rows {
					rows[j] = []any{s, revs[s] + int64(j) + 1, "user_msg", "edge", payload, t0, h[:], h[:]}
				}
				err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
					var acked int64
					if err := tx.QueryRow(ctx, `SELECT acked_rev FROM bare_sessions WHERE id = $1 FOR UPDATE`, s).Scan(&acked); err != nil {
						return err
					}
					if _, err := tx.CopyFrom(ctx, pgx.Identifier{"bare_events"},
						[]string{"id", "rev", "type", "lane", "payload", "created_at", "hash_prev", "hash"}, pgx.CopyFromRows(rows)); err != nil {
						return err
					}
					_, err := tx.Exec(ctx, `UPDATE bare_sessions SET acked_rev = $2, acked_hash = $3 WHERE id = $1`,
						s, acked+int64(perBeat), h[:])
					return err
				})
				if err != nil {
					b.Error(err)
					return
				}
				revs[s] += int64(perBeat)
				mu.Lock()
				lat = append(lat, time.Since(t0))
				mu.Unlock()
			})
		}
		wg.Wait()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(float64(b.N*sessions*perBeat)/elapsed.Seconds(), "events/s")
	b.ReportMetric(ms(lat[len(lat)/2]), "tx-p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "tx-p99-ms")
}
