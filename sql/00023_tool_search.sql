-- +goose Up
-- Tool search (issue 18): one index per agent image, keyed by the hash of
-- the image's tool manifest (every tool's name and search text), so that a
-- new image with other tools gets a new index and an unchanged one reuses
-- its own. The search text is what tool.Def.SearchText gives: name,
-- description, parameter names, side effect and aliases. It is embedded by
-- the memory pipeline's embedder and searched the way memory is: vector
-- and full-text candidates fused by choir_rank_fusion.
CREATE TABLE choir_control.tool_index (
    manifest_hash   text NOT NULL CHECK (manifest_hash ~ '^[0-9a-f]{64}$'),
    name            text NOT NULL CHECK (name <> ''),
    search_text     text NOT NULL,
    tsv             tsvector GENERATED ALWAYS AS (to_tsvector('english', search_text)) STORED,
    -- NULL while the embedder is unavailable: full-text search still works.
    embedding       vector,
    embedding_model text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (manifest_hash, name)
);
CREATE INDEX tool_index_tsv ON choir_control.tool_index USING gin (tsv);

-- tool_schema_tokens: how each model call was offered its tools (direct,
-- compact or discovery) and what the tools parameter cost, beside the
-- prompt's tokens, so the saving of each mode can be measured.
CREATE VIEW choir_audit.tool_schema_tokens AS
SELECT s.agent_id,
       e.session_id,
       e.rev,
       e.created_at,
       e.lane,
       e.payload->>'model' AS model,
       coalesce(e.payload->>'tool_mode', 'direct') AS tool_mode,
       coalesce((e.payload->>'tool_schema_tokens')::bigint, 0) AS tool_schema_tokens,
       (e.payload->>'prompt_tokens')::bigint AS prompt_tokens
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id)
 WHERE e.event_type = 'llm_call_committed';

-- +goose Down
DROP VIEW choir_audit.tool_schema_tokens;
DROP TABLE choir_control.tool_index;
