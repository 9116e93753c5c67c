-- +goose Up
-- Where a mail watch began: for each agent's watched folder (gateway
-- 'mail:<account>:<agent>', as its inbox rows) and UIDVALIDITY, the folder's
-- UIDNEXT when a watch first looked at it. Mail below it was there before
-- the agent was told of any; mail from it on, past the last notice, is new,
-- even mail that arrived while choird was down before any was announced.
CREATE TABLE choir_control.mail_marks (
    gateway      text NOT NULL,
    uid_validity bigint NOT NULL,
    uid_next     bigint NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (gateway, uid_validity)
);

-- +goose Down
DROP TABLE choir_control.mail_marks;
