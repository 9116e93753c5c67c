package jobs

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/db"
)

// Memory stores an embedding job can target.
const (
	StoreMemory    = "memory"
	StoreKnowledge = "knowledge"
)

// Embedder is what the embedding worker needs of an embedding provider
// (daemon/embed.Embedder): at most MaxEmbedBatch texts per call, one vector
// per text. An error with a Temporary() bool method that reports false is
// not retried; one with a RetryAfterDuration() time.Duration method delays
// the next attempt at least that long (at most a minute).
type Embedder interface {
	Embed(ctx context.Context, texts []string) ([][]float32, error)
	Model() string
	Dimensions() int
}

// MaxEmbedBatch is the most texts one embedding job, and so one API call,
// carries.
const MaxEmbedBatch = 32

// EmbedMaxAttempts is one try and three retries.
const EmbedMaxAttempts = 4

// memoryJobTimeout bounds one run of a memory job. It stays under the
// client's RescueStuckJobsAfter (a minute), so that River never rescues a
// job that is still running; an embedding call gives up after 30 s.
const memoryJobTimeout = 50 * time.Second

// DefaultEmbedRetryBase is the first retry delay of an embedding job; each
// later one doubles it (1 s, 2 s, 4 s), with ±25% jitter.
const DefaultEmbedRetryBase = time.Second

// AgentScope confines a transaction to one agent's memory schema until
// Leave: unqualified table names resolve in choir_<agent_id>, and when a
// role agent is given, every statement runs with the privileges of that
// agent's role, so Postgres refuses anything outside that agent's own
// schema.
type AgentScope struct {
	tx       pgx.Tx
	previous string
}

// EnterAgentScope puts the schema of schemaAgent first on search_path for
// the rest of tx (SET LOCAL semantics) and, unless roleAgent is empty,
// switches to roleAgent's role. Own-agent work passes the same agent twice;
// choird's reads of another agent's memory and operator commands pass an
// empty roleAgent and keep choird's role.
func EnterAgentScope(ctx context.Context, tx pgx.Tx, schemaAgent, roleAgent string) (*AgentScope, error) {
	for _, id := range []string{schemaAgent, roleAgent} {
		if id != "" && !config.ValidName(id) {
			return nil, fmt.Errorf("invalid agent id %q: want %s", id, config.NamePattern)
		}
	}
	role := "none"
	if roleAgent != "" {
		role = config.SchemaName(roleAgent)
	}
	q := db.New(tx)
	row, err := q.MemoryScopeEnter(ctx, db.MemoryScopeEnterParams{
		SearchPath: config.SchemaName(schemaAgent) + ", public", Role: role})
	if err != nil {
		return nil, fmt.Errorf("enter memory schema of agent %s: %w", schemaAgent, err)
	}
	if roleAgent != "" && roleAgent != schemaAgent {
		if err := q.MemoryScopeCheck(ctx, config.SchemaName(schemaAgent)); err != nil {
			return nil, fmt.Errorf("agent %s in the memory of agent %s: %w", roleAgent, schemaAgent, err)
		}
	}
	return &AgentScope{tx: tx, previous: row.PreviousSearchPath}, nil
}

// Leave restores choird's role and the previous search_path.
func (s *AgentScope) Leave(ctx context.Context) error {
	if err := db.New(s.tx).MemoryScopeLeave(ctx, s.previous); err != nil {
		return fmt.Errorf("leave memory schema: %w", err)
	}
	return nil
}

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
// transaction: *Client, or an insert-only client in choirctl.
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
