-- +goose Up
-- The mails choird submitted for agents through the egress gateway's mail
-- route (issue 34), one row per Message-ID of an agent: written, as
-- 'sending', before the SMTP submission, so that a request repeated after
-- a crash (the agent's, or choird's own) is answered with the first
-- outcome and never sent twice. A row still 'sending' that no running
-- choird is submitting was cut short by a crash: the account's Sent
-- folder tells whether it went out. approval_id names the approval a mail
-- went out under; an approval sends one mail (a failed try frees it).
CREATE TABLE choir_control.mail_sends (
    agent_id    choir_control.agent_id NOT NULL,
    message_id  text NOT NULL CHECK (length(message_id) BETWEEN 3 AND 250),
    account     text NOT NULL,
    session_id  uuid NOT NULL REFERENCES choir_control.sessions,
    approval_id uuid,
    recipients  text[] NOT NULL,
    status      text NOT NULL DEFAULT 'sending' CHECK (status IN ('sending', 'sent', 'failed')),
    -- error_code and error are the failure answered to every repeat.
    error_code  text,
    error       text,
    created_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    PRIMARY KEY (agent_id, message_id)
);

CREATE UNIQUE INDEX mail_sends_approval ON choir_control.mail_sends (approval_id)
 WHERE approval_id IS NOT NULL AND status <> 'failed';

-- +goose Down
DROP TABLE choir_control.mail_sends;
