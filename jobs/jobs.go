// Package jobs holds choird's River client, its queues and its schedule,
// and the job kinds and workers of the control plane: crash detection,
// approval timeouts, instance removal, outbound delivery, schedule fires
// (their cron expressions are jobs/cron's) and the cleanup of received
// files, the slow, retryable or periodic
// work that runs inside Postgres transactions. It also runs the memory
// pipeline's workers, which it is handed (Deps.Memory) and does not own.
// Each worker finishes its rows and completes its job in one transaction,
// so a crash never leaves work half done or done twice.
package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"

	"github.com/choirhq/choir/db"
)

// Queues. Latency-sensitive work never shares a queue with bulk work: a
// backlog of embeddings must not delay crash detection.
const (
	// QueueControl runs crash detection and other control-plane upkeep.
	QueueControl = "control"
	// QueueEmbed runs embedding batches: bulk work that waits on an
	// external API and may back up by thousands of jobs on a re-embed.
	QueueEmbed = "embed"
	// QueueMemory chunks ended sessions and promotes old ones to long-term
	// memory: quick, but never worth delaying control work for.
	QueueMemory = "memory"
)

// DefaultCrashInterval is how often crash detection runs.
const DefaultCrashInterval = 500 * time.Millisecond

// Deps are what workers need from choird.
type Deps struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// CrashThreshold returns the current crash_detection_threshold_ms; a
	// func so a config reload takes effect without restarting River.
	CrashThreshold func() time.Duration
	// CrashStartGrace is how long a starting agent may take to say hello
	// (default DefaultStartGrace).
	CrashStartGrace time.Duration
	// CrashInterval is how often crash detection runs (at most 1 s).
	CrashInterval time.Duration
	// Memory is the memory pipeline (daemon/memory/pipeline.Workers).
	// Without it the memory workers (embedding, chunking, promotion) are
	// not registered, and crash detection enqueues no chunking.
	Memory Memory
	// Sender delivers outbox rows (the Telegram gateway and the console);
	// without it the delivery worker is not registered.
	Sender OutboundSender
	// SendLimiter paces delivery (daemon/gateway.SendLimiter); share it
	// with everything else that sends through the same bots. Required
	// with Sender.
	SendLimiter Pacer
	// ApprovalResolved is told of an approval resolved by its timeout,
	// after the commit.
	ApprovalResolved func(ctx context.Context, a db.ChoirControlPendingApproval)
	// DMAddress locates a DM (its gateway and chat) for crash notices.
	DMAddress func(dm string) (gateway, chatID string, ok bool)
	// RemoveInstance removes a crashed session's container or process;
	// nil when choird runs no runtime.
	RemoveInstance func(ctx context.Context, sessionID uuid.UUID) error
	// Workspaces returns the configured workspaces, name to directory:
	// the only places the delivery worker opens and removes files, and
	// those whose .choirtmp/recv the periodic cleanup empties of what
	// agents are done with (RecvCleanWorker); nil runs no cleanup.
	Workspaces func() map[string]string
	// ScheduleFired is told of each schedule fire that queued a message,
	// after its commit (ScheduleFireWorker.Fired).
	ScheduleFired func(ctx context.Context, f ScheduleFired)
	// Now is the schedule worker's clock (time.Now when nil).
	Now func() time.Time
	// ApplyProposal runs the steps of approved proposals (daemon/propose).
	ApplyProposal ProposalApplyFunc
}

// Memory is the memory pipeline as jobs runs it: jobs registers its
// workers, which run on QueueEmbed and QueueMemory, and crash detection
// files each crashed session into memory through it. The work and its job
// kinds are the pipeline's own (daemon/memory/pipeline, daemon/memory).
type Memory interface {
	// AddWorkers registers the pipeline's workers.
	AddWorkers(workers *river.Workers) error
	// SessionEndedTx enqueues, in tx, what follows the end of a session:
	// the chunking of its events into its agent's memory.
	SessionEndedTx(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, sessionID uuid.UUID) error
}

// Client is the River client type choird uses.
type Client = river.Client[pgx.Tx]

// Inserter is the part of a River client that enqueues jobs in a caller's
// transaction: *Client, or an insert-only client in choirctl.
type Inserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// NewClient builds choird's River client with every worker, queue and
// periodic job registered. Start it with Start(ctx).
func NewClient(deps Deps) (*Client, error) {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	// Twice a second: a session is then found at most about half a second
	// after its threshold, well inside the threshold + 1 s promised.
	if deps.CrashInterval <= 0 || deps.CrashInterval > time.Second {
		deps.CrashInterval = DefaultCrashInterval
	}
	workers := river.NewWorkers()
	// Crash notices go through the outbox: only with a sender to deliver
	// them (the delivery job's kind must be registered to be inserted).
	dmAddress := deps.DMAddress
	if deps.Sender == nil {
		dmAddress = nil
	}
	if deps.RemoveInstance != nil {
		if err := river.AddWorkerSafely(workers, &RemoveInstanceWorker{Remove: deps.RemoveInstance}); err != nil {
			return nil, fmt.Errorf("register instance removal worker: %w", err)
		}
	}
	var sessionEnded func(context.Context, *Client, pgx.Tx, uuid.UUID) error
	if deps.Memory != nil {
		sessionEnded = deps.Memory.SessionEndedTx
	}
	if err := river.AddWorkerSafely(workers, &CrashDetectWorker{Pool: deps.Pool, Logger: deps.Logger,
		Threshold: deps.CrashThreshold, StartGrace: deps.CrashStartGrace, DMAddress: dmAddress,
		RemoveInstances: deps.RemoveInstance != nil, SessionEnded: sessionEnded}); err != nil {
		return nil, fmt.Errorf("register crash detection worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &ApprovalTimeoutWorker{Pool: deps.Pool, Logger: deps.Logger,
		Resolved: deps.ApprovalResolved}); err != nil {
		return nil, fmt.Errorf("register approval timeout worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &ProposalApplyWorker{Apply: deps.ApplyProposal}); err != nil {
		return nil, fmt.Errorf("register proposal apply worker: %w", err)
	}
	periodic, err := periodicJobs(deps, workers)
	if err != nil {
		return nil, err
	}
	if deps.Memory != nil {
		if err := deps.Memory.AddWorkers(workers); err != nil {
			return nil, err
		}
	}
	queues := map[string]river.QueueConfig{
		// Crash detection must not wait behind anything: its own queue,
		// a short fetch cooldown so a job starts within milliseconds.
		QueueControl: {MaxWorkers: 4, FetchCooldown: 20 * time.Millisecond, FetchPollInterval: 200 * time.Millisecond},
		// Embedding waits on the provider; a few calls in flight are
		// plenty, and retries of 1 s must not wait for a 1 s poll.
		QueueEmbed:  {MaxWorkers: 4, FetchCooldown: 20 * time.Millisecond, FetchPollInterval: 100 * time.Millisecond},
		QueueMemory: {MaxWorkers: 2, FetchCooldown: 20 * time.Millisecond, FetchPollInterval: 200 * time.Millisecond},
	}
	if err := AddScheduleWorker(workers, &ScheduleFireWorker{Pool: deps.Pool,
		Logger: deps.Logger.With(slog.String("component", "schedule")), Fired: deps.ScheduleFired,
		Deps: ScheduleFireDeps{Now: deps.Now, DMAddress: deps.DMAddress}}); err != nil {
		return nil, err
	}
	name, qc := ScheduleQueue()
	queues[name] = qc
	if deps.Sender != nil {
		if err := AddDeliveryWorker(workers, DeliveryDeps{Pool: deps.Pool, Sender: deps.Sender, Limiter: deps.SendLimiter,
			Workspaces: deps.Workspaces, Logger: deps.Logger.With(slog.String("component", "delivery"))}); err != nil {
			return nil, err
		}
		name, qc := DeliveryQueue()
		queues[name] = qc
	}
	client, err := river.NewClient(riverpgxv5.New(deps.Pool), &river.Config{
		Logger: slog.New(quietRiver{deps.Logger.With(slog.String("component", "river")).Handler()}),
		Queues: queues,
		// The inserting side sends at most one insert notification per
		// queue per FetchCooldown: keep it short, or an outbound message
		// queued right after another waits for the delivery queue's poll.
		FetchCooldown: time.Millisecond,
		Workers:       workers,
		PeriodicJobs:  periodic,
		// A job that hangs is rescued after a minute, not River's default
		// hour; no job of ours legitimately runs that long.
		RescueStuckJobsAfter: time.Minute,
		JobTimeout:           30 * time.Second,
		// Periodic crash detection completes a job twice a second: keep
		// completed rows an hour, not River's default day.
		CompletedJobRetentionPeriod: time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("create river client: %w", err)
	}
	return client, nil
}

// periodicJobs are crash detection and, with workspaces, the cleanup of
// received files, whose worker it registers.
func periodicJobs(deps Deps, workers *river.Workers) ([]*river.PeriodicJob, error) {
	periodic := []*river.PeriodicJob{
		river.NewPeriodicJob(river.PeriodicInterval(deps.CrashInterval),
			func() (river.JobArgs, *river.InsertOpts) { return CrashDetectArgs{}, nil },
			&river.PeriodicJobOpts{ID: "crash_detect", RunOnStart: true}),
	}
	if deps.Workspaces == nil {
		return periodic, nil
	}
	if err := river.AddWorkerSafely(workers, &RecvCleanWorker{Pool: deps.Pool, Workspaces: deps.Workspaces,
		Logger: deps.Logger.With(slog.String("component", "recv_clean"))}); err != nil {
		return nil, fmt.Errorf("register received-file cleanup worker: %w", err)
	}
	return append(periodic, river.NewPeriodicJob(river.PeriodicInterval(RecvCleanInterval),
		func() (river.JobArgs, *river.InsertOpts) { return RecvCleanArgs{}, nil },
		&river.PeriodicJobOpts{ID: "recv_clean", RunOnStart: true})), nil
}

// quietRiver demotes River's periodic "Producer job counts" lines, logged
// at INFO every few seconds for as long as choird runs, to DEBUG: library
// noise must not bury choird's own lines (issue 21).
type quietRiver struct{ slog.Handler }

func (h quietRiver) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo && strings.HasSuffix(r.Message, "Producer job counts") {
		if !h.Handler.Enabled(ctx, slog.LevelDebug) {
			return nil
		}
		r.Level = slog.LevelDebug
	}
	return h.Handler.Handle(ctx, r)
}

func (h quietRiver) WithAttrs(attrs []slog.Attr) slog.Handler {
	return quietRiver{h.Handler.WithAttrs(attrs)}
}

func (h quietRiver) WithGroup(name string) slog.Handler { return quietRiver{h.Handler.WithGroup(name)} }
