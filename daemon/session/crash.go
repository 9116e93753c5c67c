package session

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// Crash detection (spec 9): a session whose heartbeat is older than the
// threshold is marked crashed, its leases released, its DM told and its
// instance removed, all in one transaction with the periodic job's
// completion, so a crash is never half handled.

// DefaultCrashInterval is how often crash detection runs.
const DefaultCrashInterval = 500 * time.Millisecond

// CrashDetection is crash detection as choird runs it (a jobs.Feature):
// the periodic crash_detect job and its worker, and the removal of a
// crashed session's instance.
type CrashDetection struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Threshold returns the current crash_detection_threshold_ms; a func
	// so a config reload takes effect without restarting River.
	Threshold func() time.Duration
	// StartGrace is how long a starting agent may take to say hello
	// (default DefaultStartGrace).
	StartGrace time.Duration
	// Interval is how often crash detection runs (at most 1 s; default
	// DefaultCrashInterval).
	Interval time.Duration
	// DMAddress locates a DM (its gateway and chat) for crash notices;
	// nil sends none (the delivery job's kind must be registered for a
	// notice to be queued).
	DMAddress func(dm string) (gateway, chatID string, ok bool)
	// RemoveInstance removes a crashed session's container or process;
	// nil when choird runs no runtime.
	RemoveInstance func(ctx context.Context, sessionID uuid.UUID) error
	// SessionEnded enqueues, in the transaction that marks a session
	// crashed, the filing of its events into memory
	// (pipeline.Workers.SessionEndedTx); nil files nothing.
	SessionEnded func(ctx context.Context, client *jobs.Client, tx pgx.Tx, sessionID uuid.UUID) error
}

var _ jobs.PeriodicFeature = CrashDetection{}

// AddWorkers registers the crash detection worker and, with a runtime,
// the instance removal worker.
func (c CrashDetection) AddWorkers(workers *river.Workers) error {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.RemoveInstance != nil {
		if err := river.AddWorkerSafely(workers, &RemoveInstanceWorker{Remove: c.RemoveInstance}); err != nil {
			return fmt.Errorf("register instance removal worker: %w", err)
		}
	}
	if err := river.AddWorkerSafely(workers, &CrashDetectWorker{Pool: c.Pool, Logger: c.Logger,
		Threshold: c.Threshold, StartGrace: c.StartGrace, DMAddress: c.DMAddress,
		RemoveInstances: c.RemoveInstance != nil, SessionEnded: c.SessionEnded}); err != nil {
		return fmt.Errorf("register crash detection worker: %w", err)
	}
	return nil
}

// PeriodicJobs is crash detection, twice a second by default: a session
// is then found at most about half a second after its threshold, well
// inside the threshold + 1 s promised.
func (c CrashDetection) PeriodicJobs() []*river.PeriodicJob {
	interval := c.Interval
	if interval <= 0 || interval > time.Second {
		interval = DefaultCrashInterval
	}
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return CrashDetectArgs{}, nil },
		&river.PeriodicJobOpts{ID: "crash_detect", RunOnStart: true})}
}

// DefaultStartGrace is how long an agent may take from its start to its
// hello before it counts as crashed, when that is longer than the crash
// threshold: a container start on a loaded host takes seconds.
const DefaultStartGrace = 30 * time.Second

// CrashDetectArgs is the periodic crash-detection job.
type CrashDetectArgs struct{}

// Kind implements river.JobArgs.
func (CrashDetectArgs) Kind() string { return "crash_detect" }

// InsertOpts puts crash detection on the control queue. A failed run is
// not retried: the next periodic run, a second later, does the same work.
func (CrashDetectArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueControl, MaxAttempts: 1}
}

// CrashDetectWorker marks sessions whose last heartbeat is older than the
// threshold as crashed and releases their leases, in one transaction with
// the job's completion.
type CrashDetectWorker struct {
	river.WorkerDefaults[CrashDetectArgs]
	Pool      *pgxpool.Pool
	Logger    *slog.Logger
	Threshold func() time.Duration
	// DMAddress locates a DM for the crash notice; nil sends none.
	DMAddress func(dm string) (gateway, chatID string, ok bool)
	// StartGrace is how long a session that has not said hello yet may go
	// without heartbeat (at least Threshold); zero means DefaultStartGrace.
	StartGrace time.Duration
	// RemoveInstances enqueues the removal of a crashed session's
	// container or process (the worker is registered with it).
	RemoveInstances bool
	// SessionEnded enqueues, in the transaction that marks a session
	// crashed, the filing of its events into memory (Memory.SessionEndedTx);
	// nil files nothing.
	SessionEnded func(ctx context.Context, client *jobs.Client, tx pgx.Tx, sessionID uuid.UUID) error
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
		crashed, err = seam.Queries(tx).SessionsCrashStale(ctx, db.SessionsCrashStaleParams{
			ThresholdMs: threshold.Milliseconds(), StartGraceMs: cmp.Or(w.StartGrace, DefaultStartGrace).Milliseconds()})
		if err != nil {
			return fmt.Errorf("mark stale sessions crashed: %w", err)
		}
		// What a crashed session replicated still becomes memory.
		if len(crashed) > 0 {
			client := river.ClientFromContext[pgx.Tx](ctx)
			for _, c := range crashed {
				if w.SessionEnded != nil {
					if err := w.SessionEnded(ctx, client, tx, c.SessionID); err != nil {
						return err
					}
				}
				if w.RemoveInstances {
					if _, err := client.InsertTx(ctx, tx, RemoveInstanceArgs{SessionID: c.SessionID}, nil); err != nil {
						return fmt.Errorf("enqueue removal of the instance of session %s: %w", c.SessionID, err)
					}
				}
				if err := CrashNoticeTx(ctx, tx, client, w.DMAddress, c.AgentID, c.SessionID, c.ResourceBindings,
					fmt.Sprintf("no heartbeat for over %s", threshold)); err != nil {
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

// CrashNoticeTx queues, in the caller's transaction, a message to the DM a
// crashed session was bound to. It is keyed by the session, so the
// runtime's exit report and the heartbeat check, whichever comes second,
// queue nothing more.
func CrashNoticeTx(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, address func(string) (string, string, bool),
	agentID string, sessionID uuid.UUID, bindings json.RawMessage, why string) error {
	if address == nil {
		return nil
	}
	var b struct {
		DM string `json:"dm"`
	}
	if json.Unmarshal(bindings, &b) != nil || b.DM == "" {
		return nil
	}
	gw, chat, ok := address(b.DM)
	if !ok {
		return nil
	}
	text := fmt.Sprintf("%s stopped unexpectedly (%s). Everything it had acknowledged is kept; "+
		"/restart (or choirctl agent start %s) resumes it where it left off.", agentID, why, agentID)
	if _, err := outbox.EnqueueTx(ctx, tx, ins, outbox.Params{AgentID: agentID, SessionID: &sessionID,
		MessageID: "crash:" + sessionID.String(), Gateway: gw, DM: b.DM, ChatID: chat, Kind: message.Text, Text: text}); err != nil {
		return fmt.Errorf("queue crash notice of session %s: %w", sessionID, err)
	}
	return nil
}

// RemoveInstanceArgs removes the container or process of a crashed
// session: a frozen agent must not wake up and act.
type RemoveInstanceArgs struct {
	SessionID uuid.UUID `json:"session_id"`
}

// Kind implements river.JobArgs.
func (RemoveInstanceArgs) Kind() string { return "remove_instance" }

// InsertOpts runs removals on the control queue.
func (RemoveInstanceArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueControl, MaxAttempts: 5}
}

// RemoveInstanceWorker calls choird's runtime to remove the instance.
type RemoveInstanceWorker struct {
	river.WorkerDefaults[RemoveInstanceArgs]
	Remove func(ctx context.Context, sessionID uuid.UUID) error
}

// Work implements river.Worker.
func (w *RemoveInstanceWorker) Work(ctx context.Context, job *river.Job[RemoveInstanceArgs]) error {
	return w.Remove(ctx, job.Args.SessionID)
}
