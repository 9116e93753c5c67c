package memory

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
)

// The memory pipeline runs as River jobs: the kinds and args below are its
// contract between the code that enqueues them (the Store's writes,
// choird when a session ends, the workers themselves) and the workers in
// daemon/memory/pipeline, which package jobs registers and runs.

// The queues of the memory pipeline's jobs. Package jobs configures them
// (jobs.QueueEmbed, jobs.QueueMemory, which a test keeps equal to these):
// embedding is bulk work that waits on an external API, and neither shares
// a queue with latency-sensitive work.
const (
	QueueEmbed  = "embed"
	QueueMemory = "memory"
)

// The stores an embedding job can target (EmbedArgs.Store).
const (
	EmbedStoreMemory    = "memory"
	EmbedStoreKnowledge = "knowledge"
)

// MaxEmbedBatch is the most texts one embedding job, and so one API call,
// carries.
const MaxEmbedBatch = 32

// EmbedMaxAttempts is one try and three retries.
const EmbedMaxAttempts = 4

// EmbedArgs embeds up to MaxEmbedBatch documents of one agent's store. The
// documents are named, so that the job owns them: running it twice, or
// after the documents were embedded otherwise, embeds nothing twice.
type EmbedArgs struct {
	AgentID string      `json:"agent_id"`
	Store   string      `json:"store"`
	IDs     []uuid.UUID `json:"ids"`
}

// Kind implements river.JobArgs.
func (EmbedArgs) Kind() string { return "memory_embed" }

// InsertOpts puts embedding on its own queue, so a backlog of it never
// delays interactive work.
func (EmbedArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueEmbed, MaxAttempts: EmbedMaxAttempts}
}

// EmbedJobs returns the embedding jobs for ids, MaxEmbedBatch per job.
func EmbedJobs(agentID, store string, ids []uuid.UUID) []river.InsertManyParams {
	var out []river.InsertManyParams
	for start := 0; start < len(ids); start += MaxEmbedBatch {
		end := min(start+MaxEmbedBatch, len(ids))
		out = append(out, river.InsertManyParams{Args: EmbedArgs{AgentID: agentID, Store: store,
			IDs: append([]uuid.UUID(nil), ids[start:end]...)}})
	}
	return out
}

// Inserter is the part of a River client that enqueues jobs in a caller's
// transaction: choird's (jobs.Client), or an insert-only one in choirctl.
type Inserter interface {
	InsertTx(ctx context.Context, tx pgx.Tx, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
	InsertManyTx(ctx context.Context, tx pgx.Tx, params []river.InsertManyParams) ([]*rivertype.JobInsertResult, error)
}

// InsertEmbedTx enqueues the embedding of ids in tx.
func InsertEmbedTx(ctx context.Context, ins Inserter, tx pgx.Tx, agentID, store string, ids []uuid.UUID) error {
	if len(ids) == 0 {
		return nil
	}
	if _, err := ins.InsertManyTx(ctx, tx, EmbedJobs(agentID, store, ids)); err != nil {
		return fmt.Errorf("enqueue embedding of %d %s documents of agent %s: %w", len(ids), store, agentID, err)
	}
	return nil
}

// ChunkSessionArgs chunks one ended session's events into mid-term memory.
type ChunkSessionArgs struct {
	SessionID uuid.UUID `json:"session_id"`
}

// Kind implements river.JobArgs.
func (ChunkSessionArgs) Kind() string { return "memory_chunk_session" }

// InsertOpts puts chunking on the memory queue; a session is chunked by one
// job however often it is enqueued (and the worker is idempotent besides).
func (ChunkSessionArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMemory, MaxAttempts: 10, UniqueOpts: river.UniqueOpts{ByArgs: true}}
}

// InsertChunkSessionTx enqueues the chunking of a session in tx: call it in
// the transaction that marks the session ended, so an ended session is
// never left out of memory.
func InsertChunkSessionTx(ctx context.Context, ins Inserter, tx pgx.Tx, sessionID uuid.UUID) error {
	if _, err := ins.InsertTx(ctx, tx, ChunkSessionArgs{SessionID: sessionID}, nil); err != nil {
		return fmt.Errorf("enqueue chunking of session %s: %w", sessionID, err)
	}
	return nil
}

// PromoteArgs moves one agent's sessions beyond the newest N mid-term ones
// to long-term memory.
type PromoteArgs struct {
	AgentID string `json:"agent_id"`
}

// Kind implements river.JobArgs.
func (PromoteArgs) Kind() string { return "memory_promote" }

// InsertOpts puts promotion on the memory queue.
func (PromoteArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueMemory, MaxAttempts: 10}
}
