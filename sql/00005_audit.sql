-- +goose Up
-- choir_audit is for operators with psql: read-only views over the control
-- plane that answer "what did agent X do, with which tools, who approved".
CREATE SCHEMA choir_audit;

-- session_timeline: every replicated event, newest sessions first, with a
-- one-line digest of its payload.
CREATE VIEW choir_audit.session_timeline AS
SELECT s.agent_id,
       e.session_id,
       e.rev,
       e.created_at,
       e.lane,
       e.event_type,
       left(coalesce(e.payload->>'summary', e.payload->>'text', e.payload->>'tool',
                     e.payload->>'model', e.payload::text), 200) AS digest,
       e.payload
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id);

-- tool_calls: one row per committed tool call, joined to its result by
-- call_id, with duration and outcome ('running' until a result exists).
CREATE VIEW choir_audit.tool_calls AS
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

-- llm_calls: model, lane, token counts and latency of every model call.
CREATE VIEW choir_audit.llm_calls AS
SELECT s.agent_id,
       e.session_id,
       e.rev,
       e.created_at,
       e.lane,
       e.payload->>'model' AS model,
       (e.payload->>'prompt_tokens')::bigint AS prompt_tokens,
       (e.payload->>'completion_tokens')::bigint AS completion_tokens,
       (e.payload->>'latency_ms')::bigint AS latency_ms
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id)
 WHERE e.event_type = 'llm_call_committed';

-- approvals: every approval with who asked, what, who resolved it and when.
CREATE VIEW choir_audit.approvals AS
SELECT a.approval_id,
       a.agent_id,
       a.session_id,
       a.request_type,
       a.summary,
       a.status,
       a.created_at AS requested_at,
       a.resolved_at,
       a.resolved_by,
       a.resolved_at - a.created_at AS waited,
       a.expires_at,
       a.payload
  FROM choir_control.pending_approvals a;

-- replication: per session, how far the durable replica has got, how old
-- the last heartbeat is, and how many events a recovery would replay.
CREATE VIEW choir_audit.replication AS
SELECT s.agent_id,
       s.session_id,
       s.status,
       s.started_at,
       s.ended_at,
       s.acked_rev,
       s.last_heartbeat_at,
       now() - s.last_heartbeat_at AS heartbeat_age,
       s.config_version,
       snap.rev AS snapshot_rev,
       snap.created_at AS snapshot_at,
       s.acked_rev - coalesce(snap.rev, s.base_rev) AS events_since_snapshot
  FROM choir_control.sessions s
  LEFT JOIN LATERAL (
        SELECT rev, created_at FROM choir_control.session_snapshots ss
         WHERE ss.session_id = s.session_id ORDER BY rev DESC LIMIT 1) snap ON true;

-- leases: who holds which exclusive resource now.
CREATE VIEW choir_audit.leases AS
SELECT l.resource_kind,
       l.resource_name,
       l.agent_id,
       l.session_id,
       l.acquired_at,
       now() - l.acquired_at AS held_for
  FROM choir_control.resource_leases l
 WHERE l.released_at IS NULL;

-- +goose Down
DROP SCHEMA choir_audit CASCADE;
