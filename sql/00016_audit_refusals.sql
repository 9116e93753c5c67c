-- +goose Up
-- tool_calls also lists the calls that never ran: those the arbiter refused
-- (an unknown or forbidden tool, invalid input, a path escaping the
-- workspace, a refused skill transition), logged as tool_call_requested
-- with status 'rejected', and those abandoned before they held their locks
-- (status 'abandoned'). An auditor sees escape attempts beside the calls
-- that ran: outcome is 'rejected' or 'abandoned', error says why
-- ("path_escape: ..."), and finished_at, duration_ms, locks and result_rev
-- are null, since nothing ran.
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

-- inbox_waiting: the messages and injections received for an agent and not
-- yet in its log, which choird pushes until the agent's replicated log
-- shows them. A command's inbox row is only its once-only record and is
-- never delivered, nor is a message that came while no agent was bound to
-- its DM (its sender was told nobody reads it): both are left out, or they
-- would be listed forever.
CREATE VIEW choir_audit.inbox_waiting AS
SELECT i.inbox_id,
       i.gateway,
       i.dm,
       i.agent_id,
       i.kind,
       i.received_at,
       i.pushed_at,
       now() - i.received_at AS waiting
  FROM choir_control.inbox i
 WHERE i.delivered_at IS NULL
   AND i.agent_id IS NOT NULL
   AND i.kind IN ('message', 'inject');

-- +goose Down
DROP VIEW choir_audit.inbox_waiting;
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
 WHERE c.event_type = 'tool_call_committed';
