-- name: ScheduleInsert :one
-- ScheduleInsert stores a new schedule. A second insert for the same
-- session and tool call (an agent retrying), or for the same idempotency
-- key (the call run again after a restart), returns no row.
INSERT INTO choir_control.schedules (agent_id, dm, kind, cron, run_at, time_zone, purpose, text, missed, start_agent,
                                     status, created_by, session_id, call_id, next_run_at, idempotency_key, sources)
VALUES (@agent_id, @dm, @kind, sqlc.narg(cron), sqlc.narg(run_at), @time_zone, @purpose, @text, @missed, @start_agent,
        @status, @created_by, sqlc.narg(session_id), sqlc.narg(call_id), sqlc.narg(next_run_at), sqlc.narg(idempotency_key),
        coalesce(sqlc.narg(sources)::text[], '{}'))
ON CONFLICT DO NOTHING
RETURNING *;

-- name: ScheduleGet :one
SELECT * FROM choir_control.schedules WHERE schedule_id = @schedule_id;

-- name: ScheduleGetByCall :one
-- ScheduleGetByCall finds the schedule a tool call made: by its session
-- and call ID, or by the call's idempotency key when it has one.
SELECT * FROM choir_control.schedules
 WHERE (session_id = @session_id AND call_id = @call_id)
    OR (agent_id = @agent_id AND idempotency_key = sqlc.narg(idempotency_key))
 ORDER BY schedule_id
 LIMIT 1;

-- name: ScheduleLock :one
-- ScheduleLock reads a schedule and locks it until the transaction ends:
-- a fire, a pause, a cancel and an approval of one schedule take turns.
SELECT * FROM choir_control.schedules WHERE schedule_id = @schedule_id FOR UPDATE;

-- name: ScheduleLockByApproval :one
SELECT * FROM choir_control.schedules WHERE approval_id = @approval_id FOR UPDATE;

-- name: ScheduleSetState :one
-- ScheduleSetState moves a schedule to status with its next run and the
-- job that makes it (both null when none is pending). Any change ends a
-- hold (ScheduleHoldStartAgent).
UPDATE choir_control.schedules
   SET status = @status, next_run_at = sqlc.narg(next_run_at), job_id = sqlc.narg(job_id), held = false,
       updated_at = now()
 WHERE schedule_id = @schedule_id
RETURNING *;

-- name: ScheduleSetApproval :exec
UPDATE choir_control.schedules SET approval_id = @approval_id, updated_at = now()
 WHERE schedule_id = @schedule_id;

-- name: ScheduleFired :one
-- ScheduleFired records a fire (counted unless it was skipped) and the
-- schedule's next run.
UPDATE choir_control.schedules
   SET fires = fires + CASE WHEN @counted::bool THEN 1 ELSE 0 END,
       last_fired_at = CASE WHEN @counted::bool THEN now() ELSE last_fired_at END,
       status = @status, next_run_at = sqlc.narg(next_run_at), job_id = sqlc.narg(job_id), updated_at = now()
 WHERE schedule_id = @schedule_id
RETURNING *;

-- name: ScheduleListOpen :many
-- ScheduleListOpen lists the schedules still to fire or waiting (pending
-- approval, active, paused), oldest first: of one agent or (agent_id null)
-- of all, and of one DM or (dm null) of all.
SELECT * FROM choir_control.schedules
 WHERE status IN ('pending_approval', 'active', 'paused')
   AND (sqlc.narg('agent_id')::text IS NULL OR agent_id = sqlc.narg('agent_id')::text)
   AND (sqlc.narg('dm')::text IS NULL OR dm = sqlc.narg('dm')::text)
 ORDER BY schedule_id
 LIMIT @max_rows;

-- name: ScheduleCountOpen :one
SELECT count(*) FROM choir_control.schedules
 WHERE agent_id = @agent_id AND status IN ('pending_approval', 'active', 'paused');

-- name: ScheduleFireInsert :one
-- ScheduleFireInsert records one fire; a second for the same schedule and
-- due time returns no row.
INSERT INTO choir_control.schedule_fires (schedule_id, due_at, fired_at, outcome)
VALUES (@schedule_id, @due_at, @fired_at, @outcome)
ON CONFLICT (schedule_id, due_at) DO NOTHING
RETURNING *;

-- name: ScheduleHoldStartAgent :many
-- ScheduleHoldStartAgent pauses the active start_agent schedules of an
-- agent a person stopped, marked held; their pending jobs, no longer
-- named by job_id, are stale and do nothing.
UPDATE choir_control.schedules
   SET status = 'paused', held = true, job_id = NULL, updated_at = now()
 WHERE agent_id = @agent_id AND start_agent AND status = 'active'
RETURNING *;

-- name: ScheduleListHeld :many
-- ScheduleListHeld locks the schedules a person's stop holds, for the
-- start that resumes them.
SELECT * FROM choir_control.schedules
 WHERE agent_id = @agent_id AND held AND status = 'paused'
 ORDER BY schedule_id
 FOR UPDATE;
