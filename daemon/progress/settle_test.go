package progress_test

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// settleOptions are progressOptions with settling quick enough for a
// test, and, when crashAfter is set, that crash threshold.
func settleOptions(b *progressBundle, crashAfter time.Duration) choirdtest.Options {
	o := progressOptions(b.tg)
	o.Daemon.ProgressSettleAfter, o.Daemon.ProgressSettleInterval = 200*time.Millisecond, 200*time.Millisecond
	if crashAfter > 0 {
		edit := o.Edit
		o.Edit = func(cfg *config.Config, secrets config.Secrets) {
			edit(cfg, secrets)
			cfg.CrashDetectionThresholdMS = crashAfter.Milliseconds()
			cfg.HeartbeatIntervalMS = crashAfter.Milliseconds() / 3
		}
	}
	if b.c != nil {
		o.Home, o.DatabaseURL = b.c.Home, b.c.DatabaseURL
	}
	return o
}

// restart stops choird and starts it again on the same home and
// database; the test's agent session outlives it, as a container does.
func (b *progressBundle) restart(t *testing.T, o choirdtest.Options) {
	t.Helper()
	if err := b.c.Stop(); err != nil {
		t.Fatal(err)
	}
	b.c = choirdtest.Start(t, o)
}

// progressRow reads what Postgres records of a job's message in a session;
// a row not yet written is neither final nor settled.
func (b *progressBundle) progressRow(t *testing.T, sessionID, job string) (final, settled bool) {
	t.Helper()
	err := b.c.Pool().QueryRow(context.Background(), `SELECT final, settled_at IS NOT NULL FROM choir_control.core_progress
		WHERE session_id = $1 AND job_name = $2`, uuid.MustParse(sessionID), job).Scan(&final, &settled)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, false
	}
	if err != nil {
		t.Fatalf("progress row of %s in session %s: %v", job, sessionID, err)
	}
	return final, settled
}

// stuckEdit makes Telegram answer the next edit with a 429 that asks for
// an hour's wait, and reports the job's end: choird is left waiting to
// show it, as one killed before it could would never show it.
func (b *progressBundle) stuckEdit(t *testing.T, job string, steps int64, progress string) {
	t.Helper()
	before := len(b.limitedEdits())
	b.bot.TooManyRequests("editMessageText", 1, 3600)
	b.report(t, job, "CORE_COMPLETED", steps, progress)
	choirdtest.WaitFor(t, "the edit of "+job+"'s end to be refused", b.c.Logs, func() bool {
		return len(b.limitedEdits()) > before
	})
}

func (b *progressBundle) limitedEdits() []int {
	var out []int
	for i, c := range b.bot.Calls("editMessageText") {
		if c.Status == 429 {
			out = append(out, i)
		}
	}
	return out
}

// A crashed session's job message says it was interrupted, and a
// successor that resumes the job takes that same message over.
func TestCrashedJobsMessageIsSettled(t *testing.T) {
	t.Parallel()
	tg := telegramtest.NewServer(t)
	b := &progressBundle{tg: tg, bot: tg.AddBot(progressToken, "choir_progress_bot")}
	b.c = choirdtest.Start(t, settleOptions(b, 3*time.Second))
	b.startSession(t)

	b.report(t, "deploy", "CORE_REASONING", 2, "uploading")
	msg := b.waitText(t, "deploy", "uploading")
	crashed := b.sessionID
	// Telegram fails the first two tries at settling it: the message is
	// recorded settled only once an edit went through.
	b.bot.Fail("editMessageText", 2, telegramtest.Fault{Code: http.StatusBadGateway})
	// The test's agent sends no heartbeat: crash detection finds it.
	b.waitText(t, "deploy", "Core job deploy: interrupted after 2 steps: the agent crashed before it finished\n"+
		"Last: uploading\nRestarting the agent resumes it where it stopped.")
	choirdtest.WaitFor(t, "the deploy message to be recorded settled", b.c.Logs, func() bool {
		_, settled := b.progressRow(t, crashed, "deploy")
		return settled
	})
	if final, _ := b.progressRow(t, crashed, "deploy"); final {
		t.Errorf("the interrupted job's row is final; want it open to a successor")
	}
	failed := 0
	for _, c := range b.bot.Calls("editMessageText") {
		if c.Status == http.StatusBadGateway {
			failed++
		}
	}
	if failed != 2 {
		t.Errorf("%d settling edits failed, want the 2 Telegram was told to fail", failed)
	}

	t.Run("ASuccessorResumingTheJobTakesTheMessageBack", func(t *testing.T) {
		b.startSession(t)
		b.report(t, "deploy", "CORE_COMPLETED", 3, "deployed")
		got := b.waitText(t, "deploy", "completed after 3 steps")
		if ms := b.jobMessages("deploy"); len(ms) != 1 || got.MessageID != msg.MessageID {
			t.Errorf("%d messages for deploy, want the first one edited", len(ms))
		}
		// The row is marked after the edit went through: wait for it.
		choirdtest.WaitFor(t, "the successor's row to be final", b.c.Logs, func() bool {
			final, _ := b.progressRow(t, b.sessionID, "deploy")
			return final
		})
	})
}

// A job's end that choird recorded but never showed (it stopped first)
// is shown after it restarts: in a session still live, and in one that
// ended meanwhile.
func TestUnshownEndIsShownAfterARestart(t *testing.T) {
	t.Parallel()
	tg := telegramtest.NewServer(t)
	b := &progressBundle{tg: tg, bot: tg.AddBot(progressToken, "choir_progress_bot")}
	b.c = choirdtest.Start(t, settleOptions(b, 0))
	b.startSession(t)

	// A session still live.
	b.report(t, "build", "CORE_REASONING", 1, "compiling")
	b.waitText(t, "build", "compiling")
	b.stuckEdit(t, "build", 2, "built")
	b.restart(t, settleOptions(b, 0))
	b.waitText(t, "build", "Core job build: completed after 2 steps\nLast: built")
	if ms := b.jobMessages("build"); len(ms) != 1 {
		t.Errorf("%d messages for build, want one", len(ms))
	}
	// The row is marked after the edit went through: wait for it.
	choirdtest.WaitFor(t, "build's row to be final", b.c.Logs, func() bool {
		final, _ := b.progressRow(t, b.sessionID, "build")
		return final
	})

	// A session that ended before choird restarted.
	b.report(t, "sync", "CORE_REASONING", 1, "syncing")
	b.waitText(t, "sync", "syncing")
	b.stuckEdit(t, "sync", 4, "synced")
	if _, err := b.cl.TerminateSelf(t.Context(), rpc.TerminateSelfRequest{Reason: "test: stop after the job"}); err != nil {
		t.Fatal(err)
	}
	b.restart(t, settleOptions(b, 0))
	b.waitText(t, "sync", "Core job sync: completed after 4 steps\nLast: synced")
	choirdtest.WaitFor(t, "the sync message to be recorded settled", b.c.Logs, func() bool {
		final, settled := b.progressRow(t, b.sessionID, "sync")
		return final && settled
	})
	if ms := b.jobMessages("sync"); len(ms) != 1 {
		t.Errorf("%d messages for sync, want one", len(ms))
	}
}

// A successor's takeover of a message waits for a settling of it under
// way, and sees what the settling recorded: the two never edit the
// message in the wrong order.
func TestTakeoverWaitsForASettling(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tg := telegramtest.NewServer(t)
	b := &progressBundle{tg: tg, bot: tg.AddBot(progressToken, "choir_progress_bot")}
	o := settleOptions(b, 3*time.Second)
	// choird settles nothing by itself here: the test does, by hand.
	o.Daemon.ProgressSettleAfter = time.Hour
	b.c = choirdtest.Start(t, o)
	b.startSession(t)
	b.report(t, "deploy", "CORE_REASONING", 1, "uploading")
	b.waitText(t, "deploy", "uploading")
	crashed := uuid.MustParse(b.sessionID)
	choirdtest.WaitFor(t, "the session to crash", b.c.Logs, func() bool {
		var status string
		b.c.Pool().QueryRow(ctx, `SELECT status FROM choir_control.sessions WHERE session_id = $1`, crashed).Scan(&status)
		return status == "crashed"
	})
	b.startSession(t)
	successor := uuid.MustParse(b.sessionID)

	tx, err := b.c.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx) //nolint:errcheck
	job := "deploy"
	rows, err := seam.Queries(tx).CoreProgressUnsettled(ctx, db.CoreProgressUnsettledParams{SettleAfterS: 0,
		SessionID: &crashed, JobName: &job, MaxRows: 1})
	if err != nil || len(rows) != 1 {
		t.Fatalf("lock the crashed session's message: %v, %d rows", err, len(rows))
	}
	found := make(chan error, 1)
	go func() {
		_, err := seam.Queries(b.c.Pool()).CoreProgressFind(ctx, db.CoreProgressFindParams{SessionID: successor, JobName: job})
		found <- err
	}()
	choirdtest.WaitFor(t, "the takeover to wait for the settling's lock", b.c.Logs, func() bool {
		var n int
		b.c.Pool().QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE wait_event_type = 'Lock' AND query LIKE '%CoreProgressFind%'`).Scan(&n)
		return n > 0
	})
	// The settling shows the job's end: the message is final, and the
	// successor must not take it over.
	if err := seam.Queries(tx).CoreProgressSettle(ctx, db.CoreProgressSettleParams{SessionID: crashed, JobName: job,
		Shown: "Core job deploy: completed", Final: true}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-found; !errors.Is(err, choirsql.ErrNotFound) {
		t.Errorf("takeover after a final settling: %v, want no message to take over", err)
	}
}
