-- +goose Up
-- A session lasts at most a day (issue 31): at its DM's local midnight,
-- once it is idle, choird ends it and starts a successor that resumes it
-- with a fresh per-session budget. rollover_at is when the session is due
-- to roll over, armed by the rollover job with choird's clock when it
-- first sees the session; NULL is not armed yet.
ALTER TABLE choir_control.sessions ADD COLUMN rollover_at timestamptz;

-- successor_due marks a session whose successor choird owes: one the
-- rollover is ending (set before the stop, so that a choird that dies
-- between the stop and the start still starts the successor when it is
-- back), or one the agent ended because a per-session budget was used up
-- (started again at the midnight after it ended).
ALTER TABLE choir_control.sessions ADD COLUMN successor_due boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE choir_control.sessions DROP COLUMN successor_due;
ALTER TABLE choir_control.sessions DROP COLUMN rollover_at;
