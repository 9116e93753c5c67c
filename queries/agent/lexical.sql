-- Queries of the offline embedder's IDF weights (daemon/embed,
-- sql/00026_text_ranking.sql): a document's
-- lexemes come from its tsv column, their document frequencies from the
-- store's statistics.

-- name: MemoryEmbeddingLexemes :many
-- MemoryEmbeddingLexemes returns the full-text lexemes, with positions and
-- document counts, of those of the given chunks that still wait for a
-- vector.
SELECT d.id, u.lexeme::text AS lexeme, u.positions::int[] AS positions, coalesce(l.docs, 0)::int AS docs
  FROM memory_documents d
 CROSS JOIN LATERAL unnest(d.tsv) AS u
  LEFT JOIN memory_lexemes l ON l.lexeme = u.lexeme
 WHERE d.id = ANY(@ids::uuid[]) AND d.embedding_state = 'pending'
 ORDER BY d.id, u.lexeme;

-- name: KnowledgeEmbeddingLexemes :many
-- KnowledgeEmbeddingLexemes is MemoryEmbeddingLexemes for knowledge.
SELECT d.id, u.lexeme::text AS lexeme, u.positions::int[] AS positions, coalesce(l.docs, 0)::int AS docs
  FROM knowledge_documents d
 CROSS JOIN LATERAL unnest(d.tsv) AS u
  LEFT JOIN knowledge_lexemes l ON l.lexeme = u.lexeme
 WHERE d.id = ANY(@ids::uuid[]) AND d.embedding_state = 'pending'
 ORDER BY d.id, u.lexeme;

-- name: LexemeTotalDocs :one
-- LexemeTotalDocs is how many documents the store (memory or knowledge)
-- holds, per its statistics.
SELECT coalesce((SELECT docs FROM lexeme_totals WHERE store = @store::text), 0)::bigint AS docs;

-- name: LexicalQueryTerms :many
-- LexicalQueryTerms returns the lexemes of a query text as the documents'
-- tsv holds theirs, with their document counts in the store (memory or
-- knowledge) and the store's document count.
SELECT u.lexeme::text AS lexeme, u.positions::int[] AS positions,
       coalesce(CASE WHEN @store::text = 'knowledge' THEN k.docs ELSE m.docs END, 0)::int AS docs,
       coalesce((SELECT t.docs FROM lexeme_totals t WHERE t.store = @store::text), 0)::bigint AS total
  FROM unnest(to_tsvector('english'::regconfig, @query_text::text)) AS u
  LEFT JOIN memory_lexemes m ON @store::text = 'memory' AND m.lexeme = u.lexeme
  LEFT JOIN knowledge_lexemes k ON @store::text = 'knowledge' AND k.lexeme = u.lexeme
 ORDER BY u.lexeme;

-- name: LexemeDriftLock :exec
-- LexemeDriftLock serialises the drift checks of one store of the agent
-- whose schema is first on search_path, until the transaction ends.
SELECT pg_advisory_xact_lock(hashtextextended('choir.idf_drift:' || current_schema() || ':' || @store::text, 0));

-- name: LexemeDrift :one
-- LexemeDrift measures how far the store's IDF weights have moved since
-- its basis: the mean, weighted by today's document counts, over the
-- store's lexemes, of |idf today - idf at the basis| in nats, with BM25's
-- idf = ln(1 + (N - df + 0.5) / (df + 0.5)). A lexeme absent at the basis
-- counts with df 0 then; a store never rebased with N 0 then.
WITH t AS (
    SELECT coalesce((SELECT docs FROM lexeme_totals WHERE store = @store::text), 0)::float8 AS n,
           coalesce((SELECT docs FROM idf_basis_totals WHERE store = @store::text), 0)::float8 AS nb
), l AS (
    SELECT x.docs, coalesce(b.docs, 0) AS basis
      FROM memory_lexemes x LEFT JOIN idf_basis b ON b.store = 'memory' AND b.lexeme = x.lexeme
     WHERE @store::text = 'memory'
    UNION ALL
    SELECT x.docs, coalesce(b.docs, 0)
      FROM knowledge_lexemes x LEFT JOIN idf_basis b ON b.store = 'knowledge' AND b.lexeme = x.lexeme
     WHERE @store::text = 'knowledge'
)
SELECT t.n::bigint AS docs, t.nb::bigint AS basis_docs,
       coalesce(sum(l.docs * abs(ln(1 + (t.n - l.docs + 0.5) / (l.docs + 0.5))
                                - ln(1 + (t.nb - l.basis + 0.5) / (l.basis + 0.5))))
                / nullif(sum(l.docs), 0), 0)::float8 AS drift
  FROM t LEFT JOIN l ON true
 GROUP BY t.n, t.nb;

-- name: IDFBasisClear :exec
-- IDFBasisClear drops the store's basis before IDFBasisCopy.
DELETE FROM idf_basis WHERE store = @store::text;

-- name: IDFBasisCopy :exec
-- IDFBasisCopy copies today's document counts of the store (memory or
-- knowledge) into its basis. It reads the counts without locking them.
INSERT INTO idf_basis (store, lexeme, docs)
SELECT 'memory', lexeme, docs FROM memory_lexemes WHERE @store::text = 'memory'
UNION ALL
SELECT 'knowledge', lexeme, docs FROM knowledge_lexemes WHERE @store::text = 'knowledge';

-- name: IDFBasisTotalsSet :exec
-- IDFBasisTotalsSet records the store's document count as its basis.
INSERT INTO idf_basis_totals (store, docs, based_at)
VALUES (@store::text, coalesce((SELECT docs FROM lexeme_totals WHERE store = @store::text), 0), now())
ON CONFLICT (store) DO UPDATE SET docs = EXCLUDED.docs, based_at = EXCLUDED.based_at;
