-- +goose Up
-- New mail on a leased email account whose config says wake: choird's mail
-- watcher stores one inbox row of kind 'mail' per message (gateway
-- 'mail:<account>:<agent>', update_id the folder's UIDVALIDITY << 32 | the
-- message's UID), so a message is announced to an agent once however often
-- the folder is looked at or choird restarts. It is delivered like a
-- schedule's fire: a user message that starts the agent's turn.
ALTER TABLE choir_control.inbox DROP CONSTRAINT inbox_kind_check;
ALTER TABLE choir_control.inbox ADD CONSTRAINT inbox_kind_check
    CHECK (kind IN ('message', 'inject', 'command', 'callback', 'scheduled', 'mail'));

-- +goose Down
DELETE FROM choir_control.inbox WHERE kind = 'mail';
ALTER TABLE choir_control.inbox DROP CONSTRAINT inbox_kind_check;
ALTER TABLE choir_control.inbox ADD CONSTRAINT inbox_kind_check
    CHECK (kind IN ('message', 'inject', 'command', 'callback', 'scheduled'));
