-- +goose Up
-- +goose StatementBegin
-- choir_rank_fusion is hybrid search's one rank fusion: the score of a
-- candidate that the vector side ranked vector_rank and the full-text side
-- text_rank (1-based; NULL for a side that did not find it), by reciprocal
-- rank with k = 60: the sum of 1 / (60 + rank) over the sides that found
-- it. MemorySearchHybrid and KnowledgeSearchHybrid (queries/agent/) score
-- the full join of their vector and full-text candidates with it.
--
-- It lives in public because those queries run in one agent's schema with
-- search_path "choir_<agent_id>, public" and, for the agent's own
-- queries, under the agent's role, which has no privilege on
-- choir_control: every role may use public and run its functions. A
-- scalar SQL function with a SQL-standard body, stored parsed, it is
-- inlined into the query that calls it, so it costs what the expression it
-- replaced cost. (A set-returning function that took each side's ids as
-- arrays and joined them itself was inlined too, but the arrays and the
-- join around them made every search about 0.2 ms slower in bench/hybrid.)
CREATE FUNCTION public.choir_rank_fusion(vector_rank bigint, text_rank bigint)
RETURNS numeric
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN coalesce(1.0 / (60 + vector_rank), 0) + coalesce(1.0 / (60 + text_rank), 0);
-- +goose StatementEnd

-- +goose Down
DROP FUNCTION public.choir_rank_fusion(bigint, bigint);
