package jobs_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/memory/pipeline"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
)

// TestCrashNotice: a session found without heartbeat is crashed, its DM is
// told once through the outbox, and the removal of its instance is queued.
func TestCrashNotice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupDelivery(t, gateway.SendLimits{PerChat: 1000, PerBot: 1000})
	var mu sync.Mutex
	var removed []uuid.UUID
	client := startWithTimeouts(t, b, nil, func(w *river.Workers) {
		river.AddWorker(w, &jobs.CrashDetectWorker{Pool: b.pool, Logger: slog.New(slog.DiscardHandler),
			Threshold: func() time.Duration { return time.Second }, RemoveInstances: true,
			SessionEnded: pipeline.Workers{}.SessionEndedTx,
			DMAddress: func(dm string) (string, string, bool) {
				return gatewayTG, strconv.FormatInt(testChat, 10), dm == testDMName
			}})
		river.AddWorker(w, &jobs.RemoveInstanceWorker{Remove: func(_ context.Context, id uuid.UUID) error {
			mu.Lock()
			defer mu.Unlock()
			removed = append(removed, id)
			return nil
		}})
		river.AddWorker(w, &pipeline.ChunkSessionWorker{Pool: b.pool, Logger: slog.New(slog.DiscardHandler)})
	})
	h := make([]byte, 32)
	rand.Read(h)
	s, err := db.New(b.pool).SessionCreate(ctx, db.SessionCreateParams{AgentID: testAgent, LeaseTokenHash: h,
		BaseHash: make([]byte, 32), ResourceBindings: json.RawMessage(`{"dm":"` + testDMName + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.pool.Exec(ctx, `UPDATE choir_control.sessions SET last_heartbeat_at = now() - interval '1 hour'
		WHERE session_id = $1`, s.SessionID); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run finds nothing more to do
		if _, err := client.Insert(ctx, jobs.CrashDetectArgs{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	sent := b.tg.WaitSent(t, 1)
	if !strings.Contains(sent[0].Text, testAgent+" stopped unexpectedly") || sent[0].ChatID != strconv.FormatInt(testChat, 10) {
		t.Errorf("crash notice = %+v", sent[0])
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(removed)
		mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d removals, want 1", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if n := len(b.tg.Sent()); n != 1 {
		t.Errorf("%d messages sent, want the one notice", n)
	}
	var status string
	b.pool.QueryRow(ctx, `SELECT status FROM choir_control.sessions WHERE session_id = $1`, s.SessionID).Scan(&status)
	if status != "crashed" || removed[0] != s.SessionID {
		t.Errorf("session %s, removed %v", status, removed)
	}
}
