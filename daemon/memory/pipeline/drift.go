package pipeline

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/db/agentdb"
	"github.com/choirhq/choir/sql/seam"
)

// IDF drift: the offline embedder weighs a document's lexemes by their
// inverse document frequency in the store when the document is embedded;
// queries are weighed with today's. After an embedding batch the worker
// measures, at most every DriftCheckEvery per agent and store, how far
// today's IDF has moved from the basis the store was last re-embedded
// with (LexemeDrift: the df-weighted mean |idf now - idf then|, in nats).
// Past DriftThreshold, and once the store holds DriftMinDocs documents, it
// re-embeds the store's vectors through the embedding jobs and rebases,
// in one transaction.
const (
	// DriftThreshold is the drift, in nats, past which a store is
	// re-embedded. Growth that keeps each word's share of the documents
	// moves IDF little; a store first embedded while it was small (every
	// word rare) or whose vocabulary changed moves it by about a nat.
	DriftThreshold = 0.3
	// DriftMinDocs is the fewest documents a store must hold before its
	// drift is acted on: below it re-embedding is cheap to skip and the
	// statistics too noisy to chase.
	DriftMinDocs = 100
	// DefaultDriftCheckEvery is EmbedWorker.DriftCheckEvery's default.
	DefaultDriftCheckEvery = 30 * time.Second
)

// maybeCheckDrift checks the drift of the agent's store unless this
// worker checked it less than DriftCheckEvery ago. A failed check is
// logged, not returned: the batch is stored, and the next one checks
// again.
func (w *EmbedWorker) maybeCheckDrift(ctx context.Context, agentID, store string) {
	every := w.DriftCheckEvery
	if every <= 0 {
		every = DefaultDriftCheckEvery
	}
	key := agentID + "/" + store
	now := time.Now()
	if last, ok := w.driftChecked.Load(key); ok && now.Sub(last.(time.Time)) < every {
		return
	}
	if prev, loaded := w.driftChecked.Swap(key, now); loaded && now.Sub(prev.(time.Time)) < every {
		return // another batch of the same store is checking
	}
	ins, err := river.ClientFromContextSafely[pgx.Tx](ctx)
	if err != nil {
		w.Logger.WarnContext(ctx, "IDF drift not checked: no job client", slog.String("error", err.Error()))
		return
	}
	res, err := CheckDrift(ctx, w.Pool, ins, w.Logger, agentID, store, w.Embedder.Model())
	if err == nil && res.Docs < DriftMinDocs {
		// A small store is cheap to check: check it again next batch, so
		// that the first re-embedding comes as soon as it is due.
		w.driftChecked.Delete(key)
	}
	if err != nil {
		w.Logger.WarnContext(ctx, "IDF drift check failed; the next embedding batch retries it",
			slog.String("agent_id", agentID), slog.String("store", store), slog.String("error", err.Error()))
	}
}

// DriftResult is what CheckDrift found and did.
type DriftResult struct {
	// Docs is the store's document count, Drift its IDF drift in nats.
	Docs  int64
	Drift float64
	// Reembedded counts the documents marked for re-embedding (0: none).
	Reembedded int
}

// CheckDrift measures the IDF drift of an agent's store (memory or
// knowledge) and, past DriftThreshold with at least DriftMinDocs
// documents, marks every vector of the store for re-embedding with model,
// enqueues their embedding jobs with ins, and rebases, in one transaction
// with choird's role (the agent role cannot write the basis). Checks of
// one store are serialised, so a drift is acted on once.
func CheckDrift(ctx context.Context, pool *pgxpool.Pool, ins memory.Inserter, logger *slog.Logger, agentID, store,
	model string) (DriftResult, error) {
	var res DriftResult
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		sc, err := memory.EnterAgentScope(ctx, tx, agentID, "")
		if err != nil {
			return err
		}
		aq := seam.AgentQueries(tx)
		if err := aq.LexemeDriftLock(ctx, store); err != nil {
			return fmt.Errorf("lock the IDF basis of %s: %w", store, err)
		}
		d, err := aq.LexemeDrift(ctx, store)
		if err != nil {
			return fmt.Errorf("measure the IDF drift of %s: %w", store, err)
		}
		res.Docs, res.Drift = d.Docs, d.Drift
		if d.Docs < DriftMinDocs || d.Drift < DriftThreshold {
			return sc.Leave(ctx)
		}
		ids, err := rebase(ctx, aq, store, model)
		if err != nil {
			return err
		}
		res.Reembedded = len(ids)
		if err := sc.Leave(ctx); err != nil {
			return err
		}
		return memory.InsertEmbedTx(ctx, ins, tx, agentID, store, ids)
	})
	if err != nil {
		return res, err
	}
	if res.Reembedded > 0 {
		logger.InfoContext(ctx, "IDF weights drifted: re-embedding the store with today's statistics",
			slog.String("agent_id", agentID), slog.String("store", store), slog.Float64("drift_nats", res.Drift),
			slog.Int64("documents", res.Docs), slog.Int("reembedding", res.Reembedded))
	}
	return res, nil
}

// rebase marks every vector of the store for re-embedding (model names
// the embedder's) and copies today's statistics into the basis, returning
// the documents to embed. The documents are reset first, then the basis
// is written: it reads the counts without locking them, so the counting
// triggers of concurrent writers never wait on it.
func rebase(ctx context.Context, aq *agentdb.Queries, store, model string) ([]uuid.UUID, error) {
	var ids []uuid.UUID
	var err error
	if store == memory.EmbedStoreMemory {
		ids, err = aq.MemoryEmbeddingsReset(ctx, agentdb.MemoryEmbeddingsResetParams{Everything: true, Model: model})
	} else {
		ids, err = aq.KnowledgeEmbeddingsReset(ctx, agentdb.KnowledgeEmbeddingsResetParams{Everything: true, Model: model})
	}
	if err != nil {
		return nil, fmt.Errorf("mark the %s vectors for re-embedding: %w", store, err)
	}
	if err := aq.IDFBasisClear(ctx, store); err != nil {
		return nil, fmt.Errorf("clear the IDF basis of %s: %w", store, err)
	}
	if err := aq.IDFBasisCopy(ctx, store); err != nil {
		return nil, fmt.Errorf("copy the IDF basis of %s: %w", store, err)
	}
	if err := aq.IDFBasisTotalsSet(ctx, store); err != nil {
		return nil, fmt.Errorf("record the IDF basis of %s: %w", store, err)
	}
	return ids, nil
}

// loadLexemes fills in the lexical texts of docs: their lexemes with
// positions and document counts, and the store's document count.
func loadLexemes(ctx context.Context, aq *agentdb.Queries, store string, docs []pendingDoc) error {
	ids := make([]uuid.UUID, len(docs))
	at := map[uuid.UUID]int{}
	for i, d := range docs {
		ids[i], at[d.id] = d.id, i
	}
	n, err := aq.LexemeTotalDocs(ctx, store)
	if err != nil {
		return fmt.Errorf("read the document count of %s: %w", store, err)
	}
	add := func(id uuid.UUID, lexeme string, positions []int32, df int32) {
		i, ok := at[id]
		if !ok {
			return
		}
		docs[i].lex.Docs = n
		docs[i].lex.Terms = append(docs[i].lex.Terms, embed.Term{Lexeme: lexeme, Positions: positions, Docs: int64(df)})
	}
	if store == memory.EmbedStoreMemory {
		rows, err := aq.MemoryEmbeddingLexemes(ctx, ids)
		if err != nil {
			return fmt.Errorf("read the lexemes of the chunks to embed: %w", err)
		}
		for _, r := range rows {
			add(r.ID, r.Lexeme, r.Positions, r.Docs)
		}
		return nil
	}
	rows, err := aq.KnowledgeEmbeddingLexemes(ctx, ids)
	if err != nil {
		return fmt.Errorf("read the lexemes of the knowledge to embed: %w", err)
	}
	for _, r := range rows {
		add(r.ID, r.Lexeme, r.Positions, r.Docs)
	}
	return nil
}
