-- name: MailSendClaim :one
-- MailSendClaim records a mail about to be submitted, unless its
-- Message-ID (or, for a mail under an approval, the approval) is already
-- recorded: no row then, and the caller reads the first one.
INSERT INTO choir_control.mail_sends (agent_id, message_id, account, session_id, approval_id, recipients)
VALUES (@agent_id, @message_id, @account, @session_id, sqlc.narg('approval_id'), @recipients::text[])
ON CONFLICT DO NOTHING
RETURNING status;

-- name: MailSendGet :one
-- MailSendGet is the record of an agent's mail by Message-ID.
SELECT * FROM choir_control.mail_sends WHERE agent_id = @agent_id AND message_id = @message_id;

-- name: MailSendByApproval :one
-- MailSendByApproval is the mail sent, or being sent, under an approval.
SELECT * FROM choir_control.mail_sends WHERE approval_id = @approval_id AND status <> 'failed';

-- name: MailSendFinish :exec
-- MailSendFinish records how a submission ended: sent, or failed with
-- the error every repeat is answered.
UPDATE choir_control.mail_sends
   SET status = @status, error_code = sqlc.narg('error_code'), error = sqlc.narg('error'), finished_at = now()
 WHERE agent_id = @agent_id AND message_id = @message_id;
