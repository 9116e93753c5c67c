-- +goose Up
-- One agent's session must not grow choir_control without bound.
--
-- ord numbers a session's replay records in the order they were saved, so
-- that ReplaySave can forget the oldest in the statement that saves the
-- newest (see queries/rpc.sql). Existing records are numbered by age.
ALTER TABLE choir_control.rpc_replays ADD COLUMN ord bigint NOT NULL DEFAULT 0;
UPDATE choir_control.rpc_replays r
   SET ord = n.ord
  FROM (SELECT session_id, request_id,
               row_number() OVER (PARTITION BY session_id ORDER BY created_at, request_id) AS ord
          FROM choir_control.rpc_replays) n
 WHERE r.session_id = n.session_id AND r.request_id = n.request_id;
ALTER TABLE choir_control.rpc_replays ALTER COLUMN ord DROP DEFAULT;
CREATE INDEX rpc_replays_ord ON choir_control.rpc_replays (session_id, ord);

-- A session's pending outbound messages are counted before each one the
-- agent queues (OutboxInsert's max_pending).
CREATE INDEX outbox_session_pending ON choir_control.outbox (session_id) WHERE status = 'pending';

-- +goose Down
DROP INDEX choir_control.outbox_session_pending;
DROP INDEX choir_control.rpc_replays_ord;
ALTER TABLE choir_control.rpc_replays DROP COLUMN ord;
