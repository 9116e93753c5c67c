package approval_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/outbox/outboxtest"
	"github.com/choirhq/choir/daemon/propose"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// startWithTimeouts starts a River client running delivery and approval
// timeouts, as choird does, and the workers more adds.
func startWithTimeouts(t *testing.T, b *outboxtest.Bundle, kinds *approval.Registry, resolved func(context.Context, approval.Approval), more ...func(*river.Workers)) *jobs.Client {
	t.Helper()
	return b.Start(t, append([]func(*river.Workers){func(w *river.Workers) {
		river.AddWorker(w, &approval.TimeoutWorker{Pool: b.Pool, Logger: slog.New(slog.DiscardHandler), Kinds: kinds, Resolved: resolved})
		river.AddWorker(w, &propose.ApplyWorker{})
	}}, more...)...)
}

func TestApprovals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := outboxtest.Setup(t, gateway.SendLimits{PerChat: 1000, PerBot: 1000})
	var timedOut atomic.Int32
	kinds := &approval.Registry{}
	propose.RegisterApprovals(kinds)
	client := startWithTimeouts(t, b, kinds, func(_ context.Context, a approval.Approval) {
		if a.ResolvedBy == approval.ResolvedByTimeout {
			timedOut.Add(1)
		}
	})
	to := approval.Address{Gateway: outboxtest.Gateway, DM: outboxtest.DM, ChatID: "4242"}
	request := func(a approval.Approval) {
		t.Helper()
		if err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
			return kinds.RequestTx(ctx, tx, client, a, to)
		}); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("notification carries the buttons; the race has one winner", func(t *testing.T) {
		a := b.NewApproval(t, "add tool choir.repo.status", time.Hour)
		request(a)
		request(a) // a second request of the same approval queues nothing more
		sent := b.TG.WaitSent(t, 1)
		kb := sent[0].Keyboard()
		if len(kb) != 1 || len(kb[0]) != 2 || kb[0][0].Data != "approve:"+a.ID.String() ||
			kb[0][1].Data != "reject:"+a.ID.String() {
			t.Fatalf("keyboard = %+v", kb)
		}
		if !strings.Contains(sent[0].Text, "add tool choir.repo.status") {
			t.Errorf("notification text = %q", sent[0].Text)
		}
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i, who := range []string{"telegram:alice", "choirctl:uid=0", approval.ResolvedByTimeout, "telegram:bob"} {
			wg.Go(func() {
				err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
					_, won, err := kinds.ResolveTx(ctx, tx, client, a.ID, i == 0, who)
					if won {
						wins.Add(1)
					}
					return err
				})
				if err != nil {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d decisions won, want exactly 1", wins.Load())
		}
		final, err := seam.Queries(b.Pool).ApprovalGet(ctx, a.ID)
		if err != nil {
			t.Fatal(err)
		}
		if final.Status == "pending" || final.ResolvedBy == nil || final.ResolvedAt == nil {
			t.Fatalf("after the race: %+v", final)
		}
		var outcomes int
		b.Pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.outbox WHERE message_id = $1`,
			"approval:"+a.ID.String()+":resolved").Scan(&outcomes)
		if outcomes != 1 {
			t.Errorf("%d outcome messages queued, want 1", outcomes)
		}
		// A late decision changes nothing and reports the winner.
		err = pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
			row, won, err := kinds.ResolveTx(ctx, tx, client, a.ID, final.Status != "approved", "telegram:late")
			if won || row.Status != final.Status || row.ResolvedBy != *final.ResolvedBy {
				t.Errorf("late decision: won %v, row %+v", won, row)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		// The unknown approval is an error, not a no-op.
		err = pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
			_, _, err := kinds.ResolveTx(ctx, tx, client, uuid.New(), true, "telegram:alice")
			return err
		})
		if err == nil || !strings.Contains(err.Error(), "no such approval") {
			t.Errorf("unknown approval: %v", err)
		}
	})

	t.Run("an unanswered approval times out rejected", func(t *testing.T) {
		a := b.NewApproval(t, "add skill triage", 300*time.Millisecond)
		before := len(b.TG.Sent())
		request(a)
		deadline := time.Now().Add(20 * time.Second)
		for {
			row, err := seam.Queries(b.Pool).ApprovalGet(ctx, a.ID)
			if err != nil {
				t.Fatal(err)
			}
			if row.Status != "pending" {
				if row.Status != "rejected" || row.ResolvedBy == nil || *row.ResolvedBy != approval.ResolvedByTimeout {
					t.Fatalf("timed out approval: %+v", row)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the approval never timed out")
			}
			time.Sleep(50 * time.Millisecond)
		}
		// The request may come in several messages; the timeout's follows.
		const want = "Approval timed out: add skill triage. Rejected automatically."
		for found := false; !found; {
			sent := b.TG.WaitSent(t, before+2)
			for _, m := range sent[before:] {
				found = found || m.Text == want
			}
			if !found && time.Now().After(deadline) {
				t.Fatalf("no timeout message among %d sent", len(sent)-before)
			}
			if !found {
				time.Sleep(20 * time.Millisecond)
			}
		}
		// The hook runs after the commit, maybe after the delivery.
		for deadline := time.Now().Add(10 * time.Second); timedOut.Load() == 0 && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if timedOut.Load() != 1 {
			t.Errorf("resolved hook called %d times for the timeout, want 1", timedOut.Load())
		}
	})
}
