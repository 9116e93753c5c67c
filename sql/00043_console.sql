-- +goose Up
-- The web console's logins (issue 32). choirctl console asks choird, over
-- the admin socket, for a one-time link: a token that is exchanged once,
-- within a minute, for a session. Only SHA-256 hashes of the token and of
-- the session's secret are stored, so that reading this table logs no one
-- in. A session's id prefix names it in the audit views
-- ("console:<prefix>"), and it may be listed and revoked.
CREATE TABLE choir_control.console_tokens (
    token_hash  bytea PRIMARY KEY,
    created_by  text NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    used_at     timestamptz
);

CREATE TABLE choir_control.console_sessions (
    session_id   uuid PRIMARY KEY,
    secret_hash  bytea NOT NULL UNIQUE,
    -- csrf is the per-session token forms carry; it authorises nothing
    -- without the session's cookie, so it is stored as it is.
    csrf         text NOT NULL,
    created_by   text NOT NULL,
    user_agent   text NOT NULL DEFAULT '',
    created_at   timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    expires_at   timestamptz NOT NULL,
    revoked_at   timestamptz,
    revoked_by   text
);

-- Who logged into the console, from where, and who ended it; actor is how
-- the session's actions appear in the other views (resolved_by of
-- choir_audit.approvals). Secrets and CSRF tokens are left out.
CREATE VIEW choir_audit.console_sessions AS
SELECT 'console:' || left(session_id::text, 8) AS actor,
       session_id,
       created_by,
       user_agent,
       created_at,
       last_seen_at,
       expires_at,
       revoked_at,
       revoked_by
  FROM choir_control.console_sessions;

-- +goose Down
DROP VIEW choir_audit.console_sessions;
DROP TABLE choir_control.console_sessions;
DROP TABLE choir_control.console_tokens;
