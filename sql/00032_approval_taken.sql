-- +goose Up
-- outcome_taken_at is when the agent's replicated log first showed it took
-- an approval's outcome: an injected_instruction event of source
-- "approval" naming the approval_id, set by HeartbeatApply in the same
-- statement that appends the event. A push alone proves nothing (the
-- agent may die before acting on it), so an outcome resolved but not
-- taken is pushed again at every hello of the agent, and the agent acts
-- on it once: an approved gated call runs then, the outcome reaches the
-- lane, and its committed event is the acknowledgement.
ALTER TABLE choir_control.pending_approvals ADD COLUMN outcome_taken_at timestamptz;
-- Outcomes resolved before this column existed belong to the old way (the
-- model called again once told): none is pushed again, so that upgrading
-- never runs a call approved long ago by itself.
UPDATE choir_control.pending_approvals SET outcome_taken_at = coalesce(outcome_pushed_at, resolved_at)
 WHERE status <> 'pending';
CREATE INDEX pending_approvals_untaken ON choir_control.pending_approvals (agent_id, resolved_at)
    WHERE status <> 'pending' AND outcome_taken_at IS NULL;

-- +goose Down
DROP INDEX IF EXISTS choir_control.pending_approvals_untaken;
ALTER TABLE choir_control.pending_approvals DROP COLUMN outcome_taken_at;
