package pipeline

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/db/agentdb"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// EmbedWorker embeds the documents an memory.EmbedArgs names, in one API call.
//
// A failed call is retried by River (EmbedMaxAttempts in all, RetryBase
// doubling, with jitter). After the last attempt, or at once when the
// provider refuses the call for good (a bad key, an unknown model), the
// documents are marked failed: they keep no vector, stay searchable by
// full text, and a warning is logged; the job itself completes, so tool
// execution never waits on it. Vectors are stored only for documents still
// pending at the version that was embedded, so no document is embedded
// twice, whatever runs twice.
type EmbedWorker struct {
	river.WorkerDefaults[memory.EmbedArgs]
	Pool      *pgxpool.Pool
	Logger    *slog.Logger
	Embedder  Embedder
	RetryBase time.Duration

	// DriftCheckEvery is the least time between two IDF drift checks of
	// one agent's store (default DefaultDriftCheckEvery; see drift.go).
	DriftCheckEvery time.Duration

	// retryAfter holds, by job id, how long the provider asked us to wait
	// (a 429's Retry-After) until NextRetry picks it up.
	retryAfter sync.Map
	// driftChecked holds, by agent and store, when drift was last checked.
	driftChecked sync.Map
}

// maxRetryAfter caps how long a provider's Retry-After delays a retry.
const maxRetryAfter = time.Minute

// NextRetry implements river.Worker: RetryBase, then twice, then four
// times it, each ±25%, or longer when the provider said to wait longer.
func (w *EmbedWorker) NextRetry(job *river.Job[memory.EmbedArgs]) time.Time {
	d := retryDelay(w.RetryBase, job.Attempt)
	if v, ok := w.retryAfter.LoadAndDelete(job.ID); ok {
		d = max(d, min(v.(time.Duration), maxRetryAfter))
	}
	return time.Now().Add(d)
}

// Timeout bounds one attempt (memoryJobTimeout).
func (w *EmbedWorker) Timeout(*river.Job[memory.EmbedArgs]) time.Duration { return memoryJobTimeout }

// dimensionsSnooze is how long an embedding job waits when the agent's
// vectors and the embedder differ in size.
const dimensionsSnooze = time.Minute

// pendingDoc is a document to embed: its text, or for a lexical embedder
// its lexemes and their statistics.
type pendingDoc struct {
	id      uuid.UUID
	version int32
	text    string
	lex     embed.LexicalText
}

// Work implements river.Worker.
func (w *EmbedWorker) Work(ctx context.Context, job *river.Job[memory.EmbedArgs]) error {
	a := job.Args
	if a.Store != memory.EmbedStoreMemory && a.Store != memory.EmbedStoreKnowledge {
		return river.JobCancel(fmt.Errorf("unknown store %q", a.Store))
	}
	if len(a.IDs) > memory.MaxEmbedBatch {
		return river.JobCancel(fmt.Errorf("%d documents in one embedding job, at most %d", len(a.IDs), memory.MaxEmbedBatch))
	}
	docs, dims, err := w.loadPending(ctx, a)
	if err != nil {
		return err
	}
	if len(docs) > 0 && int(dims) != w.Embedder.Dimensions() {
		// choirctl memory reembed resized the agent's vectors while this
		// choird still runs the old configuration: wait for the restart
		// with the new one rather than fail what it would embed.
		w.Logger.WarnContext(ctx, "embedding postponed: the agent's memory holds vectors of another size than the "+
			"embedder makes; restart choird with the configuration the re-embedding was made for",
			slog.String("agent_id", a.AgentID), slog.Int("schema_dimensions", int(dims)),
			slog.Int("embedder_dimensions", w.Embedder.Dimensions()))
		return river.JobSnooze(dimensionsSnooze)
	}
	if len(docs) == 0 {
		return w.inAgent(ctx, a.AgentID, job, func(*agentdb.Queries) error { return nil })
	}
	// What the provider bills counts against the agent's caps.
	vecs, err := w.embed(embed.ForAgent(ctx, a.AgentID, "memory"), docs)
	if err != nil {
		return w.embedFailed(ctx, job, docs, err)
	}
	if err := w.storeVectors(ctx, job, docs, vecs); err != nil {
		return err
	}
	if w.lexical() != nil {
		w.maybeCheckDrift(ctx, a.AgentID, a.Store)
	}
	return nil
}

// lexical returns the worker's embedder as a memory.LexicalEmbedder when
// it wants lexical texts, else nil.
func (w *EmbedWorker) lexical() memory.LexicalEmbedder { return memory.AsLexical(w.Embedder) }

// embed embeds docs: their lexical texts for a lexical embedder, else
// their texts.
func (w *EmbedWorker) embed(ctx context.Context, docs []pendingDoc) ([][]float32, error) {
	if lx := w.lexical(); lx != nil {
		lts := make([]embed.LexicalText, len(docs))
		for i, d := range docs {
			lts[i] = d.lex
		}
		return lx.EmbedLexical(ctx, lts)
	}
	texts := make([]string, len(docs))
	for i, d := range docs {
		texts[i] = d.text
	}
	return w.Embedder.Embed(ctx, texts)
}

// loadPending reads the agent's vector size and which of the job's
// documents are still pending, with their texts, and for a lexical
// embedder their lexemes and statistics.
func (w *EmbedWorker) loadPending(ctx context.Context, a memory.EmbedArgs) ([]pendingDoc, int32, error) {
	var docs []pendingDoc
	var dims int32
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		schema, err := seam.Queries(tx).AgentSchemaGet(ctx, a.AgentID)
		if errors.Is(err, choirsql.ErrNotFound) {
			return river.JobCancel(fmt.Errorf("agent %s has no memory schema", a.AgentID))
		}
		if err != nil {
			return fmt.Errorf("read memory schema of agent %s: %w", a.AgentID, err)
		}
		dims = schema.Dimensions
		scope, err := memory.EnterAgentScope(ctx, tx, a.AgentID, a.AgentID)
		if err != nil {
			return err
		}
		aq := seam.AgentQueries(tx)
		if docs, err = pending(ctx, aq, a.Store, a.IDs); err != nil {
			return err
		}
		if w.lexical() != nil && len(docs) > 0 {
			if err := loadLexemes(ctx, aq, a.Store, docs); err != nil {
				return err
			}
		}
		return scope.Leave(ctx)
	})
	if err != nil {
		return nil, 0, err
	}
	return docs, dims, nil
}

// embedFailed handles a failed embedding call: it leaves a temporary
// failure to River's retry (remembering the provider's Retry-After), and
// after the last attempt, or a permanent failure, marks the documents
// failed and completes the job.
func (w *EmbedWorker) embedFailed(ctx context.Context, job *river.Job[memory.EmbedArgs], docs []pendingDoc, err error) error {
	a := job.Args
	final := job.Attempt >= job.MaxAttempts || !temporary(err)
	attrs := []any{slog.String("agent_id", a.AgentID), slog.String("store", a.Store), slog.Int("documents", len(docs)),
		slog.Int("attempt", job.Attempt), slog.Int("max_attempts", job.MaxAttempts), slog.String("error", err.Error())}
	if !final {
		var ra interface{ RetryAfterDuration() time.Duration }
		if errors.As(err, &ra) && ra.RetryAfterDuration() > 0 {
			w.retryAfter.Store(job.ID, ra.RetryAfterDuration())
		}
		w.Logger.InfoContext(ctx, "embedding failed; will retry", attrs...)
		return fmt.Errorf("embed %d %s documents of agent %s: %w", len(docs), a.Store, a.AgentID, err)
	}
	ids := make([]uuid.UUID, len(docs))
	for i, d := range docs {
		ids[i] = d.id
	}
	msg := fmt.Sprintf("attempt %d of %d: %v", job.Attempt, job.MaxAttempts, err)
	var failed int64
	err = w.inAgent(ctx, a.AgentID, job, func(aq *agentdb.Queries) error {
		var err error
		if a.Store == memory.EmbedStoreMemory {
			failed, err = aq.MemoryEmbeddingsFail(ctx, agentdb.MemoryEmbeddingsFailParams{Ids: ids, ErrorMessage: msg})
		} else {
			failed, err = aq.KnowledgeEmbeddingsFail(ctx, agentdb.KnowledgeEmbeddingsFailParams{Ids: ids, ErrorMessage: msg})
		}
		return err
	})
	if err != nil {
		return err
	}
	w.Logger.WarnContext(ctx, "embedding failed for good: documents stored without vectors, still found by "+
		"full-text search; run choirctl memory reembed to retry them", append(attrs, slog.Int64("marked_failed", failed))...)
	return nil
}

// storeVectors stores the vectors of the documents still pending at the
// version embedded and completes the job, in one transaction.
func (w *EmbedWorker) storeVectors(ctx context.Context, job *river.Job[memory.EmbedArgs], docs []pendingDoc,
	vecs [][]float32) error {
	a := job.Args
	var stored int
	err := w.inAgent(ctx, a.AgentID, job, func(aq *agentdb.Queries) error {
		ids := make([]uuid.UUID, len(docs))
		embs := make([]pgvector.Vector, len(docs))
		versions := make([]int32, len(docs))
		for i, d := range docs {
			ids[i], versions[i], embs[i] = d.id, d.version, pgvector.NewVector(vecs[i])
		}
		var done []uuid.UUID
		var err error
		if a.Store == memory.EmbedStoreMemory {
			done, err = aq.MemoryEmbeddingsStore(ctx, agentdb.MemoryEmbeddingsStoreParams{Model: w.Embedder.Model(),
				Ids: ids, Embeddings: embs})
		} else {
			done, err = aq.KnowledgeEmbeddingsStore(ctx, agentdb.KnowledgeEmbeddingsStoreParams{Model: w.Embedder.Model(),
				Ids: ids, Versions: versions, Embeddings: embs})
		}
		stored = len(done)
		return err
	})
	if err != nil {
		return err
	}
	w.Logger.DebugContext(ctx, "documents embedded", slog.String("agent_id", a.AgentID), slog.String("store", a.Store),
		slog.Int("stored", stored), slog.Int("sent", len(docs)))
	return nil
}

// pending returns those of ids still waiting for a vector in store, with
// their texts.
func pending(ctx context.Context, aq *agentdb.Queries, store string, ids []uuid.UUID) ([]pendingDoc, error) {
	var docs []pendingDoc
	if store == memory.EmbedStoreMemory {
		rows, err := aq.MemoryEmbeddingPending(ctx, ids)
		if err != nil {
			return nil, fmt.Errorf("read chunks to embed: %w", err)
		}
		for _, r := range rows {
			docs = append(docs, pendingDoc{id: r.ID, text: r.Text})
		}
		return docs, nil
	}
	rows, err := aq.KnowledgeEmbeddingPending(ctx, ids)
	if err != nil {
		return nil, fmt.Errorf("read knowledge to embed: %w", err)
	}
	for _, r := range rows {
		docs = append(docs, pendingDoc{id: r.ID, version: r.Version, text: r.Text})
	}
	return docs, nil
}

// inAgent runs fn in a transaction confined to the agent's schema under its
// role; with job set, it then completes the job in the same transaction.
func (w *EmbedWorker) inAgent(ctx context.Context, agentID string, job *river.Job[memory.EmbedArgs],
	fn func(*agentdb.Queries) error) error {
	return pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		scope, err := memory.EnterAgentScope(ctx, tx, agentID, agentID)
		if err != nil {
			return err
		}
		if err := fn(seam.AgentQueries(tx)); err != nil {
			return err
		}
		if err := scope.Leave(ctx); err != nil {
			return err
		}
		if job == nil {
			return nil
		}
		return completeTx(ctx, tx, job)
	})
}
