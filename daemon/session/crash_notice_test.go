package session_test

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
	"github.com/choirhq/choir/daemon/outbox/outboxtest"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/sql/seam"
)

// TestCrashNotice: a session found without heartbeat is crashed, its DM is
// told once through the outbox, and the removal of its instance is queued.
func TestCrashNotice(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := outboxtest.Setup(t, gateway.SendLimits{PerChat: 1000, PerBot: 1000})
	var mu sync.Mutex
	var removed []uuid.UUID
	client := b.Start(t, func(w *river.Workers) {
		river.AddWorker(w, &session.CrashDetectWorker{Pool: b.Pool, Logger: slog.New(slog.DiscardHandler),
			Threshold: func() time.Duration { return time.Second }, RemoveInstances: true,
			SessionEnded: pipeline.Workers{}.SessionEndedTx,
			DMAddress: func(dm string) (string, string, bool) {
				return outboxtest.Gateway, strconv.FormatInt(outboxtest.Chat, 10), dm == outboxtest.DM
			}})
		river.AddWorker(w, &session.RemoveInstanceWorker{Remove: func(_ context.Context, id uuid.UUID) error {
			mu.Lock()
			defer mu.Unlock()
			removed = append(removed, id)
			return nil
		}})
		river.AddWorker(w, &pipeline.ChunkSessionWorker{Pool: b.Pool, Logger: slog.New(slog.DiscardHandler)})
	})
	h := make([]byte, 32)
	rand.Read(h)
	s, err := seam.Queries(b.Pool).SessionCreate(ctx, db.SessionCreateParams{AgentID: outboxtest.Agent, LeaseTokenHash: h,
		BaseHash: make([]byte, 32), ResourceBindings: json.RawMessage(`{"dm":"` + outboxtest.DM + `"}`)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(ctx, `UPDATE choir_control.sessions SET last_heartbeat_at = now() - interval '1 hour'
		WHERE session_id = $1`, s.SessionID); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second run finds nothing more to do
		if _, err := client.Insert(ctx, session.CrashDetectArgs{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	sent := b.TG.WaitSent(t, 1)
	if !strings.Contains(sent[0].Text, outboxtest.Agent+" stopped unexpectedly") || sent[0].ChatID != strconv.FormatInt(outboxtest.Chat, 10) {
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
	if n := len(b.TG.Sent()); n != 1 {
		t.Errorf("%d messages sent, want the one notice", n)
	}
	var status string
	b.Pool.QueryRow(ctx, `SELECT status FROM choir_control.sessions WHERE session_id = $1`, s.SessionID).Scan(&status)
	if status != "crashed" || removed[0] != s.SessionID {
		t.Errorf("session %s, removed %v", status, removed)
	}
}
