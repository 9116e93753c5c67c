-- +goose Up
-- rpc_replays keeps the first outcome of every mutating agent call, so a
-- call retried with the same request ID (after a timeout, a reconnect or a
-- restart of choird) returns that outcome and does nothing twice.
CREATE TABLE choir_control.rpc_replays (
    session_id  uuid NOT NULL REFERENCES choir_control.sessions,
    request_id  text NOT NULL CHECK (request_id <> ''),
    verb        text NOT NULL,
    digest      bytea NOT NULL CHECK (octet_length(digest) = 32),
    response    bytea,
    err_code    text NOT NULL DEFAULT '',
    err_message text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, request_id)
);

-- What the agent said about itself: INIT_HELLO's identity and the latest
-- REPORT_STATUS per lane, for `choirctl agent status`.
ALTER TABLE choir_control.sessions
    ADD COLUMN hello_at            timestamptz,
    ADD COLUMN image_version       text NOT NULL DEFAULT '',
    ADD COLUMN tool_manifest_hash  text NOT NULL DEFAULT '',
    ADD COLUMN skill_manifest_hash text NOT NULL DEFAULT '',
    ADD COLUMN lane_status         jsonb NOT NULL DEFAULT '{}';

-- +goose Down
ALTER TABLE choir_control.sessions
    DROP COLUMN hello_at,
    DROP COLUMN image_version,
    DROP COLUMN tool_manifest_hash,
    DROP COLUMN skill_manifest_hash,
    DROP COLUMN lane_status;
DROP TABLE choir_control.rpc_replays;
