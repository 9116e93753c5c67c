package memory

import (
	"context"
	"errors"
	"fmt"
	"github.com/choirhq/choir/rpc/admin"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/db/agentdb"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

func session(r agentdb.MemorySession) admin.MemorySession {
	return admin.MemorySession{SessionID: r.SessionID, Tier: r.Tier, StartedAt: r.StartedAt, EndedAt: r.EndedAt, Status: r.Status,
		EventCount: int(r.EventCount), ChunkCount: int(r.ChunkCount), SummaryChunks: int(r.SummaryChunks),
		ChunkedAt: r.ChunkedAt, PromotedAt: r.PromotedAt}
}

// Sessions lists the sessions in an agent's memory, newest first.
func (s *Store) Sessions(ctx context.Context, agentID string, limit int) ([]admin.MemorySession, error) {
	if _, err := s.dimensions(ctx, agentID); err != nil {
		return nil, err
	}
	var out []admin.MemorySession
	err := s.inScope(ctx, scope{schema: agentID}, true, func(tx pgx.Tx, aq *agentdb.Queries) error {
		rows, err := aq.MemorySessionList(ctx, int32(limit))
		if err != nil {
			return fmt.Errorf("list sessions: %w", err)
		}
		for _, r := range rows {
			out = append(out, session(r))
		}
		return nil
	}, nil)
	return out, err
}

// SessionGet returns a session in an agent's memory with all its chunks
// (every tier), in order.
func (s *Store) SessionGet(ctx context.Context, agentID string, sessionID uuid.UUID) (*admin.MemorySession, error) {
	if _, err := s.dimensions(ctx, agentID); err != nil {
		return nil, err
	}
	var out *admin.MemorySession
	err := s.inScope(ctx, scope{schema: agentID}, true, func(tx pgx.Tx, aq *agentdb.Queries) error {
		r, err := aq.MemorySessionGet(ctx, sessionID)
		if errors.Is(err, choirsql.ErrNotFound) {
			return fmt.Errorf("%w: session %s is not in the memory of agent %s", choirsql.ErrNotFound, sessionID, agentID)
		}
		if err != nil {
			return fmt.Errorf("read session %s: %w", sessionID, err)
		}
		sess := session(r)
		rows, err := aq.MemorySessionChunks(ctx, agentdb.MemorySessionChunksParams{SessionID: sessionID,
			Tiers: []string{TierMidTerm, TierLongTermSummary, TierLongTermDetail}, MaxResults: 100000})
		if err != nil {
			return fmt.Errorf("read chunks of session %s: %w", sessionID, err)
		}
		for _, c := range rows {
			sess.Chunks = append(sess.Chunks, chunkHit(c))
		}
		out = &sess
		return nil
	}, nil)
	return out, err
}

// ChunkGet returns one chunk of an agent's session memory by document id.
func (s *Store) ChunkGet(ctx context.Context, agentID string, id uuid.UUID) (*admin.MemoryChunk, error) {
	if _, err := s.dimensions(ctx, agentID); err != nil {
		return nil, err
	}
	var out *admin.MemoryChunk
	err := s.inScope(ctx, scope{schema: agentID}, true, func(tx pgx.Tx, aq *agentdb.Queries) error {
		r, err := aq.MemoryDocumentGet(ctx, id)
		if errors.Is(err, choirsql.ErrNotFound) {
			return fmt.Errorf("%w: agent %s has no memory chunk %s", choirsql.ErrNotFound, agentID, id)
		}
		if err != nil {
			return fmt.Errorf("read chunk %s: %w", id, err)
		}
		out = &admin.MemoryChunk{MemoryChunkHit: admin.MemoryChunkHit{SessionID: r.SessionID, ChunkIndex: int(r.ChunkIndex), Tier: r.Tier, Text: r.Text,
			Metadata: r.Metadata, StartedAt: r.StartedAt, EndedAt: r.EndedAt, DocumentID: r.ID, Embedding: r.EmbeddingState},
			CreatedAt: r.CreatedAt, EmbeddingError: r.EmbeddingError}
		if r.EmbeddingModel != nil {
			out.EmbeddingModel = *r.EmbeddingModel
		}
		return nil
	}, nil)
	return out, err
}

// SessionDelete removes a session from an agent's memory (its chunks,
// vectors and event references); the session's events stay in
// choir_control.session_events. It returns the number of chunks removed.
func (s *Store) SessionDelete(ctx context.Context, agentID string, sessionID uuid.UUID) (int64, error) {
	if _, err := s.dimensions(ctx, agentID); err != nil {
		return 0, err
	}
	var n int64
	err := s.inScope(ctx, scope{schema: agentID}, false, func(tx pgx.Tx, aq *agentdb.Queries) error {
		var err error
		if n, err = aq.MemoryChunksDeleteForSession(ctx, sessionID); err != nil {
			return fmt.Errorf("delete chunks of session %s: %w", sessionID, err)
		}
		forgotten, err := aq.MemorySessionForget(ctx, sessionID)
		if err != nil {
			return fmt.Errorf("delete session %s: %w", sessionID, err)
		}
		if n == 0 && forgotten == 0 {
			return fmt.Errorf("%w: session %s is not in the memory of agent %s", choirsql.ErrNotFound, sessionID, agentID)
		}
		return nil
	}, nil)
	return n, err
}

// ReembedOptions say what to re-embed.
type ReembedOptions struct {
	// AgentID limits the run to one agent; empty means every agent.
	AgentID string
	// All re-embeds every document; otherwise only those pending, failed,
	// or embedded by another model than the embedder's.
	All bool
}

// Reembed re-embeds agents' memory with the store's embedder: it is the
// re-embedding migration of a model or dimensions change. In one
// transaction per agent it resizes the vector columns when the embedder's
// dimensions differ from the schema's (dropping every vector), marks the
// documents to re-embed pending (dropping their vectors: vectors of two
// models are not comparable) and enqueues their embedding jobs, which
// choird runs. Until then those documents are found by full text.
func (s *Store) Reembed(ctx context.Context, opts ReembedOptions) ([]admin.MemoryReembedResult, error) {
	if s.embedder == nil || s.inserter == nil {
		return nil, errors.New("re-embedding needs the store's embedder and job inserter")
	}
	schemas, err := seam.Queries(s.pool).MemoryAgentSchemaList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list agent schemas: %w", err)
	}
	var out []admin.MemoryReembedResult
	found := false
	for _, a := range schemas {
		if opts.AgentID != "" && a.AgentID != opts.AgentID {
			continue
		}
		found = true
		r := admin.MemoryReembedResult{AgentID: a.AgentID, FromDimensions: int(a.Dimensions), Dimensions: s.embedder.Dimensions()}
		err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
			changed, err := seam.Queries(tx).MemoryAgentDimensionsChange(ctx, db.MemoryAgentDimensionsChangeParams{
				AgentID: a.AgentID, Dimensions: int32(r.Dimensions)})
			if err != nil {
				return fmt.Errorf("resize vectors of agent %s: %w", a.AgentID, err)
			}
			r.Resized = changed
			sc, err := EnterAgentScope(ctx, tx, a.AgentID, "")
			if err != nil {
				return err
			}
			aq := seam.AgentQueries(tx)
			chunks, err := aq.MemoryEmbeddingsReset(ctx, agentdb.MemoryEmbeddingsResetParams{Everything: opts.All,
				Model: s.embedder.Model()})
			if err != nil {
				return fmt.Errorf("reset chunk vectors of agent %s: %w", a.AgentID, err)
			}
			docs, err := aq.KnowledgeEmbeddingsReset(ctx, agentdb.KnowledgeEmbeddingsResetParams{Everything: opts.All,
				Model: s.embedder.Model()})
			if err != nil {
				return fmt.Errorf("reset knowledge vectors of agent %s: %w", a.AgentID, err)
			}
			if err := sc.Leave(ctx); err != nil {
				return err
			}
			r.Chunks, r.Knowledge = len(chunks), len(docs)
			r.Jobs = len(EmbedJobs(a.AgentID, EmbedStoreMemory, chunks)) +
				len(EmbedJobs(a.AgentID, EmbedStoreKnowledge, docs))
			if err := InsertEmbedTx(ctx, s.inserter, tx, a.AgentID, EmbedStoreMemory, chunks); err != nil {
				return err
			}
			return InsertEmbedTx(ctx, s.inserter, tx, a.AgentID, EmbedStoreKnowledge, docs)
		})
		if err != nil {
			return out, err
		}
		s.forgetDimensions(a.AgentID)
		out = append(out, r)
	}
	if opts.AgentID != "" && !found {
		return nil, fmt.Errorf("%w %s: it has no memory schema", ErrUnknownAgent, opts.AgentID)
	}
	return out, nil
}

// Status reports the embedding provider and, per agent, the documents
// waiting for vectors and the last embedding failure.
func (s *Store) Status(ctx context.Context) (*admin.MemoryReport, error) {
	st := &admin.MemoryReport{Agents: []admin.MemoryAgentReport{}}
	model := ""
	if s.embedder != nil {
		es := s.embedder.Status()
		st.Embedding = &es
		model = s.embedder.Model()
	}
	schemas, err := seam.Queries(s.pool).MemoryAgentSchemaList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list agent schemas: %w", err)
	}
	for _, a := range schemas {
		as := admin.MemoryAgentReport{AgentID: a.AgentID, Dimensions: int(a.Dimensions)}
		err := s.inScope(ctx, scope{schema: a.AgentID}, true, func(tx pgx.Tx, aq *agentdb.Queries) error {
			m, err := aq.MemoryEmbeddingBacklog(ctx, model)
			if err != nil {
				return fmt.Errorf("count chunks of agent %s: %w", a.AgentID, err)
			}
			k, err := aq.KnowledgeEmbeddingBacklog(ctx, model)
			if err != nil {
				return fmt.Errorf("count knowledge of agent %s: %w", a.AgentID, err)
			}
			as.MemoryPending, as.MemoryFailed, as.KnowledgePending, as.KnowledgeFailed = int(m.Pending), int(m.Failed),
				int(k.Pending), int(k.Failed)
			if model != "" {
				as.Stale = int(m.Stale + k.Stale)
			}
			if s.lexical() != nil {
				if as.MemoryDrift, as.KnowledgeDrift, err = lexicalDrift(ctx, aq); err != nil {
					return err
				}
			}
			for _, e := range []struct {
				msg string
				at  *time.Time
			}{{m.LastError, m.LastErrorAt}, {k.LastError, k.LastErrorAt}} {
				if e.at != nil && (as.LastErrorAt == nil || e.at.After(*as.LastErrorAt)) {
					as.LastError, as.LastErrorAt = e.msg, e.at
				}
			}
			return nil
		}, nil)
		if err != nil {
			return nil, err
		}
		st.Pending += as.MemoryPending + as.KnowledgePending
		st.Failed += as.MemoryFailed + as.KnowledgeFailed
		st.Stale += as.Stale
		if as.LastErrorAt != nil && (st.LastErrorAt == nil || as.LastErrorAt.After(*st.LastErrorAt)) {
			st.LastError, st.LastErrorAt = as.LastError, as.LastErrorAt
		}
		st.Agents = append(st.Agents, as)
	}
	return st, nil
}
