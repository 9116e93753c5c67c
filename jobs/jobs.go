// Package jobs holds choird's River job kinds and their workers: the slow,
// retryable or periodic work that runs inside Postgres transactions. Each
// worker finishes its rows and completes its job in one transaction, so a
// crash never leaves work half done or done twice.
package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/config"
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
	// Embedder makes memory vectors. Without it the memory workers
	// (embedding, chunking, promotion) are not registered.
	Embedder Embedder
	// EmbedRetryBase is the first retry delay of a failed embedding batch
	// (default DefaultEmbedRetryBase); tests shorten it.
	EmbedRetryBase time.Duration
	// MidTermSessions returns how many recent sessions stay mid-term
	// (config.MidTermSessionCount); a func so a config reload applies.
	MidTermSessions func() int
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
	// the only places the delivery worker opens and removes files.
	Workspaces func() map[string]string
}

// Client is the River client type choird uses.
type Client = river.Client[pgx.Tx]

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
	if err := river.AddWorkerSafely(workers, &CrashDetectWorker{Pool: deps.Pool, Logger: deps.Logger,
		Threshold: deps.CrashThreshold, StartGrace: deps.CrashStartGrace, DMAddress: dmAddress, RemoveInstances: deps.RemoveInstance != nil}); err != nil {
		return nil, fmt.Errorf("register crash detection worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &ApprovalTimeoutWorker{Pool: deps.Pool, Logger: deps.Logger,
		Resolved: deps.ApprovalResolved}); err != nil {
		return nil, fmt.Errorf("register approval timeout worker: %w", err)
	}
	if deps.Embedder != nil {
		if err := addMemoryWorkers(workers, deps); err != nil {
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
	if deps.Sender != nil {
		if err := AddDeliveryWorker(workers, DeliveryDeps{Pool: deps.Pool, Sender: deps.Sender, Limiter: deps.SendLimiter,
			Workspaces: deps.Workspaces, Logger: deps.Logger.With(slog.String("component", "delivery"))}); err != nil {
			return nil, err
		}
		name, qc := DeliveryQueue()
		queues[name] = qc
	}
	client, err := river.NewClient(riverpgxv5.New(deps.Pool), &river.Config{
		Logger: deps.Logger.With(slog.String("component", "river")),
		Queues: queues,
		// The inserting side sends at most one insert notification per
		// queue per FetchCooldown: keep it short, or an outbound message
		// queued right after another waits for the delivery queue's poll.
		FetchCooldown: time.Millisecond,
		Workers:       workers,
		PeriodicJobs: []*river.PeriodicJob{
			river.NewPeriodicJob(river.PeriodicInterval(deps.CrashInterval),
				func() (river.JobArgs, *river.InsertOpts) { return CrashDetectArgs{}, nil },
				&river.PeriodicJobOpts{ID: "crash_detect", RunOnStart: true}),
		},
		// A job that hangs is rescued after a minute, not River's default
		// hour; no job of ours legitimately runs that long.
		RescueStuckJobsAfter: time.Minute,
		JobTimeout:           30 * time.Second,
		// Periodic crash detection completes every second: keep a day of
		// completed rows for audit, not River's default.
		CompletedJobRetentionPeriod: time.Hour,
	})
	if err != nil {
		return nil, fmt.Errorf("create river client: %w", err)
	}
	return client, nil
}

func addMemoryWorkers(workers *river.Workers, deps Deps) error {
	if deps.EmbedRetryBase <= 0 {
		deps.EmbedRetryBase = DefaultEmbedRetryBase
	}
	if deps.MidTermSessions == nil {
		deps.MidTermSessions = func() int { return config.DefaultMidTermSessions }
	}
	if err := river.AddWorkerSafely(workers, &EmbedWorker{Pool: deps.Pool, Logger: deps.Logger,
		Embedder: deps.Embedder, RetryBase: deps.EmbedRetryBase}); err != nil {
		return fmt.Errorf("register embedding worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &ChunkSessionWorker{Pool: deps.Pool, Logger: deps.Logger}); err != nil {
		return fmt.Errorf("register chunking worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &PromoteWorker{Pool: deps.Pool, Logger: deps.Logger,
		MidTermSessions: deps.MidTermSessions}); err != nil {
		return fmt.Errorf("register promotion worker: %w", err)
	}
	return nil
}
