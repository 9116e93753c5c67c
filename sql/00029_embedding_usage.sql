-- +goose Up
-- Embeddings count against the caps (issue 29). choird embeds an agent's
-- memory, its queries and its image's tool index with the configured
-- embedding provider, which bills the input's tokens. Each request an API
-- provider answered is recorded here for the agent it was done for, with
-- its cost at embedding.price_per_mtok, and choir_audit.usage lists it
-- (kind 'embedding', no session): its cost counts in the day's spend that
-- a session's meter starts from and in choirctl usage. Its tokens are not
-- model tokens: the token caps do not count them.
CREATE TABLE choir_control.embedding_usage (
    usage_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id    choir_control.agent_id NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    service     text NOT NULL,
    purpose     text NOT NULL,
    tokens      bigint NOT NULL CHECK (tokens >= 0),
    estimated   boolean NOT NULL DEFAULT false,
    cost_usd    float8 NOT NULL DEFAULT 0 CHECK (cost_usd >= 0)
);
CREATE INDEX embedding_usage_agent_created ON choir_control.embedding_usage (agent_id, created_at);

CREATE OR REPLACE VIEW choir_audit.usage AS
SELECT s.agent_id,
       e.session_id,
       e.rev,
       e.created_at,
       e.lane,
       nullif(e.payload->>'job_id', '') AS job_id,
       'llm'::text AS kind,
       e.payload->>'model' AS service,
       coalesce((e.payload->>'prompt_tokens')::bigint, 0)
         + coalesce((e.payload->>'completion_tokens')::bigint, 0) AS units,
       'tokens'::text AS unit,
       coalesce((e.payload->>'prompt_tokens')::bigint, 0) AS prompt_tokens,
       coalesce((e.payload->>'completion_tokens')::bigint, 0) AS completion_tokens,
       coalesce((e.payload->>'cached_tokens')::bigint, 0) AS cached_tokens,
       coalesce((e.payload->>'cost_usd')::numeric, 0) AS cost_usd,
       e.payload->>'cost_source' AS cost_source,
       coalesce(nullif(e.payload->>'purpose', ''), 'step') AS purpose
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id)
 WHERE e.event_type = 'llm_call_committed'
UNION ALL
SELECT s.agent_id,
       e.session_id,
       e.rev,
       e.created_at,
       e.lane,
       j.job_id,
       u->>'kind',
       u->>'service',
       coalesce((u->>'units')::bigint, 0),
       u->>'unit',
       0, 0, 0,
       coalesce((u->>'cost_usd')::numeric, 0),
       u->>'cost_source',
       e.payload->>'tool'
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id)
 CROSS JOIN LATERAL jsonb_array_elements(e.payload->'usage') u
  LEFT JOIN LATERAL (
        SELECT nullif(l.payload->>'job_id', '') AS job_id
          FROM choir_control.session_events l
         WHERE l.session_id = e.session_id AND l.lane = e.lane
           AND l.event_type = 'llm_call_committed' AND l.rev < e.rev
         ORDER BY l.rev DESC LIMIT 1) j ON true
 WHERE e.event_type = 'tool_result_committed'
   AND jsonb_typeof(e.payload->'usage') = 'array'
UNION ALL
SELECT u.agent_id,
       NULL::uuid,
       NULL::bigint,
       u.created_at,
       NULL::text,
       NULL::text,
       'embedding'::text,
       u.service,
       u.tokens,
       'tokens'::text,
       0, 0, 0,
       u.cost_usd::numeric,
       CASE WHEN u.cost_usd > 0 THEN 'prices' END,
       u.purpose
  FROM choir_control.embedding_usage u;

-- +goose Down
CREATE OR REPLACE VIEW choir_audit.usage AS
SELECT s.agent_id,
       e.session_id,
       e.rev,
       e.created_at,
       e.lane,
       nullif(e.payload->>'job_id', '') AS job_id,
       'llm'::text AS kind,
       e.payload->>'model' AS service,
       coalesce((e.payload->>'prompt_tokens')::bigint, 0)
         + coalesce((e.payload->>'completion_tokens')::bigint, 0) AS units,
       'tokens'::text AS unit,
       coalesce((e.payload->>'prompt_tokens')::bigint, 0) AS prompt_tokens,
       coalesce((e.payload->>'completion_tokens')::bigint, 0) AS completion_tokens,
       coalesce((e.payload->>'cached_tokens')::bigint, 0) AS cached_tokens,
       coalesce((e.payload->>'cost_usd')::numeric, 0) AS cost_usd,
       e.payload->>'cost_source' AS cost_source,
       coalesce(nullif(e.payload->>'purpose', ''), 'step') AS purpose
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id)
 WHERE e.event_type = 'llm_call_committed'
UNION ALL
SELECT s.agent_id,
       e.session_id,
       e.rev,
       e.created_at,
       e.lane,
       j.job_id,
       u->>'kind',
       u->>'service',
       coalesce((u->>'units')::bigint, 0),
       u->>'unit',
       0, 0, 0,
       coalesce((u->>'cost_usd')::numeric, 0),
       u->>'cost_source',
       e.payload->>'tool'
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id)
 CROSS JOIN LATERAL jsonb_array_elements(e.payload->'usage') u
  LEFT JOIN LATERAL (
        SELECT nullif(l.payload->>'job_id', '') AS job_id
          FROM choir_control.session_events l
         WHERE l.session_id = e.session_id AND l.lane = e.lane
           AND l.event_type = 'llm_call_committed' AND l.rev < e.rev
         ORDER BY l.rev DESC LIMIT 1) j ON true
 WHERE e.event_type = 'tool_result_committed'
   AND jsonb_typeof(e.payload->'usage') = 'array';
DROP TABLE choir_control.embedding_usage;
