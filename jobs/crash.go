package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/db"
)

// CrashDetectArgs is the periodic crash-detection job.
type CrashDetectArgs struct{}

// Kind implements river.JobArgs.
func (CrashDetectArgs) Kind() string { return "crash_detect" }

// InsertOpts puts crash detection on the control queue. A failed run is
// not retried: the next periodic run, a second later, does the same work.
func (CrashDetectArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueControl, MaxAttempts: 1}
}

// CrashDetectWorker marks sessions whose last heartbeat is older than the
// threshold as crashed and releases their leases, in one transaction with
// the job's completion.
type CrashDetectWorker struct {
	river.WorkerDefaults[CrashDetectArgs]
	Pool      *pgxpool.Pool
	Logger    *slog.Logger
	Threshold func() time.Duration
}

// Timeout bounds one run; the query touches only live sessions.
func (w *CrashDetectWorker) Timeout(*river.Job[CrashDetectArgs]) time.Duration {
	return 10 * time.Second
}

// Work implements river.Worker.
func (w *CrashDetectWorker) Work(ctx context.Context, job *river.Job[CrashDetectArgs]) error {
	threshold := w.Threshold()
	var crashed []db.SessionsCrashStaleRow
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var err error
		crashed, err = db.New(tx).SessionsCrashStale(ctx, threshold.Milliseconds())
		if err != nil {
			return fmt.Errorf("mark stale sessions crashed: %w", err)
		}
		// What a crashed session replicated still becomes memory.
		if len(crashed) > 0 {
			client := river.ClientFromContext[pgx.Tx](ctx)
			for _, c := range crashed {
				if err := InsertChunkSessionTx(ctx, client, tx, c.SessionID); err != nil {
					return err
				}
			}
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete crash detection job: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, c := range crashed {
		w.Logger.WarnContext(ctx, "session crashed: no heartbeat",
			slog.String("agent_id", c.AgentID), slog.String("session_id", c.SessionID.String()),
			slog.Time("last_heartbeat_at", c.LastHeartbeatAt), slog.Int64("threshold_ms", threshold.Milliseconds()),
			slog.Int("leases_released", int(c.LeasesReleased)))
	}
	return nil
}
