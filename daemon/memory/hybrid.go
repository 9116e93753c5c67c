package memory

import (
	"cmp"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/pgvector/pgvector-go"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/memory/textquery"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/db/agentdb"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/sql/seam"
)

// hit is a row one side of hybrid search found, at its 1-based rank, with
// what the result reports of it: a chunk or a knowledge document.
type hit struct {
	id    uuid.UUID
	at    time.Time // created (chunks) or updated (knowledge): newer first on a tie
	rank  int
	chunk admin.MemoryChunkHit
	doc   admin.MemoryKnowledgeHit
}

// side is what one side of hybrid search returned.
type side struct {
	hits []hit
	err  error
}

// search runs semantic or text search, each side in its own read-only
// transaction (MemorySearchVector and MemorySearchText, or their knowledge
// twins), and fuses them here (fuse). With both a vector and words, and a
// second query slot free (trySlot), the two sides run at once, each on
// its own connection: an idle store then answers in the time of its
// slower side, not of both; a busy one runs them one after the other.
func (s *Store) search(ctx context.Context, sc scope, q *query, vec *pgvector.Vector, res *admin.MemoryQueryResult) error {
	var text, vector side
	if q.text != "" && vec != nil {
		if release, ok := s.trySlot(); ok {
			done := make(chan struct{})
			go func() {
				defer close(done)
				defer release()
				text = s.textSide(ctx, sc, q)
			}()
			vector = s.vectorSide(ctx, sc, q, vec)
			<-done
		} else {
			text, vector = s.textSide(ctx, sc, q), s.vectorSide(ctx, sc, q, vec)
		}
	} else if q.text != "" {
		text = s.textSide(ctx, sc, q)
	} else {
		vector = s.vectorSide(ctx, sc, q, vec)
	}
	if errors.Is(text.err, errNoWords) && vec != nil && q.mode == ModeSemantic {
		// The vector side answers alone; the result says why.
		res.Note, text.err = joinNote(res.Note, noWordsNote), nil
	}
	if err := cmp.Or(text.err, vector.err); err != nil {
		return err
	}
	for _, f := range fuse(vector.hits, text.hits, s.tuning, q.limit) {
		if q.store == StoreSession {
			res.Chunks = append(res.Chunks, f.chunk)
		} else {
			res.Documents = append(res.Documents, f.doc)
		}
	}
	return nil
}

// fuse merges the two sides' rankings by weighted reciprocal rank:
// VectorWeight / (FusionK + vector rank) + TextWeight / (FusionK + text
// rank), over the sides that found the row, best first, newer first on a
// tie, then by id; at most limit rows, each with its score and ranks set.
// When one side found nothing, the other side's order is kept as it is.
func fuse(vector, text []hit, t SearchTuning, limit int) []hit {
	type fused struct {
		hit
		vrank, trank int
		score        float64
	}
	byID := map[uuid.UUID]*fused{}
	var all []*fused
	add := func(h hit, weight float64, vectorSide bool) {
		f := byID[h.id]
		if f == nil {
			f = &fused{hit: h}
			byID[h.id] = f
			all = append(all, f)
		}
		f.score += weight / float64(t.FusionK+h.rank)
		if vectorSide {
			f.vrank = h.rank
		} else {
			f.trank = h.rank
		}
	}
	for _, h := range vector {
		add(h, t.VectorWeight, true)
	}
	for _, h := range text {
		add(h, t.TextWeight, false)
	}
	slices.SortFunc(all, func(a, b *fused) int {
		return cmp.Or(cmp.Compare(b.score, a.score), b.at.Compare(a.at), slices.Compare(a.id[:], b.id[:]))
	})
	out := make([]hit, 0, min(limit, len(all)))
	for _, f := range all[:min(limit, len(all))] {
		h := f.hit
		h.chunk.Score, h.chunk.VectorRank, h.chunk.TextRank = f.score, f.vrank, f.trank
		h.doc.Score, h.doc.VectorRank, h.doc.TextRank = f.score, f.vrank, f.trank
		out = append(out, h)
	}
	return out
}

// enterSearch enters the agent's schema for one side of a search, with the
// settings it needs (MemorySearchScope), and reports the loose words'
// lexemes, their document counts and the required part's size.
func (s *Store) enterSearch(ctx context.Context, tx pgx.Tx, sc scope, q *query, loose, required string) (
	db.MemorySearchScopeRow, error) {
	role := "none"
	if sc.role != "" {
		role = config.SchemaName(sc.role)
	}
	st, err := seam.Queries(tx).MemorySearchScope(ctx, db.MemorySearchScopeParams{
		SearchPath: config.SchemaName(sc.schema) + ", public", Role: role, EfSearch: int32(s.tuning.EFSearch),
		StatementTimeoutMs: s.statementTimeoutMS(), QueryText: loose, QueryRequired: required,
		StatsSchema: config.SchemaName(sc.schema), StatsStore: statsStore(q.store)})
	if err != nil {
		return st, fmt.Errorf("enter memory schema of agent %s: %w", sc.schema, err)
	}
	return st, nil
}

// textSide runs the full-text side of a search in its own read-only
// transaction: errNoWords when the query has no searchable words.
func (s *Store) textSide(ctx context.Context, sc scope, q *query) side {
	required, phrases, loose := textquery.Split(q.text)
	var out side
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		st, err := s.enterSearch(ctx, tx, sc, q, loose, required)
		if err != nil {
			return err
		}
		if st.RequiredNodes == 0 && len(st.Lexemes) == 0 {
			return errNoWords
		}
		words := s.wordStats(st.Lexemes, st.WordDocs)
		p := textParams{terms: textquery.OrQuery(st.Lexemes), words: words, recent: s.tuning.TextRecent}
		if st.RequiredNodes > 0 {
			p.required, p.phrases = required, phrases
		}
		if words.Partial {
			p.recent = s.tuning.TextRecentWide
		}
		out.hits, err = s.textHits(ctx, seam.AgentQueries(tx), q, p)
		return err
	})
	out.err = s.translate(err, sc)
	return out
}

// textParams are the full-text side's query: the required part and
// phrases (see textquery.Split), the loose words ORed (terms) and sorted by
// rarity (words), and how many newest documents to check.
type textParams struct {
	required, phrases, terms string
	words                    textquery.Terms
	recent                   int
}

// textHits runs the store's full-text query.
func (s *Store) textHits(ctx context.Context, aq *agentdb.Queries, q *query, p textParams) ([]hit, error) {
	t := s.tuning
	var hits []hit
	if q.store == StoreSession {
		rows, err := aq.MemorySearchText(ctx, agentdb.MemorySearchTextParams{QueryText: p.required, QueryTerms: p.terms,
			QueryPhrases: p.phrases, FindQueries: p.words.Find, Rare: p.words.Rare, Uncommon: p.words.Uncommon,
			Common: p.words.Common, Tiers: q.tiers, SessionID: q.sessionID, Candidates: int32(t.Candidates),
			PerTerm: int32(t.PerTerm), TextRecent: int32(p.recent)})
		if err != nil {
			return nil, fmt.Errorf("search session memory: %w", err)
		}
		for _, r := range rows {
			hits = append(hits, chunkRank(agentdb.MemorySearchVectorRow(r)))
		}
		return hits, nil
	}
	rows, err := aq.KnowledgeSearchText(ctx, agentdb.KnowledgeSearchTextParams{QueryText: p.required,
		QueryTerms: p.terms, QueryPhrases: p.phrases, FindQueries: p.words.Find, Rare: p.words.Rare,
		Uncommon: p.words.Uncommon, Common: p.words.Common, Candidates: int32(t.Candidates),
		PerTerm: int32(t.PerTerm), TextRecent: int32(p.recent)})
	if err != nil {
		return nil, fmt.Errorf("search knowledge: %w", err)
	}
	for _, r := range rows {
		hits = append(hits, docRank(agentdb.KnowledgeSearchVectorRow(r)))
	}
	return hits, nil
}

// vectorSide runs the vector side of a search in its own read-only
// transaction.
func (s *Store) vectorSide(ctx context.Context, sc scope, q *query, vec *pgvector.Vector) side {
	var out side
	err := pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		if _, err := s.enterSearch(ctx, tx, sc, q, "", ""); err != nil {
			return err
		}
		aq := seam.AgentQueries(tx)
		n := int32(s.tuning.Candidates)
		if q.store == StoreSession {
			rows, err := aq.MemorySearchVector(ctx, agentdb.MemorySearchVectorParams{QueryVector: *vec,
				Tiers: q.tiers, SessionID: q.sessionID, Candidates: n})
			if err != nil {
				return fmt.Errorf("search session memory by vector: %w", err)
			}
			for _, r := range rows {
				out.hits = append(out.hits, chunkRank(r))
			}
			return nil
		}
		rows, err := aq.KnowledgeSearchVector(ctx, agentdb.KnowledgeSearchVectorParams{QueryVector: *vec, Candidates: n})
		if err != nil {
			return fmt.Errorf("search knowledge by vector: %w", err)
		}
		for _, r := range rows {
			out.hits = append(out.hits, docRank(r))
		}
		return nil
	})
	out.err = s.translate(err, sc)
	return out
}

// chunkRank is a session-memory row of either side as a hit.
func chunkRank(r agentdb.MemorySearchVectorRow) hit {
	return hit{id: r.ID, at: r.CreatedAt, rank: int(r.Rank), chunk: admin.MemoryChunkHit{SessionID: r.SessionID,
		ChunkIndex: int(r.ChunkIndex), Tier: r.Tier, Text: r.Text, Metadata: r.Metadata, StartedAt: r.StartedAt,
		EndedAt: r.EndedAt, DocumentID: r.ID, Embedding: r.EmbeddingState}}
}

// docRank is a knowledge row of either side as a hit.
func docRank(r agentdb.KnowledgeSearchVectorRow) hit {
	return hit{id: r.ID, at: r.UpdatedAt, rank: int(r.Rank), doc: admin.MemoryKnowledgeHit{ID: r.ID, Key: r.Key,
		Version: int(r.Version), Text: r.Text, Metadata: r.Metadata, ContentHash: hex.EncodeToString(r.ContentHash),
		UpdatedAt: r.UpdatedAt, Embedding: r.EmbeddingState}}
}
