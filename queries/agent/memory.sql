-- Session memory (tiers 2 and 3) of one agent. Every query here runs with
-- the agent's schema first on search_path (see sqlc.yaml).

-- name: MemorySearchText :many
-- MemorySearchText is the full-text side of hybrid search over session
-- memory: its @candidates best matches, best first, with their 1-based
-- rank. The store runs it beside MemorySearchVector, each on its own
-- connection, and fuses the two (fuse in daemon/memory).
--
-- It matches @query_text read as web search (its quoted phrases and
-- -words, all required) AND @query_terms (the question's other words,
-- ORed; see splitText in daemon/memory) or its phrases (@query_phrases).
-- It ranks by ts_rank_cd, cover density: how many of the query's words
-- and phrases the chunk holds, how often, and how close together, divided
-- by 1 + the log of its length; each query word weighs by its rarity in
-- the agent's exact statistics (memory_lexemes, lexeme_totals; see
-- rankTerms in daemon/memory), in four classes: @rare 1, @uncommon 0.85,
-- @common 0.7, the rest 0.5. (bench/recall chose these on its tune half.
-- BM25's own inverse document frequency, ln(1 + (N - df + 0.5) / (df +
-- 0.5)), weighs rarity much harder, and there lost 0.03 to 0.04 of recall
-- at 10 against these classes, as did dropping cover density for a sum
-- over words; bench/recall/RESULTS.txt.) Of chunks that score the same,
-- the newer ranks first: a later statement of a fact supersedes an
-- earlier one.
--
-- The matches to rank come from the RUM index, which returns a word's
-- best matches in rank order without reading every match (a GIN index
-- would hand back every match to rank, 60 ms for a word in half the
-- chunks):
--   * for each word of @find_queries (the rarest, as many as stay within
--     a budget of matches in all: see rankTerms), its @per_term best
--     chunks; commoner words are too costly to find matches by, and tell
--     matches apart little, so they only rank;
--   * the @per_term best matches of the required phrases and -words;
--   * the newest matches, at most @candidates, among the @text_recent
--     newest chunks: recent memory is never left out, and words too
--     common to find matches by still find the newest (the store widens
--     @text_recent when a word is left out of @find_queries).
WITH q AS (
    SELECT websearch_to_tsquery('english', @query_text::text) AS req,
           websearch_to_tsquery('english', @query_text::text)
           && (CAST(@query_terms::text AS tsquery) || websearch_to_tsquery('english', @query_phrases::text)) AS tsq
), found_words AS (
    SELECT f.id
      FROM unnest(@find_queries::text[]) AS t(query)
     CROSS JOIN q
     CROSS JOIN LATERAL (
           SELECT d.id
             FROM memory_documents d
            WHERE d.tsv @@ (q.req && CAST(t.query AS tsquery))
              AND d.tier = ANY(@tiers::text[])
              AND (sqlc.narg('session_id')::uuid IS NULL OR d.session_id = sqlc.narg('session_id')::uuid)
            ORDER BY d.tsv <=> CAST(t.query AS tsquery)
            LIMIT @per_term::int) f
), found_required AS (
    SELECT d.id
      FROM memory_documents d
     CROSS JOIN q
     WHERE @query_text::text <> ''
       AND d.tsv @@ q.tsq
       AND d.tier = ANY(@tiers::text[])
       AND (sqlc.narg('session_id')::uuid IS NULL OR d.session_id = sqlc.narg('session_id')::uuid)
     ORDER BY d.tsv <=> q.req
     LIMIT @per_term::int
), found_recent AS (
    SELECT r.id
      FROM (SELECT d.id, d.tsv
              FROM memory_documents d
             WHERE (@query_text::text <> '' OR @query_terms::text <> '')
               AND d.tier = ANY(@tiers::text[])
               AND (sqlc.narg('session_id')::uuid IS NULL OR d.session_id = sqlc.narg('session_id')::uuid)
             ORDER BY d.created_at DESC, d.id
             LIMIT @text_recent::int) r
     CROSS JOIN q
     WHERE r.tsv @@ q.tsq
     LIMIT @candidates::int
), found AS (
    SELECT id FROM found_words
    UNION
    SELECT id FROM found_required
    UNION
    SELECT id FROM found_recent
), text_hits AS (
    SELECT p.id, row_number() OVER (ORDER BY p.score DESC, p.at DESC, p.id) AS rank
      FROM (SELECT d.id, d.created_at AS at,
                   ts_rank_cd('{0.5, 0.7, 0.85, 1}'::float4[],
                              setweight(setweight(setweight(d.tsv, 'A', @rare::text[]), 'B', @uncommon::text[]),
                                        'C', @common::text[]),
                              q.tsq, 1) AS score
              FROM found f
              JOIN memory_documents d ON d.id = f.id
             CROSS JOIN q) p
     ORDER BY rank
     LIMIT @candidates::int
)
SELECT d.id, d.session_id, d.tier, d.chunk_index, d.text, d.metadata, d.started_at, d.ended_at,
       d.created_at, d.embedding_state, h.rank::int AS rank
  FROM text_hits h
  JOIN memory_documents d ON d.id = h.id
 ORDER BY h.rank;

-- name: MemorySearchVector :many
-- MemorySearchVector is the vector side of hybrid search over session
-- memory: the @candidates nearest chunks by cosine distance, nearest
-- first, with their 1-based rank (HNSW, continued by pgvector's iterative
-- scans until enough pass the filters).
WITH vector_hits AS (
    SELECT v.id, row_number() OVER (ORDER BY v.distance, v.id) AS rank
      FROM (SELECT d.id, e.embedding <=> @query_vector::vector AS distance
              FROM memory_embeddings e
              JOIN memory_documents d ON d.id = e.document_id
             WHERE d.tier = ANY(@tiers::text[])
               AND (sqlc.narg('session_id')::uuid IS NULL OR d.session_id = sqlc.narg('session_id')::uuid)
             ORDER BY distance
             LIMIT @candidates::int) v
)
SELECT d.id, d.session_id, d.tier, d.chunk_index, d.text, d.metadata, d.started_at, d.ended_at,
       d.created_at, d.embedding_state, h.rank::int AS rank
  FROM vector_hits h
  JOIN memory_documents d ON d.id = h.id
 ORDER BY h.rank;

-- name: MemoryChunksByEventHash :many
-- MemoryChunksByEventHash finds the chunks holding events whose chain hash
-- lies in [@hash_from, @hash_to) (a hex prefix becomes such a range; a NULL
-- upper bound means no bound).
SELECT r.hash, r.rev, d.id, d.session_id, d.tier, d.chunk_index, d.text, d.metadata,
       d.started_at, d.ended_at, d.created_at, d.embedding_state
  FROM memory_event_refs r
  JOIN memory_documents d ON d.id = r.document_id
 WHERE r.hash >= @hash_from::bytea
   AND (sqlc.narg('hash_to')::bytea IS NULL OR r.hash < sqlc.narg('hash_to')::bytea)
 ORDER BY r.hash, r.session_id
 LIMIT @max_results::int;

-- name: MemoryChunksInRange :many
-- MemoryChunksInRange lists chunks whose events started in [@from, @to),
-- oldest first.
SELECT d.id, d.session_id, d.tier, d.chunk_index, d.text, d.metadata, d.started_at, d.ended_at,
       d.created_at, d.embedding_state
  FROM memory_documents d
 WHERE d.started_at >= @from_time::timestamptz
   AND d.started_at < @to_time::timestamptz
   AND d.tier = ANY(@tiers::text[])
   AND (sqlc.narg('session_id')::uuid IS NULL OR d.session_id = sqlc.narg('session_id')::uuid)
 ORDER BY d.started_at, d.session_id, d.tier, d.chunk_index
 LIMIT @max_results::int OFFSET @skip::int;

-- name: MemorySessionChunks :many
-- MemorySessionChunks lists one session's chunks of the given tiers in
-- order: the session_detail drill-down without a query.
SELECT d.id, d.session_id, d.tier, d.chunk_index, d.text, d.metadata, d.started_at, d.ended_at,
       d.created_at, d.embedding_state
  FROM memory_documents d
 WHERE d.session_id = @session_id AND d.tier = ANY(@tiers::text[])
 ORDER BY d.tier, d.chunk_index
 LIMIT @max_results::int OFFSET @skip::int;

-- name: MemorySessionChunksSearch :many
-- MemorySessionChunksSearch is full-text search within one session's
-- chunks of the given tiers: the session_detail drill-down with a query.
SELECT d.id, d.session_id, d.tier, d.chunk_index, d.text, d.metadata, d.started_at, d.ended_at,
       d.created_at, d.embedding_state,
       ts_rank_cd(d.tsv, websearch_to_tsquery('english', @query_text::text), 1)::float8 AS score
  FROM memory_documents d
 WHERE d.session_id = @session_id AND d.tier = ANY(@tiers::text[])
   AND d.tsv @@ websearch_to_tsquery('english', @query_text::text)
 ORDER BY score DESC, d.chunk_index
 LIMIT @max_results::int;

-- name: MemoryDocumentGet :one
SELECT d.id, d.session_id, d.tier, d.chunk_index, d.text, d.metadata, d.started_at, d.ended_at,
       d.created_at, d.embedding_state, d.embedding_error, d.embedding_failed_at,
       e.model AS embedding_model
  FROM memory_documents d
  LEFT JOIN memory_embeddings e ON e.document_id = d.id
 WHERE d.id = @id;

-- name: MemorySessionGet :one
SELECT * FROM memory_sessions WHERE session_id = @session_id;

-- name: MemorySessionList :many
SELECT * FROM memory_sessions ORDER BY ended_at DESC, session_id LIMIT @max_results::int;

-- name: MemorySessionRecord :one
-- MemorySessionRecord claims a session for chunking. It returns no row
-- when the session is already in memory, which makes chunking idempotent.
INSERT INTO memory_sessions (session_id, started_at, ended_at, status, event_count, chunk_count)
VALUES (@session_id, @started_at, @ended_at, @status, @event_count, @chunk_count)
ON CONFLICT (session_id) DO NOTHING
RETURNING session_id;

-- name: MemoryChunksInsert :copyfrom
INSERT INTO memory_documents (id, session_id, tier, chunk_index, text, metadata, started_at, ended_at, embedding_state)
VALUES (@id, @session_id, @tier, @chunk_index, @text, @metadata, @started_at, @ended_at, @embedding_state);

-- name: MemoryEventRefsInsert :copyfrom
INSERT INTO memory_event_refs (hash, session_id, rev, document_id)
VALUES (@hash, @session_id, @rev, @document_id);

-- name: MemorySessionsBeyondMidTerm :many
-- MemorySessionsBeyondMidTerm returns the mid-term sessions beyond the
-- @keep most recently ended, oldest first: the ones to promote.
SELECT * FROM (
    SELECT * FROM memory_sessions
     WHERE tier = 'mid_term'
     ORDER BY ended_at DESC, session_id DESC
    OFFSET @keep::int
) s
ORDER BY s.ended_at, s.session_id
LIMIT @max_results::int;

-- name: MemorySessionPromote :one
-- MemorySessionPromote moves a session to long-term memory once: it returns
-- no row when the session is not (or no longer) mid-term.
UPDATE memory_sessions
   SET tier = 'long_term', promoted_at = now(), summary_chunks = @summary_chunks
 WHERE session_id = @session_id AND tier = 'mid_term'
RETURNING session_id;

-- name: MemoryEmbeddingsDropForSession :execrows
-- MemoryEmbeddingsDropForSession removes the vectors of a session's
-- mid-term event chunks, before they become long_term_detail.
DELETE FROM memory_embeddings e
 USING memory_documents d
 WHERE d.id = e.document_id AND d.session_id = @session_id AND d.tier = 'mid_term';

-- name: MemoryChunksDemote :execrows
-- MemoryChunksDemote makes a session's mid-term event chunks
-- long_term_detail: kept, full-text searchable through session_detail,
-- without vectors.
UPDATE memory_documents
   SET tier = 'long_term_detail', embedding_state = 'none', embedding_error = '', embedding_failed_at = NULL
 WHERE session_id = @session_id AND tier = 'mid_term';

-- name: MemoryChunksDeleteForSession :execrows
-- MemoryChunksDeleteForSession removes a session's chunks, and with them
-- their vectors and event references; its events stay in choir_control.
DELETE FROM memory_documents WHERE session_id = @session_id;

-- name: MemorySessionForget :execrows
DELETE FROM memory_sessions WHERE session_id = @session_id;

-- name: MemoryEmbeddingPending :many
-- MemoryEmbeddingPending returns those of the given chunks that still wait
-- for a vector.
SELECT id, text FROM memory_documents
 WHERE id = ANY(@ids::uuid[]) AND embedding_state = 'pending'
 ORDER BY id;

-- name: MemoryEmbeddingsStore :many
-- MemoryEmbeddingsStore stores vectors for chunks still pending and marks
-- them embedded; a chunk embedded meanwhile (by a duplicate job) is left
-- alone, so no chunk is ever stored twice.
WITH input AS (
    -- Two set-returning functions in one select list advance together.
    SELECT unnest(@ids::uuid[]) AS id, unnest(@embeddings::vector[]) AS embedding
), done AS (
    UPDATE memory_documents d
       SET embedding_state = 'embedded', embedding_error = '', embedding_failed_at = NULL
      FROM input i
     WHERE d.id = i.id AND d.embedding_state = 'pending'
    RETURNING d.id
)
INSERT INTO memory_embeddings (document_id, embedding, model)
SELECT i.id, i.embedding, @model::text
  FROM input i
  JOIN done ON done.id = i.id
ON CONFLICT (document_id) DO UPDATE
   SET embedding = EXCLUDED.embedding, model = EXCLUDED.model, created_at = now()
RETURNING document_id;

-- name: MemoryEmbeddingsFail :execrows
-- MemoryEmbeddingsFail records that the given chunks could not be embedded:
-- they stay without a vector, found by full-text search only, until
-- choirctl memory reembed retries them.
UPDATE memory_documents
   SET embedding_state = 'failed', embedding_error = @error_message::text, embedding_failed_at = now()
 WHERE id = ANY(@ids::uuid[]) AND embedding_state = 'pending';

-- name: MemoryEmbeddingsReset :many
-- MemoryEmbeddingsReset marks chunks for (re-)embedding and drops their
-- vectors: with @everything all chunks that take a vector, else those
-- pending, failed, or embedded by another model than @model.
WITH target AS (
    SELECT d.id
      FROM memory_documents d
      LEFT JOIN memory_embeddings e ON e.document_id = d.id
     WHERE d.embedding_state <> 'none'
       AND (@everything::bool
            OR d.embedding_state IN ('pending', 'failed')
            OR e.model IS DISTINCT FROM @model::text)
), dropped AS (
    DELETE FROM memory_embeddings e USING target t WHERE e.document_id = t.id
)
UPDATE memory_documents d
   SET embedding_state = 'pending', embedding_error = '', embedding_failed_at = NULL
  FROM target t
 WHERE d.id = t.id
RETURNING d.id;

-- name: MemoryEmbeddingBacklog :one
-- MemoryEmbeddingBacklog counts chunks waiting for a vector, chunks whose
-- embedding failed for good, and vectors made by another model than
-- @model, with the latest failure.
SELECT c.pending, c.failed, c.stale, coalesce(l.embedding_error, '')::text AS last_error, l.embedding_failed_at AS last_error_at
  FROM (SELECT (SELECT count(*) FROM memory_documents WHERE embedding_state = 'pending')::int AS pending,
               (SELECT count(*) FROM memory_documents WHERE embedding_state = 'failed')::int AS failed,
               (SELECT count(*) FROM memory_embeddings WHERE model <> @model::text)::int AS stale) c
  LEFT JOIN LATERAL (
        SELECT d.embedding_error, d.embedding_failed_at FROM memory_documents d
         WHERE d.embedding_state = 'failed'
         ORDER BY d.embedding_failed_at DESC LIMIT 1) l ON true;
