-- name: ApprovalGet :one
SELECT * FROM choir_control.pending_approvals WHERE approval_id = @approval_id;

-- name: ApprovalResolve :one
-- ApprovalResolve is the one conditional UPDATE through which approve,
-- reject and timeout all go: whichever commits first wins, the others
-- update nothing and get no row.
UPDATE choir_control.pending_approvals
   SET status = CASE WHEN @approve::bool THEN 'approved' ELSE 'rejected' END,
       resolved_at = now(),
       resolved_by = @resolved_by
 WHERE approval_id = @approval_id AND status = 'pending'
RETURNING *;

-- name: ApprovalListPending :many
-- ApprovalListPending lists pending approvals, oldest first, of one agent
-- or (agent_id null) of all.
SELECT * FROM choir_control.pending_approvals
 WHERE status = 'pending'
   AND (sqlc.narg('agent_id')::text IS NULL OR agent_id = sqlc.narg('agent_id')::text)
 ORDER BY created_at, approval_id
 LIMIT @max_rows;

-- name: ApprovalForMessage :one
-- ApprovalForMessage finds the approval whose notification is the given
-- Telegram message: /approve sent in reply to it.
SELECT a.* FROM choir_control.pending_approvals a
  JOIN choir_control.outbox o ON o.approval_id = a.approval_id
 WHERE o.gateway = @gateway AND o.chat_id = @chat_id AND @message_id::bigint = ANY (o.sent_ids)
 LIMIT 1;

-- name: ApprovalOutcomePushed :exec
UPDATE choir_control.pending_approvals SET outcome_pushed_at = now()
 WHERE approval_id = @approval_id AND status <> 'pending';

-- name: ApprovalOutcomesUntaken :many
-- ApprovalOutcomesUntaken lists an agent's resolved approvals whose
-- outcome its replicated log does not show taken (outcome_taken_at, set by
-- HeartbeatApply), oldest first: pushed or not, they are pushed again to
-- a new session, which acts on each once.
SELECT * FROM choir_control.pending_approvals
 WHERE agent_id = @agent_id AND status <> 'pending' AND outcome_taken_at IS NULL
 ORDER BY resolved_at, approval_id
 LIMIT 100;

-- name: ApprovalListFiledSince :many
-- ApprovalListFiledSince lists approvals of any status filed since a
-- time, oldest first, of one agent or (agent_id null) of all: a bare
-- /approve asks which when more than one was filed lately.
SELECT * FROM choir_control.pending_approvals
 WHERE created_at >= @since
   AND (sqlc.narg('agent_id')::text IS NULL OR agent_id = sqlc.narg('agent_id')::text)
 ORDER BY created_at, approval_id
 LIMIT @max_rows;
