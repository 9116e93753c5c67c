-- name: InboxInsert :one
-- InboxInsert stores one gateway update. A second insert of the same
-- (gateway, update_id), Telegram redelivering an update, returns no row.
INSERT INTO choir_control.inbox (gateway, update_id, dm, agent_id, chat_id, user_id, kind, text, attachments)
VALUES (@gateway, @update_id, @dm, sqlc.narg(agent_id), @chat_id, @user_id, @kind, @text, @attachments)
ON CONFLICT (gateway, update_id) DO NOTHING
RETURNING *;

-- name: OutboxInsert :one
-- OutboxInsert stores one outbound message. A second insert with the same
-- (agent_id, message_id), the agent retrying, returns no row.
INSERT INTO choir_control.outbox (agent_id, session_id, message_id, gateway, dm, chat_id, kind, text, file_path)
VALUES (@agent_id, sqlc.narg(session_id), @message_id, @gateway, @dm, @chat_id, @kind, @text, @file_path)
ON CONFLICT (agent_id, message_id) DO NOTHING
RETURNING *;

-- name: OutboxGetByMessageID :one
SELECT * FROM choir_control.outbox WHERE agent_id = @agent_id AND message_id = @message_id;

-- name: OutboxGetByID :one
SELECT * FROM choir_control.outbox WHERE outbox_id = @outbox_id;

-- name: OutboxLockChatHead :one
-- OutboxLockChatHead locks the oldest pending message of a chat queued no
-- later than outbox_id. The delivery worker sends that one first, so a
-- chat's messages go out in the order they were queued.
SELECT * FROM choir_control.outbox
 WHERE gateway = @gateway AND chat_id = @chat_id AND status = 'pending' AND outbox_id <= @outbox_id
 ORDER BY outbox_id
 LIMIT 1
 FOR UPDATE;

-- name: OutboxPartSent :one
-- OutboxPartSent records the Telegram message id of part number part (its
-- index among the message's parts) and marks the message sent after the
-- last part. The cardinality check makes a stale worker's update a no-op.
UPDATE choir_control.outbox
   SET sent_ids   = array_append(sent_ids, @sent_id::bigint),
       attempts   = attempts + 1,
       last_error = '',
       status     = CASE WHEN @last::bool THEN 'sent' ELSE status END,
       sent_at    = CASE WHEN @last::bool THEN now() END
 WHERE outbox_id = @outbox_id AND status = 'pending' AND cardinality(sent_ids) = @part::int
RETURNING *;

-- name: OutboxSendFailed :exec
-- OutboxSendFailed records a failed send that will be retried.
UPDATE choir_control.outbox
   SET attempts = attempts + 1, last_error = @last_error
 WHERE outbox_id = @outbox_id AND status = 'pending';

-- name: OutboxMarkFailed :execrows
-- OutboxMarkFailed gives up on a message that cannot be delivered.
UPDATE choir_control.outbox
   SET status = 'failed', attempts = attempts + 1, last_error = @last_error
 WHERE outbox_id = @outbox_id AND status = 'pending';
