-- name: InboxInsert :one
-- InboxInsert stores one gateway update. A second insert of the same
-- (gateway, update_id), Telegram redelivering an update, returns no row.
INSERT INTO choir_control.inbox (gateway, update_id, dm, agent_id, chat_id, user_id, kind, text, attachments, sources)
VALUES (@gateway, @update_id, @dm, sqlc.narg(agent_id), @chat_id, @user_id, @kind, @text, @attachments,
        coalesce(sqlc.narg(sources)::text[], '{}'))
ON CONFLICT (gateway, update_id) DO NOTHING
RETURNING *;

-- name: OutboxInsert :one
-- OutboxInsert stores one outbound message. A second insert with the same
-- (agent_id, message_id), the agent retrying, returns no row. A file is
-- named by its workspace and its path relative to it. With max_pending
-- above zero, a message is not stored (no row is returned) while its
-- session already has max_pending messages pending; the count reads at
-- most max_pending index entries.
INSERT INTO choir_control.outbox (agent_id, session_id, message_id, gateway, dm, chat_id, kind, text, workspace,
                                  file_path, approval_id, resend_of)
SELECT @agent_id, sqlc.narg(session_id), @message_id, @gateway, @dm, @chat_id, @kind, @text, @workspace,
       @file_path, sqlc.narg(approval_id), sqlc.narg(resend_of)
 WHERE @max_pending::int <= 0
    OR (SELECT count(*) FROM (SELECT 1 FROM choir_control.outbox o
                               WHERE o.session_id = sqlc.narg(session_id) AND o.status = 'pending'
                               LIMIT @max_pending::int) p) < @max_pending::int
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

-- name: OutboxAttemptBegin :execrows
-- OutboxAttemptBegin marks part number part as being sent by the choird
-- process attempt_by, committed before the request can take effect (the
-- delivery worker's send gate; see OutboxPartSent). It marks nothing when
-- another run has marked the part already.
UPDATE choir_control.outbox
   SET attempt_part = @part::int, attempt_by = @attempt_by::uuid, attempt_at = now()
 WHERE outbox_id = @outbox_id AND status = 'pending' AND cardinality(sent_ids) = @part::int
   AND attempt_part IS NULL;

-- name: OutboxPartSent :one
-- OutboxPartSent records the Telegram message id of part number part (its
-- index among the message's parts) and marks the message sent after the
-- last part. A part whose send was interrupted, which may have reached
-- the user and is not sent again, is recorded with sent_id 0 and
-- unconfirmed true: that marks the message unconfirmed (see
-- OutboxResendClaim). It clears the attempt mark. The cardinality check
-- makes a stale worker's update a no-op.
UPDATE choir_control.outbox
   SET sent_ids   = array_append(sent_ids, @sent_id::bigint),
       attempts   = attempts + 1,
       last_error = '',
       attempt_part = NULL, attempt_by = NULL, attempt_at = NULL,
       unconfirmed_at = CASE WHEN @unconfirmed::bool THEN coalesce(unconfirmed_at, now()) ELSE unconfirmed_at END,
       status     = CASE WHEN @last::bool THEN 'sent' ELSE status END,
       sent_at    = CASE WHEN @last::bool THEN now() END
 WHERE outbox_id = @outbox_id AND status = 'pending' AND cardinality(sent_ids) = @part::int
RETURNING *;

-- name: OutboxSendFailed :exec
-- OutboxSendFailed records a failed send that will be retried, and
-- clears the attempt mark: the part did not reach the user.
UPDATE choir_control.outbox
   SET attempts = attempts + 1, last_error = @last_error,
       attempt_part = NULL, attempt_by = NULL, attempt_at = NULL
 WHERE outbox_id = @outbox_id AND status = 'pending';

-- name: OutboxMarkFailed :execrows
-- OutboxMarkFailed gives up on a message that cannot be delivered.
UPDATE choir_control.outbox
   SET status = 'failed', attempts = attempts + 1, last_error = @last_error,
       attempt_part = NULL, attempt_by = NULL, attempt_at = NULL
 WHERE outbox_id = @outbox_id AND status = 'pending';

-- name: OutboxUnconfirmedList :many
-- OutboxUnconfirmedList lists, newest first, the texts to one chat of one
-- DM whose send was cut off and that nobody has asked to send again (a
-- file cannot be sent again: choird no longer holds it).
SELECT * FROM choir_control.outbox
 WHERE gateway = @gateway AND chat_id = @chat_id AND dm = @dm AND kind = 'text'
   AND unconfirmed_at IS NOT NULL AND resent_at IS NULL
 ORDER BY outbox_id DESC
 LIMIT @max_rows;

-- name: OutboxResendClaim :one
-- OutboxResendClaim records that a person asked to send an unconfirmed
-- message again. Only the chat and DM it was sent to may ask, only a text
-- can be sent again, and only once: of two presses, or a press and a
-- /resend, exactly one gets the row back.
UPDATE choir_control.outbox
   SET resent_at = now(), resent_by = @resent_by::text
 WHERE outbox_id = @outbox_id AND gateway = @gateway AND chat_id = @chat_id AND dm = @dm
   AND kind = 'text' AND unconfirmed_at IS NOT NULL AND resent_at IS NULL
RETURNING *;

-- name: InboxGet :one
SELECT * FROM choir_control.inbox WHERE inbox_id = @inbox_id;

-- name: InboxPending :many
-- InboxPending lists the undelivered messages for a push to a session of
-- agent_id, in arrival order: those never pushed, and those pushed before
-- pushed_before (a push that seems lost, or went to a session that ended).
-- Only the rows from the DM the session is bound to are listed: a DM
-- reaches only the session holding its lease, so a row from another DM
-- waits until the agent runs bound to that DM again. Held mail is never
-- pushed itself: the digest that announces it is.
SELECT * FROM choir_control.inbox
 WHERE inbox.agent_id = @agent_id AND inbox.delivered_at IS NULL AND inbox.kind <> 'mail_held'
   AND inbox.dm = (SELECT s.resource_bindings->>'dm' FROM choir_control.sessions s
                    WHERE s.session_id = @session_id AND s.agent_id = inbox.agent_id)
   AND (inbox.pushed_at IS NULL OR inbox.pushed_at < @pushed_before)
 ORDER BY inbox.inbox_id
 LIMIT @max_rows;

-- name: InboxMarkPushed :exec
UPDATE choir_control.inbox SET pushed_at = now(), session_id = @session_id
 WHERE inbox_id = @inbox_id AND delivered_at IS NULL;

-- name: InboxAgentsWithPending :many
-- InboxAgentsWithPending lists the agents with messages that need a push.
SELECT DISTINCT agent_id::text FROM choir_control.inbox
 WHERE delivered_at IS NULL AND kind <> 'mail_held' AND agent_id IS NOT NULL
   AND (pushed_at IS NULL OR pushed_at < @pushed_before);

-- name: OutboxAfter :many
-- OutboxAfter reads an agent's outbound messages after a cursor, for
-- choirctl chat.
SELECT * FROM choir_control.outbox
 WHERE agent_id = @agent_id AND outbox_id > @after
 ORDER BY outbox_id
 LIMIT @max_rows;

-- name: DMHolder :one
-- DMHolder is the live session holding a DM's lease: the agent the DM is
-- bound to now.
SELECT s.session_id, s.agent_id::text AS agent_id FROM choir_control.resource_leases l
  JOIN choir_control.sessions s ON s.session_id = l.session_id
 WHERE l.resource_kind = 'dm' AND l.resource_name = @dm AND l.released_at IS NULL
   AND s.status IN ('active', 'stopping');

-- name: InboxGetByUpdate :one
SELECT * FROM choir_control.inbox WHERE gateway = @gateway AND update_id = @update_id;
