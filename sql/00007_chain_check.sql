-- +goose Up
-- chain_breaks lists every place where an agent's replicated log is not a
-- contiguous, hash-chained sequence across its sessions: a missing
-- revision, a duplicate, or an event whose hash_prev is not its
-- predecessor's hash. An empty result is the proof that nothing
-- acknowledged was lost or altered.
CREATE VIEW choir_audit.chain_breaks AS
WITH ordered AS (
    SELECT s.agent_id, e.session_id, e.rev, e.hash_prev, e.hash,
           lag(e.rev)  OVER w AS prev_rev,
           lag(e.hash) OVER w AS prev_hash
      FROM choir_control.session_events e
      JOIN choir_control.sessions s USING (session_id)
    WINDOW w AS (PARTITION BY s.agent_id ORDER BY e.rev, e.created_at)
)
SELECT agent_id, session_id, rev, prev_rev,
       CASE WHEN rev = prev_rev THEN 'duplicate revision'
            WHEN rev <> prev_rev + 1 THEN 'gap after revision ' || prev_rev
            ELSE 'hash_prev does not match the previous hash' END AS problem
  FROM ordered
 WHERE prev_rev IS NOT NULL
   AND (rev <> prev_rev + 1 OR hash_prev <> prev_hash);

-- +goose Down
DROP VIEW choir_audit.chain_breaks;
