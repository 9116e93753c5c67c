-- +goose Up
-- Mail is a stranger's words (issue 30). A new message on a watched folder
-- is stored either as a 'mail' row, which starts a turn (its sender is in
-- the account's wake_from, the loop guard and the wake limit let it), or as
-- a 'mail_held' row, which never is pushed on its own: the next message
-- the user sends takes every held row of its agent and DM into one
-- 'mail_digest' row, stored just before the user's message in the same
-- transaction, and the held rows name it (announced_in), so each held
-- message is announced once, in the user's next turn, across restarts.
--
-- sources is the provenance choird gives a row's text ("mail:bob@ext.test"),
-- pushed with it every time, so a redelivery is the first push again.
ALTER TABLE choir_control.inbox ADD COLUMN sources text[] NOT NULL DEFAULT '{}';
ALTER TABLE choir_control.inbox ADD COLUMN announced_in bigint REFERENCES choir_control.inbox;
ALTER TABLE choir_control.inbox ADD CONSTRAINT inbox_announced_held
    CHECK (announced_in IS NULL OR kind = 'mail_held');
ALTER TABLE choir_control.inbox DROP CONSTRAINT inbox_kind_check;
ALTER TABLE choir_control.inbox ADD CONSTRAINT inbox_kind_check
    CHECK (kind IN ('message', 'inject', 'command', 'callback', 'scheduled', 'mail', 'mail_held', 'mail_digest'));

-- A held row is never delivered itself (its digest is): the index of rows
-- waiting for a push leaves it out, as the queries that use it do, and the
-- held rows waiting for a digest have their own.
DROP INDEX choir_control.inbox_undelivered;
CREATE INDEX inbox_undelivered ON choir_control.inbox (agent_id, inbox_id)
    WHERE delivered_at IS NULL AND kind <> 'mail_held';
CREATE INDEX inbox_mail_held ON choir_control.inbox (agent_id, dm, inbox_id)
    WHERE kind = 'mail_held' AND announced_in IS NULL;

-- A reply to mail the agent sent never wakes it. choir.email.send sends
-- under a Message-ID made of its call's idempotency key, and that key is in
-- the intent choird acknowledged before the mail left (issue 31): the
-- mail watch finds a reply's In-Reply-To and References among the keys of
-- the agent's calls through this index.
CREATE INDEX session_events_call_key ON choir_control.session_events ((payload->>'idempotency_key'))
    WHERE event_type = 'tool_call_committed';

CREATE OR REPLACE VIEW choir_audit.inbox_waiting AS
SELECT i.inbox_id,
       i.gateway,
       i.dm,
       i.agent_id,
       i.kind,
       i.received_at,
       i.pushed_at,
       now() - i.received_at AS waiting
  FROM choir_control.inbox i
 WHERE i.delivered_at IS NULL
   AND i.agent_id IS NOT NULL
   AND i.kind IN ('message', 'inject', 'scheduled', 'mail', 'mail_digest');

-- +goose Down
CREATE OR REPLACE VIEW choir_audit.inbox_waiting AS
SELECT i.inbox_id,
       i.gateway,
       i.dm,
       i.agent_id,
       i.kind,
       i.received_at,
       i.pushed_at,
       now() - i.received_at AS waiting
  FROM choir_control.inbox i
 WHERE i.delivered_at IS NULL
   AND i.agent_id IS NOT NULL
   AND i.kind IN ('message', 'inject', 'scheduled', 'mail');
DROP INDEX choir_control.session_events_call_key;
DROP INDEX choir_control.inbox_mail_held;
DROP INDEX choir_control.inbox_undelivered;
CREATE INDEX inbox_undelivered ON choir_control.inbox (agent_id, inbox_id)
    WHERE delivered_at IS NULL;
DELETE FROM choir_control.inbox WHERE kind = 'mail_held';
DELETE FROM choir_control.inbox WHERE kind = 'mail_digest';
ALTER TABLE choir_control.inbox DROP CONSTRAINT inbox_kind_check;
ALTER TABLE choir_control.inbox ADD CONSTRAINT inbox_kind_check
    CHECK (kind IN ('message', 'inject', 'command', 'callback', 'scheduled', 'mail'));
ALTER TABLE choir_control.inbox DROP CONSTRAINT inbox_announced_held;
ALTER TABLE choir_control.inbox DROP COLUMN announced_in;
ALTER TABLE choir_control.inbox DROP COLUMN sources;
