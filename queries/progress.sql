-- name: CoreProgressFind :one
-- CoreProgressFind returns the progress message of a session's core job:
-- its own, or else the one the job had in the session this one resumed,
-- when the job had not finished there. The row of the predecessor is read
-- FOR SHARE, so a takeover waits for a settling of that message under way
-- (CoreProgressUnsettled locks it) and edits after it, never before.
SELECT c.session_id, c.job_name, c.gateway, c.chat_id, c.message_id, c.shown, c.final, c.updated_at
  FROM (SELECT p.session_id, p.job_name, p.gateway, p.chat_id, p.message_id, p.shown, p.final, p.updated_at,
               true AS own
          FROM choir_control.core_progress p
         WHERE p.session_id = @session_id AND p.job_name = @job_name
        UNION ALL
        SELECT t.session_id, t.job_name, t.gateway, t.chat_id, t.message_id, t.shown, t.final, t.updated_at,
               false AS own
          FROM (SELECT p.session_id, p.job_name, p.gateway, p.chat_id, p.message_id, p.shown, p.final, p.updated_at
                  FROM choir_control.core_progress p
                  JOIN choir_control.sessions s ON s.resumed_from = p.session_id
                 WHERE s.session_id = @session_id AND p.job_name = @job_name AND NOT p.final
                   FOR SHARE OF p) t) c
 ORDER BY c.own DESC
 LIMIT 1;

-- name: CoreProgressSave :exec
-- CoreProgressSave records what the progress message of a job shows, and which
-- message it is. A message shown anew is not settled (any more).
INSERT INTO choir_control.core_progress (session_id, job_name, gateway, chat_id, message_id, shown, final)
VALUES (@session_id, @job_name, @gateway, @chat_id, @message_id, @shown, @final)
ON CONFLICT (session_id, job_name) DO UPDATE
   SET gateway = excluded.gateway, chat_id = excluded.chat_id, message_id = excluded.message_id,
       shown = excluded.shown, final = excluded.final, updated_at = now(), settled_at = NULL;

-- name: CoreProgressUnsettled :many
-- CoreProgressUnsettled locks (skipping those locked) the progress
-- messages left behind: not final, not settled, of a session that ended
-- over settle_after_s seconds ago, and held by no live successor (one that
-- reported the job, or started under settle_after_s seconds ago and may yet).
-- With session_id and job_name it looks at the message of that job only.
-- lane_status is the last reported status of the job, if any; superseded says
-- a successor took the message over, so it is no longer tracked by this row.
SELECT p.session_id, p.job_name, p.gateway, p.chat_id, p.message_id, p.shown, s.status AS session_status,
       (s.lane_status -> ('core:' || p.job_name))::jsonb AS lane_status,
       EXISTS (SELECT 1
                 FROM choir_control.core_progress q
                 JOIN choir_control.sessions qs ON qs.session_id = q.session_id
                WHERE qs.resumed_from = p.session_id AND q.gateway = p.gateway AND q.chat_id = p.chat_id
                  AND q.message_id = p.message_id)::bool AS superseded
  FROM choir_control.core_progress p
  JOIN choir_control.sessions s ON s.session_id = p.session_id
 WHERE NOT p.final AND p.settled_at IS NULL
   AND s.status IN ('ended', 'crashed')
   AND s.ended_at < now() - make_interval(secs => @settle_after_s::float8)
   AND NOT EXISTS (
        SELECT 1 FROM choir_control.sessions n
         WHERE n.resumed_from = p.session_id AND n.status IN ('active', 'stopping')
           AND (n.lane_status -> ('core:' || p.job_name) IS NOT NULL
                OR n.started_at >= now() - make_interval(secs => @settle_after_s::float8)))
   AND (sqlc.narg('session_id')::uuid IS NULL
        OR (p.session_id = sqlc.narg('session_id')::uuid AND p.job_name = sqlc.narg('job_name')::text))
 ORDER BY p.updated_at, p.session_id, p.job_name
 LIMIT @max_rows::int
   FOR UPDATE OF p SKIP LOCKED;

-- name: CoreProgressSettle :exec
-- CoreProgressSettle records that a left-behind message was settled: it
-- shows shown now, final when that is the job's last state.
UPDATE choir_control.core_progress
   SET shown = @shown, final = @final, settled_at = now(), updated_at = now()
 WHERE session_id = @session_id AND job_name = @job_name;

-- name: CoreProgressFinalUnshown :many
-- CoreProgressFinalUnshown finds the jobs of live sessions whose last
-- reported state is final (one of done_states) while their message,
-- unchanged for over settle_after_s seconds, does not say so: choird stopped
-- before it showed the end, or gave up trying.
SELECT p.session_id, p.job_name, (s.lane_status -> ('core:' || p.job_name))::jsonb AS lane_status
  FROM choir_control.core_progress p
  JOIN choir_control.sessions s ON s.session_id = p.session_id
 WHERE NOT p.final
   AND s.status IN ('active', 'stopping')
   AND p.updated_at < now() - make_interval(secs => @settle_after_s::float8)
   AND s.lane_status -> ('core:' || p.job_name) ->> 'state' = ANY(@done_states::text[])
 ORDER BY p.updated_at
 LIMIT @max_rows::int;
