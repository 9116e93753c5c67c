-- name: CoreProgressFind :one
-- CoreProgressFind returns the progress message of a session's core job:
-- its own, or else the one the job had in the session this one resumed,
-- when the job had not finished there.
SELECT c.session_id, c.job_name, c.gateway, c.chat_id, c.message_id, c.shown, c.final, c.updated_at
  FROM (SELECT p.*, true AS own
          FROM choir_control.core_progress p
         WHERE p.session_id = @session_id AND p.job_name = @job_name
        UNION ALL
        SELECT p.*, false AS own
          FROM choir_control.core_progress p
          JOIN choir_control.sessions s ON s.resumed_from = p.session_id
         WHERE s.session_id = @session_id AND p.job_name = @job_name AND NOT p.final) c
 ORDER BY c.own DESC
 LIMIT 1;

-- name: CoreProgressSave :exec
-- CoreProgressSave records what a job's progress message shows, and which
-- message it is.
INSERT INTO choir_control.core_progress (session_id, job_name, gateway, chat_id, message_id, shown, final)
VALUES (@session_id, @job_name, @gateway, @chat_id, @message_id, @shown, @final)
ON CONFLICT (session_id, job_name) DO UPDATE
   SET gateway = excluded.gateway, chat_id = excluded.chat_id, message_id = excluded.message_id,
       shown = excluded.shown, final = excluded.final, updated_at = now();
