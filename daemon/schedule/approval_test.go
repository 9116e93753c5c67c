package schedule_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/outbox/outboxtest"
	"github.com/choirhq/choir/daemon/schedule"
	"github.com/choirhq/choir/daemon/schedule/state"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/sql/seam"
)

// TestApprovedSaysWhatHappensNext approves one approval of each kind that
// is not a proposal and reads the outcome message, which says what
// happens next: an approved reminder is armed and says when it fires; an
// approved gated call says that it runs now (the agent runs it as soon as
// it is told) and that the agent reports what came of it.
func TestApprovedSaysWhatHappensNext(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := outboxtest.Setup(t, gateway.SendLimits{PerChat: 1000, PerBot: 1000})
	// The schedule worker is registered so that arming may queue its
	// fire; the fire is years away.
	kinds := &approval.Registry{}
	schedule.RegisterApprovals(kinds)
	client := b.Start(t, func(w *river.Workers) {
		river.AddWorker(w, &approval.TimeoutWorker{Pool: b.Pool, Logger: slog.New(slog.DiscardHandler), Kinds: kinds})
		if err := schedule.AddFireWorker(w, &schedule.FireWorker{Pool: b.Pool}); err != nil {
			t.Fatal(err)
		}
	})
	approve := func(t *testing.T, a approval.Approval) string {
		t.Helper()
		if err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
			_, won, err := kinds.ResolveTx(ctx, tx, client, a.ID, true, "telegram:alice")
			if err == nil && !won {
				t.Error("the approval was already resolved")
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
		var text string
		if err := b.Pool.QueryRow(ctx, `SELECT text FROM choir_control.outbox WHERE message_id = $1`,
			"approval:"+a.ID.String()+":resolved").Scan(&text); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(text, "Executing") {
			t.Errorf("outcome %q claims that something executes", text)
		}
		return text
	}
	setType := func(t *testing.T, a *approval.Approval, typ string) {
		t.Helper()
		if _, err := b.Pool.Exec(ctx, `UPDATE choir_control.pending_approvals SET request_type = $2 WHERE approval_id = $1`,
			a.ID, typ); err != nil {
			t.Fatal(err)
		}
		a.Type = typ
	}

	t.Run("ReminderIsArmedAndSaysWhenItFires", func(t *testing.T) {
		a := b.NewApproval(t, "reminder #1 at Mon 1 Jan 2035 09:00 UTC: call mom", time.Hour)
		setType(t, &a, schedule.ApprovalType)
		due := time.Date(2035, 1, 1, 9, 0, 0, 0, time.UTC)
		q := seam.Queries(b.Pool)
		s, err := q.ScheduleInsert(ctx, db.ScheduleInsertParams{AgentID: outboxtest.Agent, Dm: outboxtest.DM, Kind: "once",
			TimeZone: "UTC", Purpose: "reminder", Text: "call mom", Missed: state.MissedRunOnce,
			Status: state.PendingApproval, CreatedBy: "test", RunAt: &due, NextRunAt: &due})
		if err != nil {
			t.Fatal(err)
		}
		if err := q.ScheduleSetApproval(ctx, db.ScheduleSetApprovalParams{ScheduleID: s.ScheduleID, ApprovalID: &a.ID}); err != nil {
			t.Fatal(err)
		}
		text := approve(t, a)
		if !strings.Contains(text, "nothing runs until it fires") || !strings.Contains(text, "Mon 1 Jan 2035 09:00 UTC") {
			t.Errorf("approved reminder: %q; want that nothing runs until it fires, and when", text)
		}
	})

	t.Run("GatedCallSaysItRunsNow", func(t *testing.T) {
		for _, typ := range []string{"choir.email.send", "mcp.files.delete"} {
			a := b.NewApproval(t, typ+" something", time.Hour)
			setType(t, &a, typ)
			if text := approve(t, a); !strings.Contains(text, "It runs now") || !strings.Contains(text, "reports what came of it") {
				t.Errorf("approved %s: %q; want that it runs now and who reports it", typ, text)
			}
		}
	})
}
