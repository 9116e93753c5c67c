-- name: MailWatchTargets :many
-- MailWatchTargets lists the live sessions, past their hello, that hold an
-- email account: what choird's mail watcher may watch.
SELECT session_id, agent_id::text AS agent_id, coalesce(resource_bindings->>'dm', '')::text AS dm,
       (resource_bindings->>'email')::text AS email
  FROM choir_control.sessions
 WHERE status IN ('active', 'stopping') AND hello_at IS NOT NULL
   AND coalesce(resource_bindings->>'email', '') <> '';

-- name: InboxLastUpdate :one
-- InboxLastUpdate is the highest update id stored from a gateway between
-- two ids, 0 for none: for a mail watch, the last message announced in one
-- UIDVALIDITY of the folder (its ids are UIDVALIDITY << 32 | UID).
SELECT coalesce(max(update_id), 0)::bigint AS update_id FROM choir_control.inbox
 WHERE gateway = @gateway AND update_id BETWEEN @first_id::bigint AND @last_id::bigint;

-- name: MailMarkEnsure :one
-- MailMarkEnsure records the UIDNEXT a watch saw as it first looked at a
-- folder in a UIDVALIDITY, unless one is recorded, and returns the one
-- recorded first.
INSERT INTO choir_control.mail_marks (gateway, uid_validity, uid_next)
VALUES (@gateway, @uid_validity, @uid_next)
ON CONFLICT (gateway, uid_validity) DO UPDATE SET uid_next = choir_control.mail_marks.uid_next
RETURNING uid_next;

-- name: InboxMailWakesSince :one
-- InboxMailWakesSince counts the turns a mail watch started in the last
-- window_secs: its 'mail' rows (a held row started none), for the
-- account's wake limit. The database's clock stamped them, so it judges.
SELECT count(*)::int AS wakes FROM choir_control.inbox
 WHERE gateway = @gateway AND kind = 'mail'
   AND received_at > now() - make_interval(secs => @window_secs::float8);

-- name: SessionEventsHaveCallKey :one
-- SessionEventsHaveCallKey reports whether any session of the agent
-- committed a tool call under one of the idempotency keys: a Message-ID
-- of mail it sent (choir.email.send sends as <key@domain>).
SELECT EXISTS (
    SELECT 1 FROM choir_control.session_events e
      JOIN choir_control.sessions s ON s.session_id = e.session_id
     WHERE e.event_type = 'tool_call_committed'
       AND e.payload->>'idempotency_key' = ANY (@keys::text[])
       AND s.agent_id = @agent_id
)::bool AS sent;

-- name: InboxMailHeldTake :many
-- InboxMailHeldTake locks, in arrival order, the held mail of an agent's
-- DM that no digest has announced: what the user's next message brings
-- with it. A second transaction taking them waits, then finds them
-- announced.
SELECT * FROM choir_control.inbox
 WHERE agent_id = @agent_id AND dm = @dm AND kind = 'mail_held' AND announced_in IS NULL
 ORDER BY inbox_id
 LIMIT @max_rows
   FOR UPDATE;

-- name: InboxMailHeldAnnounce :execrows
-- InboxMailHeldAnnounce records the digest that announced held mail.
UPDATE choir_control.inbox SET announced_in = @digest_id::bigint
 WHERE inbox_id = ANY (@inbox_ids::bigint[]) AND kind = 'mail_held' AND announced_in IS NULL;
