-- The egress gateway's audit (issue 34).

-- name: EgressConnectionInsert :one
-- A connection decided: refused ones are ended at once.
INSERT INTO choir_control.egress_connections
       (agent_id, session_id, lane, origin, method, host, port, address, decision, reason, ended_at)
VALUES (@agent_id, @session_id, @lane, @origin, @method, @host, @port, @address, @decision, @reason,
        CASE WHEN @decision::text = 'refused' THEN now() END)
RETURNING connection_id;

-- name: EgressConnectionEnd :exec
-- An allowed connection closed: the bytes it carried.
UPDATE choir_control.egress_connections
   SET bytes_up = @bytes_up, bytes_down = @bytes_down, ended_at = now()
 WHERE connection_id = @connection_id;

-- name: EgressGrantGet :one
-- Whether a person allowed the host (on this port, or on any: port 0) for good.
SELECT EXISTS (SELECT 1 FROM choir_control.egress_grants
                WHERE agent_id = @agent_id AND host = @host AND port IN (0, @port::int)) AS granted;

-- name: EgressGrantAdd :exec
INSERT INTO choir_control.egress_grants (agent_id, host, port) VALUES (@agent_id, @host, @port)
ON CONFLICT DO NOTHING;

-- name: EgressApprovalTaken :exec
-- An egress approval's outcome is choird's own (a waiting connection
-- reads it), never the agent's to take: it is marked taken as it is
-- resolved, so no session is ever pushed it.
UPDATE choir_control.pending_approvals SET outcome_taken_at = now()
 WHERE approval_id = @approval_id AND request_type = 'egress.connect';

-- name: EgressGrantList :many
-- The hosts people allowed for good, per agent (all agents when
-- @agent_id is empty), oldest first.
SELECT agent_id, host, port, granted_at FROM choir_control.egress_grants
 WHERE @agent_id::text = '' OR agent_id = @agent_id
 ORDER BY agent_id, granted_at, host, port;

-- name: EgressGrantRevoke :execrows
-- Takes a grant back: the next connection to the host is asked about
-- again.
DELETE FROM choir_control.egress_grants WHERE agent_id = @agent_id AND host = @host AND port = @port;
