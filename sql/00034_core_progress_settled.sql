-- +goose Up
-- A core job's progress message must not say "reasoning" forever once the
-- session that ran the job has ended (a crash, a stop, choird restarting
-- without it) and no successor took the job over. choird settles such a
-- message (daemon/progress, the periodic core_progress_settle job): it
-- edits it to the job's last state when that state was final, else to
-- "interrupted", and records here that it did. A settled message that
-- was not final stays open to a successor that resumes the job later: it
-- takes the message over and edits it again, which clears settled_at.
ALTER TABLE choir_control.core_progress ADD COLUMN settled_at timestamptz;

-- The messages still to settle: few, and found by their session.
CREATE INDEX core_progress_unsettled ON choir_control.core_progress (session_id)
    WHERE NOT final AND settled_at IS NULL;

-- +goose Down
DROP INDEX choir_control.core_progress_unsettled;
ALTER TABLE choir_control.core_progress DROP COLUMN settled_at;
