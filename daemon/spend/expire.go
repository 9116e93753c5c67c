package spend

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/riverqueue/river"

	"github.com/choirhq/choir/jobs"
)

// ExpireInterval is how often lost reservations are looked for.
const ExpireInterval = time.Minute

// ExpireArgs is the periodic expiry of lost reservations.
type ExpireArgs struct{}

// Kind implements river.JobArgs.
func (ExpireArgs) Kind() string { return "spend_expire" }

// InsertOpts puts the expiry on the control queue; a failed run is not
// retried, since the next one does the same work.
func (ExpireArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueControl, MaxAttempts: 1}
}

// ExpireWorker settles, at their worst case, the reservations whose calls
// choird lost: choird crashed or was killed while the call was in flight,
// so nothing will settle them, and the provider may have billed the call.
// A reservation is lost once its call's timeout and ExpiryMargin passed.
type ExpireWorker struct {
	river.WorkerDefaults[ExpireArgs]
	Ledger *Ledger
	// Logger tells of the reservations expired; nil says nothing.
	Logger *slog.Logger
}

var _ jobs.PeriodicFeature = (*ExpireWorker)(nil)

// AddWorkers registers the expiry's worker (jobs.Feature).
func (w *ExpireWorker) AddWorkers(workers *river.Workers) error {
	if err := river.AddWorkerSafely(workers, w); err != nil {
		return fmt.Errorf("register spend expiry worker: %w", err)
	}
	return nil
}

// PeriodicJobs is the expiry, every ExpireInterval and at start.
func (w *ExpireWorker) PeriodicJobs() []*river.PeriodicJob {
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(ExpireInterval),
		func() (river.JobArgs, *river.InsertOpts) { return ExpireArgs{}, nil },
		&river.PeriodicJobOpts{ID: "spend_expire", RunOnStart: true})}
}

// Timeout bounds one run.
func (w *ExpireWorker) Timeout(*river.Job[ExpireArgs]) time.Duration { return time.Minute }

// Work implements river.Worker.
func (w *ExpireWorker) Work(ctx context.Context, _ *river.Job[ExpireArgs]) error {
	n, err := w.Ledger.Expire(ctx)
	if err != nil {
		return err
	}
	if n > 0 && w.Logger != nil {
		w.Logger.WarnContext(ctx, "lost reservations settled at their worst case", slog.Int64("count", n))
	}
	return nil
}
