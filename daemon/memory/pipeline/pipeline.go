// Package pipeline is the memory pipeline's work: the River workers that
// embed documents in batches, chunk ended sessions into mid-term memory
// and promote old sessions to long-term memory. Each finishes its rows,
// enqueues what follows and completes its job in one transaction, so a
// crash never leaves work half done or done twice. The job kinds and args
// are daemon/memory's, whose Store enqueues embeddings too; Workers is the
// pipeline as a jobs.Feature, which registers these workers with choird's
// River client, and runs them on the queues jobs shares.
package pipeline

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/memory"
)

// Embedder is what the embedding worker needs of an embedding provider
// (daemon/embed.Embedder): at most memory.MaxEmbedBatch texts per call, one
// vector per text. An error with a Temporary() bool method that reports false is
// not retried; one with a RetryAfterDuration() time.Duration method delays
// the next attempt at least that long (at most a minute).
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Model() string
	Dimensions() int
}

// memoryJobTimeout bounds one run of a memory job. It stays under the
// River client's RescueStuckJobsAfter (a minute, set by jobs), so that River never rescues a
// job that is still running; an embedding call gives up after 30 s.
const memoryJobTimeout = 50 * time.Second

// DefaultEmbedRetryBase is the first retry delay of an embedding job; each
// later one doubles it (1 s, 2 s, 4 s), with ±25% jitter.
const DefaultEmbedRetryBase = time.Second

// Workers are the pipeline's workers and what they need from choird. It
// is a jobs.Feature; crash detection files a crashed session into memory
// through its SessionEndedTx.
type Workers struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Embedder makes memory vectors.
	Embedder Embedder
	// EmbedRetryBase is the first retry delay of a failed embedding batch
	// (default DefaultEmbedRetryBase); tests shorten it.
	EmbedRetryBase time.Duration
	// DriftCheckEvery is EmbedWorker.DriftCheckEvery.
	DriftCheckEvery time.Duration
	// MidTermSessions returns how many recent sessions stay mid-term
	// (config.MidTermSessionCount); a func so a config reload applies.
	// Nil means config.DefaultMidTermSessions.
	MidTermSessions func() int
}

// AddWorkers registers the embedding, chunking and promotion workers.
func (w Workers) AddWorkers(workers *river.Workers) error {
	logger := w.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	midTerm := w.MidTermSessions
	if midTerm == nil {
		midTerm = func() int { return config.DefaultMidTermSessions }
	}
	if err := river.AddWorkerSafely(workers, &EmbedWorker{Pool: w.Pool, Logger: logger,
		Embedder: w.Embedder, RetryBase: cmp.Or(w.EmbedRetryBase, DefaultEmbedRetryBase),
		DriftCheckEvery: w.DriftCheckEvery}); err != nil {
		return fmt.Errorf("register embedding worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &ChunkSessionWorker{Pool: w.Pool, Logger: logger}); err != nil {
		return fmt.Errorf("register chunking worker: %w", err)
	}
	if err := river.AddWorkerSafely(workers, &PromoteWorker{Pool: w.Pool, Logger: logger,
		MidTermSessions: midTerm}); err != nil {
		return fmt.Errorf("register promotion worker: %w", err)
	}
	return nil
}

// SessionEndedTx enqueues, in tx, the chunking of an ended session into
// its agent's memory (memory.InsertChunkSessionTx).
func (Workers) SessionEndedTx(ctx context.Context, client *river.Client[pgx.Tx], tx pgx.Tx, sessionID uuid.UUID) error {
	return memory.InsertChunkSessionTx(ctx, client, tx, sessionID)
}

func completeTx[T river.JobArgs](ctx context.Context, tx pgx.Tx, job *river.Job[T]) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("complete %s job %d: %w", job.Kind, job.ID, err)
	}
	return nil
}

// retryDelay is base·2^(attempt-1), ±25%.
func retryDelay(base time.Duration, attempt int) time.Duration {
	d := base << max(0, attempt-1)
	return time.Duration(float64(d) * (0.75 + 0.5*rand.Float64()))
}

// temporary reports whether err may go away on retry: false only for errors
// that say so through a Temporary() bool method.
func temporary(err error) bool {
	var t interface{ Temporary() bool }
	if errors.As(err, &t) {
		return t.Temporary()
	}
	return true
}
