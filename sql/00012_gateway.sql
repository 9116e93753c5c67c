-- +goose Up
-- The gateway's durable ingress and egress, and approvals by button.

-- An outbox row may carry an approval's inline keyboard: the notification
-- of a pending approval is an ordinary outbox message, paced, ordered and
-- sent once like any other, and the Telegram ids it records (sent_ids)
-- let a /approve sent in reply to it find its approval.
ALTER TABLE choir_control.outbox
    ADD COLUMN approval_id uuid REFERENCES choir_control.pending_approvals;
CREATE INDEX outbox_approval ON choir_control.outbox (approval_id) WHERE approval_id IS NOT NULL;

-- pushed_at is when choird last pushed the row to a session; delivered_at
-- is set only when the agent's replicated log shows the message (a user_msg
-- or injected_instruction event naming the inbox_id). A row pushed but not
-- delivered is pushed again, to the next session if need be; the agent
-- drops a message whose inbox_id its log already holds.
ALTER TABLE choir_control.inbox ADD COLUMN pushed_at timestamptz;

-- outcome_pushed_at is when the outcome reached a live session of the
-- agent. An approval resolved while its agent was down is pushed to the
-- agent's next session at its hello.
ALTER TABLE choir_control.pending_approvals ADD COLUMN outcome_pushed_at timestamptz;

-- +goose Down
ALTER TABLE choir_control.pending_approvals DROP COLUMN outcome_pushed_at;
ALTER TABLE choir_control.inbox DROP COLUMN pushed_at;
DROP INDEX IF EXISTS choir_control.outbox_approval;
ALTER TABLE choir_control.outbox DROP COLUMN approval_id;
