package progress

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/sql/seam"
)

// Settling the messages a crash left behind. A job's message is edited as
// its reports come; when the agent crashes, stops or loses choird, the
// last report it got may say "reasoning", and no report will follow. The
// periodic core_progress_settle job finds such messages in Postgres and
// settles them:
//
//   - a session that has ended, with no live successor holding the job:
//     its message is edited to the job's last reported state when that was
//     final (the end was reported, but choird stopped before showing it),
//     else to "interrupted", and marked settled. An interrupted message
//     stays open: a successor that resumes the job later takes it over and
//     edits it again. A message a successor took over is the successor's
//     to settle, and is only marked.
//   - a live session whose job's final state was reported but never shown
//     (choird restarted, or Telegram failed more times than the reporter
//     tries): the reporter is given that state again.
//
// Each message is settled in a transaction of its own that locks its row
// while Telegram edits it, so a successor's takeover (CoreProgressFind
// reads the row FOR SHARE) waits and edits after it. A choird killed
// between the edit and the commit leaves the row as it was; the next run
// edits again to the same text, which Telegram takes as unchanged.

// Default settling times.
const (
	// DefaultSettleAfter is how long a session must have ended, or a
	// successor have run without reporting the job, before a message is
	// settled: a restarted agent resumes its jobs within seconds, and its
	// message should not flicker to "interrupted" and back meanwhile.
	DefaultSettleAfter = 15 * time.Second
	// DefaultSettleInterval is how often settling runs.
	DefaultSettleInterval = 5 * time.Second
)

// settleBatch bounds the messages settled in one run, and settleBudget
// the time a run starts new edits in; the next run does the rest.
const (
	settleBatch  = 20
	settleBudget = 10 * time.Second
	// settleEditTimeout bounds one edit, pacing included.
	settleEditTimeout = 5 * time.Second
)

// SettleArgs is the periodic job that settles left-behind progress
// messages.
type SettleArgs struct{}

// Kind implements river.JobArgs.
func (SettleArgs) Kind() string { return "core_progress_settle" }

// InsertOpts runs settling on the control queue. A failed run is not
// retried: the next periodic run does the same work.
func (SettleArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueControl, MaxAttempts: 1}
}

var _ jobs.PeriodicFeature = (*Reporter)(nil)

// AddWorkers registers the settling worker (Reporter is a jobs.Feature).
func (r *Reporter) AddWorkers(workers *river.Workers) error {
	if err := river.AddWorkerSafely(workers, &settleWorker{r: r}); err != nil {
		return fmt.Errorf("register core progress settling worker: %w", err)
	}
	return nil
}

// PeriodicJobs is settling, every SettleInterval, and at once when choird
// starts: a restart is when most messages are left behind.
func (r *Reporter) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(r.opts.SettleInterval),
		func() (river.JobArgs, *river.InsertOpts) { return SettleArgs{}, nil },
		&river.PeriodicJobOpts{ID: "core_progress_settle", RunOnStart: true})}
}

// settleWorker runs SettleArgs.
type settleWorker struct {
	river.WorkerDefaults[SettleArgs]
	r *Reporter
}

// Timeout bounds a run: its budget for new edits and one edit more.
func (w *settleWorker) Timeout(*river.Job[SettleArgs]) time.Duration {
	return settleBudget + settleEditTimeout + 5*time.Second
}

// Work implements river.Worker. One run at a time: a run slowed by
// Telegram must not be joined by the next ones, each holding a worker of
// the control queue that crash detection needs. A failure is logged, not
// returned: the next run, seconds later, tries again.
func (w *settleWorker) Work(ctx context.Context, job *river.Job[SettleArgs]) error {
	if !w.r.settling.CompareAndSwap(false, true) {
		return nil
	}
	defer w.r.settling.Store(false)
	if err := errors.Join(w.r.reshowFinal(ctx), w.r.settleLeftBehind(ctx)); err != nil {
		w.r.logger.WarnContext(ctx, "core job progress messages not all settled; the next run tries again",
			slog.String("error", err.Error()))
	}
	return nil
}

// reshowFinal gives the reporter the final state of live sessions' jobs
// whose messages do not show it.
func (r *Reporter) reshowFinal(ctx context.Context) error {
	rows, err := seam.Queries(r.opts.Pool).CoreProgressFinalUnshown(ctx, db.CoreProgressFinalUnshownParams{
		SettleAfterS: r.opts.SettleAfter.Seconds(), DoneStates: admin.CoreDoneStates(), MaxRows: settleBatch})
	if err != nil {
		return fmt.Errorf("find core jobs whose end is not shown: %w", err)
	}
	for _, row := range rows {
		var st rpc.ReportStatusRequest
		if err := json.Unmarshal(row.LaneStatus, &st); err != nil {
			return fmt.Errorf("status of core job %s of session %s: %w", row.JobName, row.SessionID, err)
		}
		r.logger.InfoContext(ctx, "core job's end not shown yet; showing it", slog.String("session_id", row.SessionID.String()),
			slog.String("job", row.JobName), slog.String("state", st.State))
		r.Report(row.SessionID, st)
	}
	return nil
}

// settleLeftBehind settles the messages of jobs whose sessions ended, one
// transaction each, until none is left or the run's budget is spent.
func (r *Reporter) settleLeftBehind(ctx context.Context) error {
	rows, err := seam.Queries(r.opts.Pool).CoreProgressUnsettled(ctx, db.CoreProgressUnsettledParams{
		SettleAfterS: r.opts.SettleAfter.Seconds(), MaxRows: settleBatch})
	if err != nil {
		return fmt.Errorf("find progress messages left behind: %w", err)
	}
	deadline := time.Now().Add(settleBudget)
	var errs []error
	for _, row := range rows {
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		if err := r.settle(ctx, row.SessionID, row.JobName); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// settle settles one job's message: it locks the row (skipping it when
// another run holds it, or when it no longer needs settling), edits the
// message and records what it shows, in one transaction.
func (r *Reporter) settle(ctx context.Context, sessionID uuid.UUID, job string) error {
	return pgx.BeginFunc(ctx, r.opts.Pool, func(tx pgx.Tx) error {
		q := seam.Queries(tx)
		rows, err := q.CoreProgressUnsettled(ctx, db.CoreProgressUnsettledParams{SettleAfterS: r.opts.SettleAfter.Seconds(),
			SessionID: &sessionID, JobName: &job, MaxRows: 1})
		if err != nil {
			return fmt.Errorf("lock the progress message of core job %s of session %s: %w", job, sessionID, err)
		}
		if len(rows) == 0 {
			return nil
		}
		row := rows[0]
		text, final := settledText(row)
		if row.Superseded {
			// A successor shows this message now: it is only marked.
			text, final = row.Shown, false
		}
		if text != row.Shown {
			if err := r.settleEdit(ctx, row, text); err != nil {
				return err
			}
		}
		if err := q.CoreProgressSettle(ctx, db.CoreProgressSettleParams{SessionID: sessionID, JobName: job,
			Shown: text, Final: final}); err != nil {
			return fmt.Errorf("record the settled progress message of core job %s: %w", job, err)
		}
		r.logger.InfoContext(ctx, "core job progress message settled", slog.String("session_id", sessionID.String()),
			slog.String("job", job), slog.String("session_status", row.SessionStatus), slog.Bool("final", final),
			slog.Bool("superseded", row.Superseded), slog.Int64("message_id", row.MessageID))
		return nil
	})
}

// settleEdit edits the message to text. A message that is gone, or that
// Telegram refuses for good, is settled as it is; a failure that may pass
// is returned, and the next run tries again.
func (r *Reporter) settleEdit(ctx context.Context, row db.CoreProgressUnsettledRow, text string) error {
	m := r.opts.Messenger
	if m == nil || !m.Serves(row.Gateway) {
		// The gateway is no longer configured: nothing can edit it.
		return nil
	}
	ectx, cancel := context.WithTimeout(ctx, settleEditTimeout)
	defer cancel()
	err := m.EditText(ectx, row.Gateway, row.ChatID, row.MessageID, text)
	switch {
	case err == nil, errors.Is(err, gateway.ErrMessageGone):
		return nil
	case !retryable(err):
		r.logger.WarnContext(ctx, "core job progress message cannot be settled; leaving it", slog.String("session_id",
			row.SessionID.String()), slog.String("job", row.JobName), slog.String("error", err.Error()))
		return nil
	}
	return fmt.Errorf("settle the progress message of core job %s of session %s: %w", row.JobName, row.SessionID, err)
}

// settledText is what a left-behind message is to show: the job's last
// reported state when it was final, else that it was interrupted.
func settledText(row db.CoreProgressUnsettledRow) (text string, final bool) {
	var st admin.LaneStatus
	if len(row.LaneStatus) > 0 {
		// A status that does not decode reads as unknown: interrupted.
		_ = json.Unmarshal(row.LaneStatus, &st)
	}
	name := row.JobName
	if admin.CoreDone(st.State) {
		return strings.Join(admin.ProgressLines(name, st), "\n"), true
	}
	why := "the agent stopped"
	if row.SessionStatus == "crashed" {
		why = "the agent crashed"
	}
	return strings.Join(admin.InterruptedLines(name, st, why), "\n"), false
}
