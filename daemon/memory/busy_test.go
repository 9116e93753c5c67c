package memory_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory"
)

// TestQueriesCannotHoldThePool: searches stuck behind a lock hold at most
// MaxConcurrentQueries connections, and each gives up after the statement
// timeout (ErrBusy) instead of waiting for the lock; the others wait for a
// slot no longer than that. Once the lock is gone, searches answer again.
func TestQueriesCannotHoldThePool(t *testing.T) {
	t.Parallel()
	b := setup(t, options{}, "busy")
	ctx := context.Background()
	store := memory.New(memory.Options{Pool: b.pool, Inserter: b.client, Embedder: embed.NewOffline(dims),
		StatementTimeout: 300 * time.Millisecond, MaxConcurrentQueries: 2})

	// A stuck statement, made deterministic: the agent's knowledge table is
	// locked, so a search of it waits in Postgres, holding its connection.
	lockTx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockTx.Exec(ctx, "LOCK TABLE choir_busy.knowledge_documents IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	// Only a guard against a hang on a regression: the lock goes after 20 s.
	guard := time.AfterFunc(20*time.Second, func() { lockTx.Rollback(context.Background()) }) //nolint:errcheck

	const n = 10
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := store.Query(ctx, "busy", json.RawMessage(`{"store":"knowledge","query":"anything","mode":"text"}`))
			errs <- err
		})
	}
	stopWatch := make(chan struct{})
	maxWaiting := make(chan int, 1)
	go func() {
		most := 0
		for {
			var waiting int
			if err := b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&waiting); err == nil {
				most = max(most, waiting)
			}
			select {
			case <-stopWatch:
				maxWaiting <- most
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	wg.Wait()
	close(stopWatch)
	guard.Stop()
	lockTx.Rollback(ctx) //nolint:errcheck
	close(errs)
	for err := range errs {
		if !errors.Is(err, memory.ErrBusy) {
			t.Errorf("query behind a lock = %v, want ErrBusy", err)
		}
	}
	if most := <-maxWaiting; most > 2 {
		t.Errorf("%d searches held connections at once, want at most MaxConcurrentQueries (2)", most)
	}
	if _, err := store.Query(ctx, "busy", json.RawMessage(`{"store":"knowledge","query":"anything","mode":"text"}`)); err != nil {
		t.Errorf("query once the lock is gone: %v", err)
	}
}
