-- +goose Up
-- A session lasts at most a day (issue 31): at its DM's local midnight,
-- once it is idle, choird ends it and starts a successor that resumes it
-- with a fresh per-session budget. rollover_at is when the session is due
-- to roll over, armed by the rollover job with choird's clock when it
-- first sees the session; NULL is not armed yet.
ALTER TABLE choir_control.sessions ADD COLUMN rollover_at timestamptz;

-- budget_spent marks a session the agent ended because a per-session
-- budget was used up: the rollover starts its successor, with a fresh
-- budget, at the midnight after it ended.
ALTER TABLE choir_control.sessions ADD COLUMN budget_spent boolean NOT NULL DEFAULT false;

-- +goose Down
ALTER TABLE choir_control.sessions DROP COLUMN budget_spent;
ALTER TABLE choir_control.sessions DROP COLUMN rollover_at;
