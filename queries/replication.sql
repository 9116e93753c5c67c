-- name: SessionLockHead :one
-- SessionLockHead locks a session's head row for the duration of a
-- heartbeat transaction, serialising appends to its log.
SELECT session_id, agent_id, status, base_rev, base_hash, acked_rev, acked_hash
  FROM choir_control.sessions WHERE session_id = @session_id FOR UPDATE;

-- name: SessionAck :exec
UPDATE choir_control.sessions
   SET acked_rev = @acked_rev, acked_hash = @acked_hash, last_heartbeat_at = now(),
       config_version = @config_version
 WHERE session_id = @session_id;

-- name: ConfigVersionLatest :one
SELECT coalesce(max(version), 0)::bigint AS version FROM choir_control.config_versions;

-- name: SnapshotInsert :exec
INSERT INTO choir_control.session_snapshots (session_id, rev, snapshot)
VALUES (@session_id, @rev, @snapshot)
ON CONFLICT (session_id, rev) DO NOTHING;

-- name: SnapshotLatest :one
SELECT * FROM choir_control.session_snapshots
 WHERE session_id = @session_id ORDER BY rev DESC LIMIT 1;
