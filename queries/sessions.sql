-- name: SessionCreate :one
INSERT INTO choir_control.sessions (
    agent_id, lease_token_hash, resumed_from, base_rev, base_hash, acked_rev, acked_hash,
    config_version, resource_bindings, runtime, budget_from, budget_base_tokens, budget_base_cost_usd)
VALUES (
    @agent_id, @lease_token_hash, sqlc.narg('resumed_from'), @base_rev, @base_hash, @base_rev,
    @base_hash, @config_version, @resource_bindings, @runtime, sqlc.narg('budget_from'), @budget_base_tokens,
    @budget_base_cost_usd)
RETURNING *;

-- name: SessionGetByID :one
SELECT * FROM choir_control.sessions WHERE session_id = @session_id;

-- name: SessionGetLiveByAgent :one
SELECT * FROM choir_control.sessions
 WHERE agent_id = @agent_id AND status IN ('active', 'stopping');

-- name: SessionHeartbeatTouch :exec
UPDATE choir_control.sessions SET last_heartbeat_at = now()
 WHERE session_id = @session_id AND status IN ('active', 'stopping');

-- name: SessionEnd :one
UPDATE choir_control.sessions
   SET status = 'ended', ended_at = now(), end_reason = @end_reason
 WHERE session_id = @session_id AND status IN ('active', 'stopping')
RETURNING *;

-- name: SessionsCrashStale :many
-- SessionsCrashStale marks every live session whose last heartbeat is older
-- than threshold_ms as crashed and releases its leases, in one statement.
-- An agent that has not said hello yet is starting up (an image pulled, a
-- binary loaded on a busy host): it gets start_grace_ms, or the threshold
-- if that is longer. A runtime that sees it die reports that at once.
WITH params AS (
    SELECT @threshold_ms::bigint AS threshold_ms, @start_grace_ms::bigint AS start_grace_ms
), crashed AS (
    UPDATE choir_control.sessions s
       SET status = 'crashed',
           ended_at = now(),
           end_reason = 'no heartbeat for ' ||
                        (extract(epoch FROM now() - s.last_heartbeat_at) * 1000)::bigint ||
                        ' ms (threshold ' || p.threshold_ms || ' ms)'
      FROM params p
     WHERE s.status IN ('active', 'stopping')
       AND s.last_heartbeat_at < now() - p.threshold_ms * interval '1 millisecond'
       AND (s.hello_at IS NOT NULL
            OR s.last_heartbeat_at < now() - greatest(p.threshold_ms, p.start_grace_ms) * interval '1 millisecond')
    RETURNING s.session_id, s.agent_id, s.last_heartbeat_at, s.resource_bindings
), released AS (
    UPDATE choir_control.resource_leases l
       SET released_at = now()
      FROM crashed c
     WHERE l.session_id = c.session_id AND l.released_at IS NULL
    RETURNING l.session_id
)
SELECT c.session_id, c.agent_id, c.last_heartbeat_at, c.resource_bindings,
       (SELECT count(*) FROM released r WHERE r.session_id = c.session_id)::int AS leases_released
  FROM crashed c
 ORDER BY c.agent_id;

-- name: SessionLatestByAgent :one
SELECT * FROM choir_control.sessions
 WHERE agent_id = @agent_id ORDER BY started_at DESC, session_id LIMIT 1;

-- name: SessionClose :execrows
UPDATE choir_control.sessions
   SET status = @status, ended_at = now(), end_reason = @end_reason
 WHERE session_id = @session_id AND status IN ('active', 'stopping')
   AND @status::text IN ('ended', 'crashed');

-- name: SessionSetInstance :exec
UPDATE choir_control.sessions SET container_id = @container_id
 WHERE session_id = @session_id;

-- name: SessionMarkStopping :exec
UPDATE choir_control.sessions SET status = 'stopping'
 WHERE session_id = @session_id AND status = 'active';

-- name: SessionDeleteUnstarted :execrows
-- SessionDeleteUnstarted removes a session whose instance never started:
-- no hello, no events.
DELETE FROM choir_control.sessions s
 WHERE s.session_id = @session_id AND s.hello_at IS NULL AND s.acked_rev = s.base_rev
   AND NOT EXISTS (SELECT 1 FROM choir_control.session_events e WHERE e.session_id = s.session_id);

-- name: SessionsCloseLive :many
-- SessionsCloseLive closes every live session when choird starts with a
-- runtime, before crash detection runs, and releases their leases, in one
-- statement: choird's death took every instance's connection, and a
-- runtime-started instance does not outlive the start-up (orphans are
-- removed). An active session becomes crashed, for choird to resume in a
-- successor; a stopping one becomes ended, since its stop was asked for.
WITH closed AS (
    UPDATE choir_control.sessions s
       SET status = CASE s.status WHEN 'stopping' THEN 'ended' ELSE 'crashed' END,
           ended_at = now(),
           end_reason = CASE s.status WHEN 'stopping' THEN @stopping_reason::text ELSE @active_reason::text END
     WHERE s.status IN ('active', 'stopping')
    RETURNING s.session_id, s.agent_id, s.status, s.resource_bindings, s.acked_rev
), released AS (
    UPDATE choir_control.resource_leases l
       SET released_at = now()
      FROM closed c
     WHERE l.session_id = c.session_id AND l.released_at IS NULL
    RETURNING l.session_id
)
SELECT c.session_id, c.agent_id, c.status, c.resource_bindings, c.acked_rev,
       (SELECT count(*) FROM released r WHERE r.session_id = c.session_id)::int AS leases_released
  FROM closed c
 ORDER BY c.agent_id;

-- name: SessionsRolloverCandidates :many
-- SessionsRolloverCandidates lists the active sessions that said hello,
-- with what the daily rollover decides on: when each is due (rollover_at,
-- NULL when not armed yet), its DM, the lanes' latest states, and whether
-- a message from its DM waits undelivered. Only messages of the last
-- pending_secs count: one older than that is not on its way to the agent
-- but stuck, and must not hold the rollover back for good (the successor
-- is pushed every undelivered message anyway).
SELECT s.session_id, s.agent_id, s.started_at, s.rollover_at,
       coalesce(s.resource_bindings->>'dm', '')::text AS dm, s.lane_status,
       EXISTS (SELECT 1 FROM choir_control.inbox i
                WHERE i.agent_id = s.agent_id AND i.delivered_at IS NULL AND i.kind <> 'mail_held'
                  AND i.dm = s.resource_bindings->>'dm'
                  AND i.received_at > now() - make_interval(secs => @pending_secs::float8)) AS inbox_pending
  FROM choir_control.sessions s
 WHERE s.status = 'active' AND s.hello_at IS NOT NULL
 ORDER BY s.agent_id;

-- name: SessionRolloverArm :execrows
-- SessionRolloverArm sets when a live session rolls over, once.
UPDATE choir_control.sessions SET rollover_at = @rollover_at
 WHERE session_id = @session_id AND rollover_at IS NULL AND status IN ('active', 'stopping');

-- name: SessionMarkSuccessorDue :exec
-- SessionMarkSuccessorDue records, while a session is live, that choird
-- starts its successor once it has ended: at the day's rollover (keeping
-- rollover_at, which has passed), or, after the agent ended it with its
-- budget used up, at the midnight after the end (rollover_at cleared).
UPDATE choir_control.sessions
   SET successor_due = true, rollover_at = CASE WHEN @keep_rollover_at::bool THEN rollover_at END
 WHERE session_id = @session_id AND status IN ('active', 'stopping');

-- name: SessionsSuccessorDue :many
-- SessionsSuccessorDue lists the agents whose latest session ended (or
-- crashed) owing a successor, with no session since and no person's stop
-- holding the agent: the rollover starts each once its time has come
-- (rollover_at, or the midnight after the end when it was not armed).
SELECT s.session_id, s.agent_id, s.ended_at, s.rollover_at,
       coalesce(s.resource_bindings->>'dm', '')::text AS dm
  FROM choir_control.sessions s
  JOIN choir_control.agents a ON a.agent_id = s.agent_id
 WHERE s.successor_due AND s.status IN ('ended', 'crashed') AND s.ended_at IS NOT NULL AND a.held_at IS NULL
   AND NOT EXISTS (SELECT 1 FROM choir_control.sessions n
                    WHERE n.agent_id = s.agent_id AND n.started_at > s.started_at)
 ORDER BY s.agent_id;
