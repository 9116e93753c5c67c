-- name: RecvFilesClaimed :many
-- RecvFilesClaimed says, of each path under .choirtmp/recv (relative to a
-- workspace), how many inbox rows name it among their attachments and
-- whether every one of them is done with it: acknowledged by the agent
-- (delivered_at, set by the heartbeat whose patch held the message) and
-- either delivered to a session that ended gracefully and owes no
-- successor (the day's rollover resumes its session, whose conversation
-- may still name the file) or acknowledged more than retention_secs ago.
-- Only rows with attachments are read.
WITH named AS (
    SELECT a->>'path' AS path, i.delivered_at, s.status, coalesce(s.successor_due, false) AS successor_due
      FROM choir_control.inbox i
      CROSS JOIN LATERAL jsonb_array_elements(i.attachments) AS a
      LEFT JOIN choir_control.sessions s ON s.session_id = i.session_id
     WHERE i.attachments <> '[]'::jsonb
       AND a->>'path' = ANY (@paths::text[])
)
SELECT p.path::text AS path,
       count(n.path)::int AS rows,
       coalesce(bool_and(n.delivered_at IS NOT NULL
                         AND ((n.status = 'ended' AND NOT n.successor_due)
                              OR n.delivered_at < now() - make_interval(secs => @retention_secs::float8))), false)::bool AS done
  FROM unnest(@paths::text[]) AS p(path)
  LEFT JOIN named n ON n.path = p.path
 GROUP BY p.path;
