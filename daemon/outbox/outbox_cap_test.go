package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/outboxtest"
	"github.com/choirhq/choir/daemon/session"
)

// TestOutboxCapPerSession: an agent's session may have at most
// AgentMaxPendingOutbound messages waiting; past it a new message is
// refused with ErrOutboxFull, while a message already queued is still
// returned as it stands and what choird queues itself (an approval's
// notification, a crash notice) is never refused. No worker runs, so every
// row stays pending.
func TestOutboxCapPerSession(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := outboxtest.Setup(t, unlimited)
	// An insert-only client: no worker takes the rows.
	client, err := river.NewClient(riverpgxv5.New(b.Pool), &river.Config{TestOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	a := b.NewApproval(t, "deploy", 0)
	sess := a.SessionID
	capped := func(id string) outbox.Params {
		p := b.Params(id, "message "+id, outboxtest.Chat)
		p.SessionID, p.MaxPending = &sess, outbox.AgentMaxPending
		return p
	}
	enqueue := func(p outbox.Params) (outbox.Queued, error) {
		var q outbox.Queued
		err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
			var err error
			q, err = outbox.EnqueueTx(ctx, tx, client, p)
			return err
		})
		return q, err
	}
	var first outbox.Queued
	for i := range outbox.AgentMaxPending {
		q, err := enqueue(capped(fmt.Sprintf("m%d", i)))
		if err != nil || !q.Created {
			t.Fatalf("message %d under the cap: %+v %v", i, q, err)
		}
		if i == 0 {
			first = q
		}
	}

	t.Run("OneMoreIsRefused", func(t *testing.T) {
		_, err := enqueue(capped("one-too-many"))
		if !errors.Is(err, outbox.ErrFull) {
			t.Fatalf("message past the cap: %v, want ErrOutboxFull", err)
		}
		var n int
		b.Pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.outbox WHERE session_id = $1`, sess).Scan(&n)
		if n != outbox.AgentMaxPending {
			t.Errorf("%d rows for the session, want %d", n, outbox.AgentMaxPending)
		}
	})

	t.Run("QueuedMessageIsReturnedWhenFull", func(t *testing.T) {
		q, err := enqueue(capped("m0"))
		if err != nil || q.Created || q.Row.OutboxID != first.Row.OutboxID {
			t.Fatalf("re-sent queued message: %+v %v, want row %d, not created", q, err, first.Row.OutboxID)
		}
	})

	t.Run("ChoirdsOwnMessagesAreNotRefused", func(t *testing.T) {
		err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
			// A proposal's parts are its checker's to queue, as
			// daemon/propose registers its kinds.
			reg := new(approval.Registry)
			reg.Register(a.Type, approval.Kind{OwnParts: true})
			if err := reg.RequestTx(ctx, tx, client, a, approval.Address{Gateway: outboxtest.Gateway, DM: outboxtest.DM,
				ChatID: fmt.Sprint(outboxtest.Chat)}); err != nil {
				return err
			}
			return session.CrashNoticeTx(ctx, tx, client, func(string) (string, string, bool) { return outboxtest.Gateway, fmt.Sprint(outboxtest.Chat), true },
				outboxtest.Agent, sess, json.RawMessage(`{"dm":"`+outboxtest.DM+`"}`), "no heartbeat")
		})
		if err != nil {
			t.Fatalf("approval notification and crash notice on a full outbox: %v", err)
		}
		var n int
		b.Pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.outbox WHERE session_id = $1 AND message_id NOT LIKE 'm%'`, sess).Scan(&n)
		if n != 2 {
			t.Errorf("%d of choird's own messages queued, want 2", n)
		}
	})

	t.Run("SentMessagesFreeRoom", func(t *testing.T) {
		if _, err := b.Pool.Exec(ctx, `UPDATE choir_control.outbox SET status = 'sent', sent_at = now() WHERE outbox_id = $1`,
			first.Row.OutboxID); err != nil {
			t.Fatal(err)
		}
		// choird's two messages are pending too and count: the session
		// is still full.
		if _, err := enqueue(capped("still-full")); !errors.Is(err, outbox.ErrFull) {
			t.Fatalf("with %d pending: %v, want ErrOutboxFull", outbox.AgentMaxPending+1, err)
		}
		if _, err := b.Pool.Exec(ctx, `UPDATE choir_control.outbox SET status = 'failed' WHERE session_id = $1 AND message_id IN ('m1', 'm2', 'm3')`,
			sess); err != nil {
			t.Fatal(err)
		}
		if q, err := enqueue(capped("room-again")); err != nil || !q.Created {
			t.Fatalf("after three failed and one sent: %+v %v", q, err)
		}
	})
}
