-- +goose Up
-- Usage accounting (issue 20). The records live in the agents' commit logs,
-- replicated to session_events: a model call's tokens and cost in its
-- llm_call_committed event, a tool's priced usage (TTS characters, search
-- queries) in its tool_result_committed event under "usage". These views
-- total them; nothing else stores a spend, so the views and the caps the
-- agents enforce always agree with the log.

-- usage: one row per metered use. job_id is the core job's ID (a tool's
-- record takes that of the last model call of its lane); cost_usd is 0
-- when the use was not priced (cost_source null).
CREATE VIEW choir_audit.usage AS
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

-- The totals. tokens counts model tokens; cost_usd every kind's cost;
-- uses the rows counted. Days are UTC dates here (the database knows no
-- DM); `choirctl usage` and /usage count days in the DM's time zone.
CREATE VIEW choir_audit.usage_by_agent AS
SELECT agent_id,
       sum(units) FILTER (WHERE kind = 'llm') AS tokens,
       sum(cached_tokens) AS cached_tokens,
       sum(cost_usd) AS cost_usd,
       count(*) AS uses,
       min(created_at) AS first_at,
       max(created_at) AS last_at
  FROM choir_audit.usage GROUP BY agent_id;

CREATE VIEW choir_audit.usage_by_session AS
SELECT agent_id, session_id,
       sum(units) FILTER (WHERE kind = 'llm') AS tokens,
       sum(cost_usd) AS cost_usd,
       count(*) AS uses,
       min(created_at) AS first_at,
       max(created_at) AS last_at
  FROM choir_audit.usage GROUP BY agent_id, session_id;

CREATE VIEW choir_audit.usage_by_lane AS
SELECT agent_id, session_id, lane,
       sum(units) FILTER (WHERE kind = 'llm') AS tokens,
       sum(cost_usd) AS cost_usd,
       count(*) AS uses
  FROM choir_audit.usage GROUP BY agent_id, session_id, lane;

CREATE VIEW choir_audit.usage_by_job AS
SELECT agent_id, session_id, lane, job_id,
       sum(units) FILTER (WHERE kind = 'llm') AS tokens,
       sum(cost_usd) AS cost_usd,
       count(*) AS uses,
       min(created_at) AS first_at,
       max(created_at) AS last_at
  FROM choir_audit.usage WHERE job_id IS NOT NULL
 GROUP BY agent_id, session_id, lane, job_id;

CREATE VIEW choir_audit.usage_by_model AS
SELECT agent_id, kind, service,
       sum(units) AS units,
       sum(prompt_tokens) AS prompt_tokens,
       sum(completion_tokens) AS completion_tokens,
       sum(cached_tokens) AS cached_tokens,
       sum(cost_usd) AS cost_usd,
       count(*) AS uses
  FROM choir_audit.usage GROUP BY agent_id, kind, service;

CREATE VIEW choir_audit.usage_by_day AS
SELECT agent_id,
       (created_at AT TIME ZONE 'UTC')::date AS day,
       sum(units) FILTER (WHERE kind = 'llm') AS tokens,
       sum(cost_usd) AS cost_usd,
       count(*) AS uses
  FROM choir_audit.usage GROUP BY agent_id, (created_at AT TIME ZONE 'UTC')::date;

-- +goose Down
DROP VIEW choir_audit.usage_by_day;
DROP VIEW choir_audit.usage_by_model;
DROP VIEW choir_audit.usage_by_job;
DROP VIEW choir_audit.usage_by_lane;
DROP VIEW choir_audit.usage_by_session;
DROP VIEW choir_audit.usage_by_agent;
DROP VIEW choir_audit.usage;
