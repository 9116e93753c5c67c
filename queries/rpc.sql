-- name: SessionAuthGet :one
SELECT session_id, agent_id, status, lease_token_hash
  FROM choir_control.sessions WHERE session_id = @session_id;

-- name: SessionHello :one
UPDATE choir_control.sessions
   SET hello_at = coalesce(hello_at, now()), image_version = @image_version,
       tool_manifest_hash = @tool_manifest_hash, skill_manifest_hash = @skill_manifest_hash,
       last_heartbeat_at = now()
 WHERE session_id = @session_id AND status IN ('active', 'stopping')
RETURNING *;

-- name: SessionLaneStatusSet :execrows
-- SessionLaneStatusSet keeps a lane's latest status while its session is
-- live; it changes no row of an ended one.
UPDATE choir_control.sessions
   SET lane_status = jsonb_set(lane_status, ARRAY[@lane::text], @status::jsonb)
 WHERE session_id = @session_id AND status IN ('active', 'stopping');

-- name: ReplayGet :one
SELECT * FROM choir_control.rpc_replays WHERE session_id = @session_id AND request_id = @request_id;

-- name: ReplaySave :exec
-- ReplaySave keeps the first outcome of a request and, in the same
-- statement, forgets the session's record that falls out of its newest
-- @keep. ord is the session's highest plus one, so the numbers have no
-- gaps and each save forgets exactly the record numbered @keep below its
-- own; an equality, not a range, so the statement never walks the index
-- entries of the records forgotten before (dead until vacuumed). Two saves
-- racing in one session may share a number: both are forgotten together,
-- and meanwhile the session keeps one record more, never one fewer. A
-- repeated request inserts nothing and so forgets nothing.
WITH saved AS (
    INSERT INTO choir_control.rpc_replays (session_id, request_id, verb, digest, response, err_code, err_message, ord)
    VALUES (@session_id, @request_id, @verb, @digest, @response, @err_code, @err_message,
            coalesce((SELECT max(r.ord) FROM choir_control.rpc_replays r WHERE r.session_id = @session_id), 0) + 1)
    ON CONFLICT (session_id, request_id) DO NOTHING
    RETURNING ord
)
DELETE FROM choir_control.rpc_replays old
 WHERE old.session_id = @session_id AND old.ord = (SELECT s.ord FROM saved s) - @keep::bigint;

-- name: ReplayForgetSession :execrows
DELETE FROM choir_control.rpc_replays WHERE session_id = @session_id;

-- name: ApprovalCreate :one
-- ApprovalCreate records a pending approval once per (session, request);
-- a repeated request inserts nothing and returns no row.
INSERT INTO choir_control.pending_approvals
    (session_id, agent_id, request_id, request_type, summary, payload, expires_at, sources)
VALUES (@session_id, @agent_id, @request_id, @request_type, @summary, @payload, @expires_at,
        coalesce(sqlc.narg(sources)::text[], '{}'))
ON CONFLICT DO NOTHING
RETURNING approval_id, status;

-- name: ApprovalGetByRequest :one
-- ApprovalGetByRequest finds the approval of a request: in the session,
-- or, for a request keyed by a call's idempotency key (approval:ck-...),
-- in any session of the agent.
SELECT * FROM choir_control.pending_approvals
 WHERE request_id = @request_id
   AND (session_id = @session_id OR (agent_id = @agent_id AND request_id LIKE 'approval:ck-%'))
 ORDER BY created_at
 LIMIT 1;
