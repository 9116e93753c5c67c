-- Knowledge (tier 4) of one agent. Every query here runs with the agent's
-- schema first on search_path (see sqlc.yaml).

-- name: KnowledgeSearchText :many
-- KnowledgeSearchText is MemorySearchText's twin for knowledge: the same
-- full-text side, found through the RUM index word by word and ranked by
-- the same rarity-weighted cover density over knowledge's own statistics
-- (knowledge_lexemes), with the most recently updated documents added.
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
             FROM knowledge_documents d
            WHERE d.tsv @@ (q.req && CAST(t.query AS tsquery))
            ORDER BY d.tsv <=> CAST(t.query AS tsquery)
            LIMIT @per_term::int) f
), found_required AS (
    SELECT d.id
      FROM knowledge_documents d
     CROSS JOIN q
     WHERE @query_text::text <> ''
       AND d.tsv @@ q.tsq
     ORDER BY d.tsv <=> q.req
     LIMIT @per_term::int
), found_recent AS (
    SELECT r.id
      FROM (SELECT d.id, d.tsv
              FROM knowledge_documents d
             WHERE (@query_text::text <> '' OR @query_terms::text <> '')
             ORDER BY d.updated_at DESC, d.id
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
      FROM (SELECT d.id, d.updated_at AS at,
                   ts_rank_cd('{0.5, 0.7, 0.85, 1}'::float4[],
                              setweight(setweight(setweight(d.tsv, 'A', @rare::text[]), 'B', @uncommon::text[]),
                                        'C', @common::text[]),
                              q.tsq, 1) AS score
              FROM found f
              JOIN knowledge_documents d ON d.id = f.id
             CROSS JOIN q) p
     ORDER BY rank
     LIMIT @candidates::int
)
SELECT d.id, d.key, d.text, d.metadata, d.version, d.content_hash, d.created_at, d.updated_at,
       d.embedding_state, h.rank::int AS rank
  FROM text_hits h
  JOIN knowledge_documents d ON d.id = h.id
 ORDER BY h.rank;

-- name: KnowledgeSearchVector :many
-- KnowledgeSearchVector is MemorySearchVector's twin for knowledge.
WITH vector_hits AS (
    SELECT v.id, row_number() OVER (ORDER BY v.distance, v.id) AS rank
      FROM (SELECT e.document_id AS id, e.embedding <=> @query_vector::vector AS distance
              FROM knowledge_embeddings e
             ORDER BY distance
             LIMIT @candidates::int) v
)
SELECT d.id, d.key, d.text, d.metadata, d.version, d.content_hash, d.created_at, d.updated_at,
       d.embedding_state, h.rank::int AS rank
  FROM vector_hits h
  JOIN knowledge_documents d ON d.id = h.id
 ORDER BY h.rank;

-- name: KnowledgeVersionsByHash :many
-- KnowledgeVersionsByHash finds document versions whose content hash lies
-- in [@hash_from, @hash_to) (a hex prefix as a range), newest first, with
-- the document's current version (NULL once deleted).
SELECT v.document_id, v.version, v.op, v.key, v.text, v.metadata, v.content_hash, v.actor, v.created_at,
       d.version AS current_version
  FROM knowledge_versions v
  LEFT JOIN knowledge_documents d ON d.id = v.document_id
 WHERE v.content_hash >= @hash_from::bytea
   AND (sqlc.narg('hash_to')::bytea IS NULL OR v.content_hash < sqlc.narg('hash_to')::bytea)
 ORDER BY v.created_at DESC, v.document_id, v.version DESC
 LIMIT @max_results::int;

-- name: KnowledgeInRange :many
-- KnowledgeInRange lists documents last updated in [@from, @to) whose key
-- starts with @key_prefix (empty: any document, keyed or not), newest
-- first.
SELECT d.id, d.key, d.text, d.metadata, d.version, d.content_hash, d.created_at, d.updated_at,
       d.embedding_state
  FROM knowledge_documents d
 WHERE d.updated_at >= @from_time::timestamptz
   AND d.updated_at < @to_time::timestamptz
   AND (@key_prefix::text = '' OR starts_with(d.key, @key_prefix::text))
 ORDER BY d.updated_at DESC, d.id
 LIMIT @max_results::int OFFSET @skip::int;

-- The queries returning a document name the same columns in the same order
-- (all but tsv), so their row types convert into one another.

-- name: KnowledgeGetByID :one
SELECT id, key, text, metadata, version, content_hash, created_at, updated_at, embedding_state, embedding_error,
       embedding_failed_at
  FROM knowledge_documents WHERE id = @id;

-- name: KnowledgeGetByKey :one
SELECT id, key, text, metadata, version, content_hash, created_at, updated_at, embedding_state, embedding_error,
       embedding_failed_at
  FROM knowledge_documents WHERE key = @key;

-- name: KnowledgeLockByID :one
SELECT id, key, text, metadata, version, content_hash, created_at, updated_at, embedding_state, embedding_error,
       embedding_failed_at
  FROM knowledge_documents WHERE id = @id FOR UPDATE;

-- name: KnowledgeLockByKey :one
SELECT id, key, text, metadata, version, content_hash, created_at, updated_at, embedding_state, embedding_error,
       embedding_failed_at
  FROM knowledge_documents WHERE key = @key FOR UPDATE;

-- name: KnowledgeInsert :one
-- KnowledgeInsert adds a document (with a given id and version when a
-- deleted one is restored). It returns no row when the key is taken.
INSERT INTO knowledge_documents (id, key, text, metadata, version)
VALUES (coalesce(sqlc.narg('id')::uuid, gen_random_uuid()), sqlc.narg('key')::text, @text, @metadata,
        @version)
ON CONFLICT (key) DO NOTHING
RETURNING id, key, text, metadata, version, content_hash, created_at, updated_at, embedding_state, embedding_error,
       embedding_failed_at;

-- name: KnowledgeUpdate :one
-- KnowledgeUpdate replaces a document's text and metadata as its next
-- version; its vector is dropped and made again from the new text.
UPDATE knowledge_documents
   SET text = @text, metadata = @metadata, version = @version, updated_at = now(),
       embedding_state = 'pending', embedding_error = '', embedding_failed_at = NULL
 WHERE id = @id
RETURNING id, key, text, metadata, version, content_hash, created_at, updated_at, embedding_state, embedding_error,
       embedding_failed_at;

-- name: KnowledgeEmbeddingDrop :exec
DELETE FROM knowledge_embeddings WHERE document_id = @document_id;

-- name: KnowledgeDelete :one
DELETE FROM knowledge_documents WHERE id = @id
RETURNING id, key, text, metadata, version, content_hash, created_at, updated_at, embedding_state, embedding_error,
       embedding_failed_at;

-- name: KnowledgeVersionAppend :exec
INSERT INTO knowledge_versions (document_id, version, op, key, text, metadata, actor)
VALUES (@document_id, @version, @op, sqlc.narg('key')::text, @text, @metadata, @actor);

-- name: KnowledgeVersionList :many
-- KnowledgeVersionList is a document's history, newest first.
SELECT v.*, d.version AS current_version
  FROM knowledge_versions v
  LEFT JOIN knowledge_documents d ON d.id = v.document_id
 WHERE v.document_id = @document_id
 ORDER BY v.version DESC;

-- name: KnowledgeVersionListByKey :many
-- KnowledgeVersionListByKey is the history of every document that has had
-- the key, deleted ones included, newest first: each document's versions
-- together, highest first, the documents by their latest change. Not by
-- created_at alone: it is when a version's transaction began, and a writer
-- that waited for another's lock records the next version with the
-- earlier time.
SELECT v.*, d.version AS current_version
  FROM knowledge_versions v
  LEFT JOIN knowledge_documents d ON d.id = v.document_id
 WHERE v.document_id IN (SELECT kv.document_id FROM knowledge_versions kv WHERE kv.key = @key)
 ORDER BY max(v.created_at) OVER (PARTITION BY v.document_id) DESC, v.document_id, v.version DESC;

-- name: KnowledgeVersionGet :one
SELECT * FROM knowledge_versions WHERE document_id = @document_id AND version = @version;

-- name: KnowledgeVersionLatest :one
SELECT * FROM knowledge_versions WHERE document_id = @document_id ORDER BY version DESC LIMIT 1;

-- name: KnowledgeEmbeddingPending :many
-- KnowledgeEmbeddingPending returns those of the given documents that still
-- wait for a vector, with the version whose text is to be embedded.
SELECT id, version, text FROM knowledge_documents
 WHERE id = ANY(@ids::uuid[]) AND embedding_state = 'pending'
 ORDER BY id;

-- name: KnowledgeEmbeddingsStore :many
-- KnowledgeEmbeddingsStore stores vectors for documents still pending at
-- the version that was embedded: a document changed meanwhile keeps waiting
-- for the job its change enqueued.
WITH input AS (
    -- Set-returning functions in one select list advance together.
    SELECT unnest(@ids::uuid[]) AS id, unnest(@versions::int[]) AS version,
           unnest(@embeddings::vector[]) AS embedding
), done AS (
    UPDATE knowledge_documents d
       SET embedding_state = 'embedded', embedding_error = '', embedding_failed_at = NULL
      FROM input i
     WHERE d.id = i.id AND d.version = i.version AND d.embedding_state = 'pending'
    RETURNING d.id
)
INSERT INTO knowledge_embeddings (document_id, embedding, model)
SELECT i.id, i.embedding, @model::text
  FROM input i
  JOIN done ON done.id = i.id
ON CONFLICT (document_id) DO UPDATE
   SET embedding = EXCLUDED.embedding, model = EXCLUDED.model, created_at = now()
RETURNING document_id;

-- name: KnowledgeEmbeddingsFail :execrows
UPDATE knowledge_documents
   SET embedding_state = 'failed', embedding_error = @error_message::text, embedding_failed_at = now()
 WHERE id = ANY(@ids::uuid[]) AND embedding_state = 'pending';

-- name: KnowledgeEmbeddingsReset :many
-- KnowledgeEmbeddingsReset is MemoryEmbeddingsReset for knowledge.
WITH target AS (
    SELECT d.id
      FROM knowledge_documents d
      LEFT JOIN knowledge_embeddings e ON e.document_id = d.id
     WHERE @everything::bool
        OR d.embedding_state IN ('pending', 'failed')
        OR e.model IS DISTINCT FROM @model::text
), dropped AS (
    DELETE FROM knowledge_embeddings e USING target t WHERE e.document_id = t.id
)
UPDATE knowledge_documents d
   SET embedding_state = 'pending', embedding_error = '', embedding_failed_at = NULL
  FROM target t
 WHERE d.id = t.id
RETURNING d.id;

-- name: KnowledgeEmbeddingBacklog :one
SELECT c.pending, c.failed, c.stale, coalesce(l.embedding_error, '')::text AS last_error, l.embedding_failed_at AS last_error_at
  FROM (SELECT (SELECT count(*) FROM knowledge_documents WHERE embedding_state = 'pending')::int AS pending,
               (SELECT count(*) FROM knowledge_documents WHERE embedding_state = 'failed')::int AS failed,
               (SELECT count(*) FROM knowledge_embeddings WHERE model <> @model::text)::int AS stale) c
  LEFT JOIN LATERAL (
        SELECT d.embedding_error, d.embedding_failed_at FROM knowledge_documents d
         WHERE d.embedding_state = 'failed'
         ORDER BY d.embedding_failed_at DESC LIMIT 1) l ON true;

-- name: KnowledgeKeyLock :exec
-- KnowledgeKeyLock serialises the writes of one key in this schema until
-- the transaction ends, before either looks the key up. Without it, two
-- inserts of a new key race: the loser's INSERT ... ON CONFLICT DO NOTHING
-- still fires the statistics trigger (count_lexemes takes lexeme_totals)
-- before it locks the winner's row, the reverse of every other writer's
-- order, and can deadlock with an embedding job holding that row.
SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || '/' || @key::text, 0));
