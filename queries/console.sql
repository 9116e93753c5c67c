-- name: ConsoleTokenInsert :exec
INSERT INTO choir_control.console_tokens (token_hash, created_by, expires_at)
VALUES (@token_hash, @created_by, @expires_at);

-- name: ConsoleTokenUse :one
-- Marks a one-time token used; only one exchange wins, and only before it
-- expires.
UPDATE choir_control.console_tokens
   SET used_at = now()
 WHERE token_hash = @token_hash
   AND used_at IS NULL
   AND expires_at > now()
RETURNING created_by;

-- name: ConsoleTokensPrune :exec
DELETE FROM choir_control.console_tokens
 WHERE expires_at < now() - interval '1 day';

-- name: ConsoleSessionInsert :exec
INSERT INTO choir_control.console_sessions (session_id, secret_hash, csrf, created_by, user_agent, expires_at)
VALUES (@session_id, @secret_hash, @csrf, @created_by, @user_agent, @expires_at);

-- name: ConsoleSessionBySecret :one
-- A live session by its secret's hash, seen now.
UPDATE choir_control.console_sessions
   SET last_seen_at = now()
 WHERE secret_hash = @secret_hash
   AND revoked_at IS NULL
   AND expires_at > now()
RETURNING session_id, csrf, expires_at;

-- name: ConsoleSessionList :many
SELECT session_id, created_by, user_agent, created_at, last_seen_at, expires_at, revoked_at, revoked_by
  FROM choir_control.console_sessions
 WHERE expires_at > now() - interval '1 day'
 ORDER BY created_at DESC;

-- name: ConsoleSessionRevoke :many
-- Revokes the live sessions whose id starts with the prefix given.
UPDATE choir_control.console_sessions
   SET revoked_at = now(), revoked_by = @revoked_by::text
 WHERE session_id::text LIKE @prefix::text || '%'
   AND revoked_at IS NULL
   AND expires_at > now()
RETURNING session_id;

-- name: ConsoleSessionsPrune :exec
-- Sessions are kept a month past their end, so that an audit actor
-- console:<prefix> can still be looked up.
DELETE FROM choir_control.console_sessions
 WHERE expires_at < now() - interval '30 days';
