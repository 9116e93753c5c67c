-- +goose Up
-- Write-ahead tool intents (issue 31): a call with side effects carries an
-- idempotency key, random and the same when the call runs again after a
-- restart, in whatever session resumes it. What a host tool keeps of a
-- keyed call is unique on the agent and that key, so the second run finds
-- the first one's effect instead of making another.

ALTER TABLE choir_control.schedules ADD COLUMN idempotency_key text
    CHECK (idempotency_key IS NULL OR idempotency_key <> '');
CREATE UNIQUE INDEX schedules_agent_idempotency_key ON choir_control.schedules (agent_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
COMMENT ON COLUMN choir_control.schedules.idempotency_key IS
    'the idempotency key of the agent tool call that made the schedule: a call run again after a restart finds it';

-- A meta tool's approval request ID derives from the call's key
-- (approval:ck-<key>): unique for the agent, not only the session, so the
-- proposal filed again by a resumed session is the first one.
CREATE UNIQUE INDEX pending_approvals_agent_keyed_request ON choir_control.pending_approvals (agent_id, request_id)
    WHERE request_id LIKE 'approval:ck-%';

-- +goose Down
DROP INDEX choir_control.pending_approvals_agent_keyed_request;
DROP INDEX choir_control.schedules_agent_idempotency_key;
ALTER TABLE choir_control.schedules DROP COLUMN idempotency_key;
