-- name: SessionChainSnapshot :one
-- SessionChainSnapshot returns the newest snapshot along a session's chain
-- of predecessors (resumed_from), at or below max_rev, with the hash of the
-- event at its revision (event_hash, NULL if there is none) to check the
-- hash it was stored with against.
WITH RECURSIVE chain AS (
    SELECT s.session_id, s.resumed_from FROM choir_control.sessions s WHERE s.session_id = @session_id
    UNION ALL
    SELECT p.session_id, p.resumed_from
      FROM choir_control.sessions p JOIN chain c ON p.session_id = c.resumed_from
)
SELECT ss.session_id, ss.rev, ss.snapshot, ss.hash AS declared_hash, ss.state_sha256, e.hash AS event_hash
  FROM choir_control.session_snapshots ss
  JOIN chain c ON c.session_id = ss.session_id
  LEFT JOIN choir_control.session_events e
         ON e.rev = ss.rev AND e.session_id IN (SELECT session_id FROM chain)
 WHERE ss.rev <= @max_rev::bigint
 ORDER BY ss.rev DESC
 LIMIT 1;

-- name: SessionChainEvents :many
-- SessionChainEvents returns the events after after_rev along a session's
-- chain of predecessors, in revision order: the tail a recovering agent
-- replays on top of its snapshot.
WITH RECURSIVE chain AS (
    SELECT s.session_id, s.resumed_from FROM choir_control.sessions s WHERE s.session_id = @session_id
    UNION ALL
    SELECT p.session_id, p.resumed_from
      FROM choir_control.sessions p JOIN chain c ON p.session_id = c.resumed_from
)
SELECT e.* FROM choir_control.session_events e JOIN chain c ON c.session_id = e.session_id
 WHERE e.rev > @after_rev::bigint
 ORDER BY e.rev;
