-- name: EventsAppend :copyfrom
INSERT INTO choir_control.session_events (session_id, rev, event_type, lane, payload, hash_prev, hash)
VALUES (@session_id, @rev, @event_type, @lane, @payload, @hash_prev, @hash);

-- name: EventsListAfter :many
SELECT * FROM choir_control.session_events
 WHERE session_id = @session_id AND rev > @after_rev
 ORDER BY rev
 LIMIT @max_rows;
