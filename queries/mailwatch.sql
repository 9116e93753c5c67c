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
