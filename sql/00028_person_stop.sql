-- +goose Up
-- A person's stop is final (issue 29). When a person stops an agent (a DM's
-- /stop, choirctl agent stop), the agent is held: held_by names who
-- stopped it, and choird starts it on its own (a schedule's start_agent,
-- a resume after choird restarts) only once a person has started it
-- again, which clears the hold. The check and the hold take the agent's
-- row lock, so a start and a stop never pass each other.
ALTER TABLE choir_control.agents
    ADD COLUMN held_by text,
    ADD COLUMN held_at timestamptz,
    ADD CONSTRAINT agents_held CHECK ((held_by IS NULL) = (held_at IS NULL));

-- The start_agent schedules of a held agent are paused with held set, and
-- resumed when a person starts the agent again. Any other change of the
-- schedule (a person's pause, resume or cancel) ends its hold.
ALTER TABLE choir_control.schedules ADD COLUMN held boolean NOT NULL DEFAULT false;

-- A session's budget cannot be reset by cycling sessions: a session that
-- choird starts on its own continues the session budget of the one before
-- it (budget_from), whose spend (and base) it starts from. A session a
-- person starts has a fresh budget (base 0).
ALTER TABLE choir_control.sessions
    ADD COLUMN budget_from uuid REFERENCES choir_control.sessions ON DELETE SET NULL,
    ADD COLUMN budget_base_tokens bigint NOT NULL DEFAULT 0 CHECK (budget_base_tokens >= 0),
    ADD COLUMN budget_base_cost_usd float8 NOT NULL DEFAULT 0 CHECK (budget_base_cost_usd >= 0);

-- +goose Down
ALTER TABLE choir_control.sessions DROP COLUMN budget_base_cost_usd, DROP COLUMN budget_base_tokens, DROP COLUMN budget_from;
ALTER TABLE choir_control.schedules DROP COLUMN held;
ALTER TABLE choir_control.agents DROP CONSTRAINT agents_held, DROP COLUMN held_at, DROP COLUMN held_by;
