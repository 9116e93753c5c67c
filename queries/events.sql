-- name: EventsAppend :copyfrom
-- created_at is the agent's commit time: it is part of the event's hash.
INSERT INTO choir_control.session_events (session_id, rev, event_type, lane, payload, hash_prev, hash, created_at)
VALUES (@session_id, @rev, @event_type, @lane, @payload, @hash_prev, @hash, @created_at);

-- name: EventsListAfter :many
SELECT * FROM choir_control.session_events
 WHERE session_id = @session_id AND rev > @after_rev
 ORDER BY rev
 LIMIT @max_rows;
