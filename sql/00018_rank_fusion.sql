-- +goose Up
-- +goose StatementBegin
-- choir_rank_fusion is hybrid search's one rank fusion: it fuses two
-- rankings, each given as ids best first, by reciprocal rank with k = 60.
-- An id's rank on a side is its 1-based position there; its score is the
-- sum of 1 / (60 + rank) over the sides that found it. MemorySearchHybrid
-- and KnowledgeSearchHybrid (queries/agent/) call it with their vector and
-- full-text candidates.
--
-- It lives in public because those queries run in one agent's schema with
-- search_path "choir_<agent_id>, public" and, for the agent's own
-- queries, under the agent's role, which has no privilege on
-- choir_control: every role may use public and run its functions. A
-- single SELECT in SQL, it is inlined into a query that passes it columns
-- (not sub-selects), so fusing costs what the join it replaces cost.
CREATE FUNCTION public.choir_rank_fusion(vector_ids uuid[], text_ids uuid[])
RETURNS TABLE (id uuid, score numeric, vector_rank bigint, text_rank bigint)
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT coalesce(v.id, t.id),
           coalesce(1.0 / (60 + v.rank), 0) + coalesce(1.0 / (60 + t.rank), 0),
           v.rank,
           t.rank
      FROM unnest(vector_ids) WITH ORDINALITY AS v (id, rank)
      FULL JOIN unnest(text_ids) WITH ORDINALITY AS t (id, rank) ON t.id = v.id
$$;
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION public.choir_rank_fusion(uuid[], uuid[]);
