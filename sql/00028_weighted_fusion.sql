-- +goose Up
-- choir_rank_fusion with weights: hybrid search's weighted reciprocal rank
-- fusion, vector_weight / (k + vector_rank) + text_weight / (k + text_rank)
-- over the sides that found the row (a NULL rank adds nothing). The store
-- passes k and the weights chosen on bench/recall (daemon/memory,
-- DefaultSearchTuning); the two-argument form (k = 60, equal weights)
-- stays for tool search.
CREATE FUNCTION public.choir_rank_fusion(vector_rank bigint, text_rank bigint, k int, vector_weight float8,
                                         text_weight float8)
RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE
RETURN coalesce(vector_weight / (k + vector_rank), 0) + coalesce(text_weight / (k + text_rank), 0);

-- +goose Down
DROP FUNCTION public.choir_rank_fusion(bigint, bigint, int, float8, float8);
