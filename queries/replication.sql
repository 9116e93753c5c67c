-- name: ConfigVersionLatest :one
SELECT coalesce(max(version), 0)::bigint AS version FROM choir_control.config_versions;

-- name: SnapshotInsert :exec
INSERT INTO choir_control.session_snapshots (session_id, rev, snapshot)
VALUES (@session_id, @rev, @snapshot)
ON CONFLICT (session_id, rev) DO NOTHING;

-- name: SnapshotLatest :one
SELECT * FROM choir_control.session_snapshots
 WHERE session_id = @session_id ORDER BY rev DESC LIMIT 1;

-- name: HeartbeatApply :one
-- HeartbeatApply is a heartbeat's whole write in one statement, so it
-- costs one round trip: lock the session's head row, and only if the patch
-- continues the acknowledged chain (base_rev = acked_rev, hash_prev = the
-- acknowledged hash, session live) append the events, advance acked_rev and
-- last_heartbeat_at and store the snapshot. It always returns the head as
-- locked, before the update, so the caller can tell a resend or a refusal
-- from an applied patch; applied says whether it was applied. The append
-- trigger re-checks the chain set-wise, so no caller can store a broken one.
-- The inbox rows the new events name (inbox_ids) are marked delivered in
-- the same statement, so that a message is in the durable log exactly when
-- its row says so. Likewise the approvals whose outcome the new events
-- show taken (approval_ids, as text for the reason session_id is) are
-- marked taken. Being one statement, it is one transaction without BEGIN
-- and COMMIT around it. The head row is locked FOR NO KEY UPDATE,
-- which serialises heartbeats and status changes of the session as FOR
-- UPDATE would, but not the key-share locks that foreign keys to the
-- session take: an inbox row being marked pushed to this session (which
-- locks the inbox row, then key-shares the session) would otherwise
-- deadlock with this statement (which locks the session, then the inbox
-- row).
-- snapshot_rev is 0 when the heartbeat carries no snapshot; snapshot_hash is
-- the chain hash at its revision and snapshot_state_sha256 the SHA-256 of its
-- state's canonical JSON, both checked on recovery. session_id is passed as
-- text because pgx encodes a uuid.UUID through driver.Valuer, a detour that
-- cost more than all the other parameters together.
WITH head AS (
    SELECT s.session_id, s.agent_id, s.status, s.acked_rev, coalesce(s.acked_hash, s.base_hash) AS acked_hash
      FROM choir_control.sessions s
     WHERE s.session_id = CAST(@session_id::text AS uuid)
       FOR NO KEY UPDATE
), ok AS (
    SELECT h.session_id, h.agent_id FROM head h
     WHERE h.status IN ('active', 'stopping')
       AND h.acked_rev = @base_rev::bigint
       AND h.acked_hash = @hash_prev::bytea
), appended AS (
    INSERT INTO choir_control.session_events (session_id, rev, event_type, lane, payload, hash_prev, hash, created_at)
    SELECT ok.session_id, e.rev, e.event_type, e.lane, e.payload, e.hash_prev, e.hash, e.created_at
      FROM ok, (SELECT unnest(@revs::bigint[]) AS rev, unnest(@event_types::text[]) AS event_type,
                       unnest(@lanes::text[]) AS lane, unnest(@payloads::text[])::jsonb AS payload,
                       unnest(@hash_prevs::bytea[]) AS hash_prev, unnest(@hashes::bytea[]) AS hash,
                       unnest(@created_ats::timestamptz[]) AS created_at) e
    RETURNING 1
), acked AS (
    UPDATE choir_control.sessions s
       SET acked_rev = @new_rev::bigint, acked_hash = @hash_new::bytea, last_heartbeat_at = now(),
           config_version = @config_version::bigint
      FROM ok
     WHERE s.session_id = ok.session_id
    RETURNING 1
), snapshot AS (
    INSERT INTO choir_control.session_snapshots (session_id, rev, snapshot, hash, state_sha256)
    SELECT ok.session_id, @snapshot_rev::bigint, sqlc.narg('snapshot_state')::jsonb,
           sqlc.narg('snapshot_hash')::bytea, sqlc.narg('snapshot_state_sha256')::bytea
      FROM ok
     WHERE @snapshot_rev::bigint > 0
    ON CONFLICT (session_id, rev) DO NOTHING
    RETURNING 1
), delivered AS (
    UPDATE choir_control.inbox i SET delivered_at = now(), session_id = ok.session_id
      FROM ok
     WHERE i.inbox_id = ANY (@inbox_ids::bigint[]) AND i.agent_id = ok.agent_id AND i.delivered_at IS NULL
    RETURNING 1
), taken AS (
    UPDATE choir_control.pending_approvals a SET outcome_taken_at = now()
      FROM ok
     WHERE a.approval_id = ANY (CAST(@approval_ids::text[] AS uuid[])) AND a.agent_id = ok.agent_id
       AND a.status <> 'pending' AND a.outcome_taken_at IS NULL
    RETURNING 1
)
SELECT h.status, h.acked_rev, h.acked_hash::bytea AS acked_hash,
       (SELECT count(*) FROM appended)::bigint AS appended,
       EXISTS (SELECT 1 FROM acked) AS applied,
       (SELECT count(*) FROM snapshot)::bigint AS snapshots,
       (SELECT count(*) FROM delivered)::bigint AS delivered,
       (SELECT count(*) FROM taken)::bigint AS approvals_taken,
       (SELECT coalesce(max(version), 0) FROM choir_control.config_versions)::bigint AS config_version_latest
  FROM head h;
