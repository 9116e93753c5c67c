-- +goose Up
-- A delivery run marks the part of a message it is about to send, in a
-- committed row, before it sends it, and clears the mark when it records
-- the outcome. A mark that outlives its run (choird died mid-send) means
-- the part may have reached the user: the next run records it as sent
-- without sending it again, so a message is never sent twice. attempt_by
-- is the choird process that made the mark: a mark made by another process
-- is stale at once, one of this process only after the run's timeout.
ALTER TABLE choir_control.outbox
    ADD COLUMN attempt_part int,
    ADD COLUMN attempt_by uuid,
    ADD COLUMN attempt_at timestamptz;

-- +goose Down
ALTER TABLE choir_control.outbox
    DROP COLUMN attempt_part,
    DROP COLUMN attempt_by,
    DROP COLUMN attempt_at;
