-- +goose Up
-- session_overrides holds the transient model and voice overrides of one
-- session (choirctl model set / voice set, /model llm and /voice in a DM;
-- spec 17.1). They belong to the session, not to the agent, so a restart,
-- which starts a new session, reverts to the defaults or the start-time
-- overrides, as the spec asks. A table of its own rather than a column on
-- sessions keeps the sessions row, which most queries read whole, as it is.
--
-- rev counts the changes; fetched_rev is the rev the session's agent last
-- fetched with FETCH_DYNAMIC_CONFIG. While they differ the agent's config
-- is stale even when its config_version is the latest one, so a changed
-- override is never hidden behind an unchanged version.
CREATE TABLE choir_control.session_overrides (
    session_id    uuid PRIMARY KEY REFERENCES choir_control.sessions ON DELETE CASCADE,
    llm           text NOT NULL DEFAULT '',
    voice_profile text NOT NULL DEFAULT '',
    rev           bigint NOT NULL DEFAULT 1 CHECK (rev >= 1),
    fetched_rev   bigint NOT NULL DEFAULT 0 CHECK (fetched_rev >= 0 AND fetched_rev <= rev),
    set_by        text NOT NULL DEFAULT '',
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE choir_control.session_overrides;
