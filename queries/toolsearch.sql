-- name: ToolIndexCount :one
-- ToolIndexCount counts the tools indexed for a manifest.
SELECT count(*) FROM choir_control.tool_index WHERE manifest_hash = @manifest_hash;

-- name: ToolIndexInsert :exec
-- ToolIndexInsert indexes one tool of a manifest; indexing it again keeps
-- the first row.
INSERT INTO choir_control.tool_index (manifest_hash, name, search_text, embedding, embedding_model)
VALUES (@manifest_hash, @name, @search_text, sqlc.narg('embedding')::vector, sqlc.narg('embedding_model'))
ON CONFLICT (manifest_hash, name) DO NOTHING;

-- name: ToolIndexSearchHybrid :many
-- ToolIndexSearchHybrid is hybrid memory search's form for one manifest's
-- tools: vector candidates (exact: a manifest holds a few hundred rows)
-- and full-text candidates, fused by choir_rank_fusion.
WITH q AS (
    SELECT websearch_to_tsquery('english', @query_text::text) AS tsq
), vector_hits AS (
    SELECT v.name, row_number() OVER (ORDER BY v.distance, v.name) AS rank
      FROM (SELECT t.name, t.embedding <=> sqlc.narg('query_vector')::vector AS distance
              FROM choir_control.tool_index t
             WHERE t.manifest_hash = @manifest_hash
               AND sqlc.narg('query_vector')::vector IS NOT NULL
               AND t.embedding IS NOT NULL
               AND t.embedding_model = sqlc.narg('embedding_model')::text
             ORDER BY distance
             LIMIT @candidates::int) v
), text_hits AS (
    SELECT x.name, row_number() OVER (ORDER BY x.score DESC, x.name) AS rank
      FROM (SELECT t.name, ts_rank_cd(t.tsv, (SELECT q.tsq FROM q), 1) AS score
              FROM choir_control.tool_index t
             WHERE t.manifest_hash = @manifest_hash
               AND t.tsv @@ (SELECT q.tsq FROM q)
             ORDER BY score DESC
             LIMIT @candidates::int) x
)
SELECT coalesce(v.name, t.name)::text AS name,
       choir_rank_fusion(v.rank, t.rank)::float8 AS score
  FROM vector_hits v
  FULL JOIN text_hits t ON t.name = v.name
 ORDER BY 2 DESC, 1
 LIMIT @max_results::int;
