// Package jobs is choird's job runner: River's client, the queues that
// features share, and the wiring of every feature's workers, queues and
// periodic jobs. It owns no job kind and knows no feature: each part of
// choird that causes slow, retryable or periodic work (the outbox's
// delivery, approvals, schedules, proposals, crash detection, the memory
// pipeline) owns its job kinds and the transaction functions that insert
// them, and hands itself to NewClient as a Feature that registers its
// workers. jobs imports nothing of daemon/ or agent/ (layout_test.go).
package jobs

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivertype"
)

// Queues. Latency-sensitive work never shares a queue with bulk work: a
// backlog of embeddings must not delay crash detection.
const (
	// QueueControl runs crash detection and other control-plane upkeep:
	// approval timeouts, proposal steps, instance removal, the cleanup
	// of received files.
	QueueControl = "control"
	// QueueEmbed runs embedding batches: bulk work that waits on an
	// external API and may back up by thousands of jobs on a re-embed.
	QueueEmbed = "embed"
	// QueueMemory chunks ended sessions and promotes old ones to long-term
	// memory: quick, but never worth delaying control work for.
	QueueMemory = "memory"
)

// Deps are what the client needs from choird.
type Deps struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Features are the parts of choird that own job kinds: each registers
	// its workers, and may add periodic jobs (PeriodicFeature) and queues
	// of its own (QueueFeature).
	Features []Feature
}

// Feature is a part of choird that owns job kinds and registers their
// workers, as the memory pipeline (daemon/memory/pipeline), the outbox's
// delivery, approvals, schedules, proposals, crash detection and the
// cleanup of received files do. jobs runs them; what they do is theirs.
type Feature interface {
	AddWorkers(workers *river.Workers) error
}

// PeriodicFeature is a Feature with periodic jobs.
type PeriodicFeature interface {
	Feature
	PeriodicJobs() []*river.PeriodicJob
}

// QueueFeature is a Feature whose jobs run on queues of its own, which
// the client configures besides the shared ones above.
type QueueFeature interface {
	Feature
	Queues() map[string]river.QueueConfig
}

// Client is the River client type choird uses.
type Client = river.Client[pgx.Tx]

// Inserter is the part of a River client that enqueues jobs in a caller's
// transaction: *Client, or an insert-only client in choirctl.
type Inserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// NewClient builds choird's River client with the shared queues and every
// feature's workers, queues and periodic jobs registered. Start it with
// Start(ctx).
func NewClient(deps Deps) (*Client, error) {
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
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
	workers := river.NewWorkers()
	var periodic []*river.PeriodicJob
	for _, f := range deps.Features {
		if err := f.AddWorkers(workers); err != nil {
			return nil, err
		}
		if p, ok := f.(PeriodicFeature); ok {
			periodic = append(periodic, p.PeriodicJobs()...)
		}
		if q, ok := f.(QueueFeature); ok {
			for name, qc := range q.Queues() {
				if _, dup := queues[name]; dup {
					return nil, fmt.Errorf("queue %q configured twice", name)
				}
				queues[name] = qc
			}
		}
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
