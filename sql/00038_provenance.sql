-- +goose Up
-- Provenance (issue 30). Each tool call records the untrusted sources its
-- lane's context held (a web page, a mail, a Notion page, an MCP server's
-- answer, a received file) and what the untrusted-input policy decided:
-- not_covered, allowlisted, opted_out, held (waits for a person), refused.
-- tool_calls shows both; untrusted_calls lists the calls held or refused
-- because of what their lane had read.
CREATE OR REPLACE VIEW choir_audit.tool_calls AS
SELECT s.agent_id,
       c.session_id,
       c.lane,
       c.payload->>'call_id' AS call_id,
       c.payload->>'tool' AS tool,
       c.created_at AS called_at,
       r.created_at AS finished_at,
       coalesce((r.payload->>'duration_ms')::bigint,
                (extract(epoch FROM r.created_at - c.created_at) * 1000)::bigint) AS duration_ms,
       coalesce(r.payload->>'status', 'running') AS outcome,
       r.payload->>'error' AS error,
       c.payload->'locks' AS locks,
       c.payload->'input' AS input,
       c.rev AS call_rev,
       r.rev AS result_rev,
       coalesce(c.payload->'sources', '[]'::jsonb) AS sources,
       c.payload->>'policy' AS policy
  FROM choir_control.session_events c
  JOIN choir_control.sessions s USING (session_id)
  LEFT JOIN choir_control.session_events r
    ON r.session_id = c.session_id
   AND r.event_type = 'tool_result_committed'
   AND r.payload->>'call_id' = c.payload->>'call_id'
 WHERE c.event_type = 'tool_call_committed'
UNION ALL
SELECT s.agent_id,
       q.session_id,
       q.lane,
       q.payload->>'call_id',
       q.payload->>'tool',
       q.created_at,
       NULL::timestamptz,
       NULL::bigint,
       q.payload->>'status',
       CASE WHEN q.payload ? 'rejection'
            THEN concat_ws(': ', coalesce(q.payload->'rejection'->>'error', q.payload->'rejection'->>'kind'),
                           q.payload->'rejection'->>'message')
            ELSE q.payload->>'error' END,
       NULL::jsonb,
       q.payload->'input',
       q.rev,
       NULL::bigint,
       coalesce(q.payload->'sources', '[]'::jsonb),
       q.payload->>'policy'
  FROM choir_control.session_events q
  JOIN choir_control.sessions s USING (session_id)
 WHERE q.event_type = 'tool_call_requested'
   AND q.payload->>'status' IN ('rejected', 'abandoned');

CREATE VIEW choir_audit.untrusted_calls AS
SELECT agent_id, session_id, lane, call_id, tool, called_at, outcome, error, input, sources, policy, call_rev
  FROM choir_audit.tool_calls
 WHERE policy IN ('held', 'refused');

-- An approval asked for a call of a lane that read strangers' words names
-- them, so the person deciding sees what may be speaking.
ALTER TABLE choir_control.pending_approvals ADD COLUMN sources text[] NOT NULL DEFAULT '{}';

-- A schedule keeps the sources of the lane that made it: its fire carries
-- them back into the lane it wakes.
ALTER TABLE choir_control.schedules ADD COLUMN sources text[] NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE choir_control.schedules DROP COLUMN sources;
ALTER TABLE choir_control.pending_approvals DROP COLUMN sources;
DROP VIEW choir_audit.untrusted_calls;
DROP VIEW choir_audit.tool_calls;
CREATE OR REPLACE VIEW choir_audit.tool_calls AS
SELECT s.agent_id,
       c.session_id,
       c.lane,
       c.payload->>'call_id' AS call_id,
       c.payload->>'tool' AS tool,
       c.created_at AS called_at,
       r.created_at AS finished_at,
       coalesce((r.payload->>'duration_ms')::bigint,
                (extract(epoch FROM r.created_at - c.created_at) * 1000)::bigint) AS duration_ms,
       coalesce(r.payload->>'status', 'running') AS outcome,
       r.payload->>'error' AS error,
       c.payload->'locks' AS locks,
       c.payload->'input' AS input,
       c.rev AS call_rev,
       r.rev AS result_rev
  FROM choir_control.session_events c
  JOIN choir_control.sessions s USING (session_id)
  LEFT JOIN choir_control.session_events r
    ON r.session_id = c.session_id
   AND r.event_type = 'tool_result_committed'
   AND r.payload->>'call_id' = c.payload->>'call_id'
 WHERE c.event_type = 'tool_call_committed'
UNION ALL
SELECT s.agent_id,
       q.session_id,
       q.lane,
       q.payload->>'call_id',
       q.payload->>'tool',
       q.created_at,
       NULL::timestamptz,
       NULL::bigint,
       q.payload->>'status',
       CASE WHEN q.payload ? 'rejection'
            THEN concat_ws(': ', coalesce(q.payload->'rejection'->>'error', q.payload->'rejection'->>'kind'),
                           q.payload->'rejection'->>'message')
            ELSE q.payload->>'error' END,
       NULL::jsonb,
       q.payload->'input',
       q.rev,
       NULL::bigint
  FROM choir_control.session_events q
  JOIN choir_control.sessions s USING (session_id)
 WHERE q.event_type = 'tool_call_requested'
   AND q.payload->>'status' IN ('rejected', 'abandoned');
