-- +goose Up
-- A reply whose send was cut off inside the send gate (choird died after
-- marking a part as being sent, before Telegram answered) is recorded as
-- sent, never sent again on choird's own: unconfirmed_at says so. The
-- delivery worker then queues a notice to the DM, whose row names the reply
-- in resend_of and carries a [Send again] button. A press or /resend sends
-- the reply once more: one UPDATE ... WHERE resent_at IS NULL wins, and
-- resent_by says who asked ("telegram:<dm>").
ALTER TABLE choir_control.outbox
    ADD COLUMN unconfirmed_at timestamptz,
    ADD COLUMN resend_of bigint REFERENCES choir_control.outbox,
    ADD COLUMN resent_at timestamptz,
    ADD COLUMN resent_by text,
    ADD CONSTRAINT outbox_resent_unconfirmed CHECK (resent_at IS NULL OR unconfirmed_at IS NOT NULL),
    ADD CONSTRAINT outbox_resent_by CHECK ((resent_at IS NULL) = (resent_by IS NULL));
CREATE INDEX outbox_unconfirmed ON choir_control.outbox (gateway, chat_id, outbox_id)
    WHERE unconfirmed_at IS NOT NULL AND resent_at IS NULL;

-- +goose Down
DROP INDEX IF EXISTS choir_control.outbox_unconfirmed;
ALTER TABLE choir_control.outbox
    DROP CONSTRAINT outbox_resent_by,
    DROP CONSTRAINT outbox_resent_unconfirmed,
    DROP COLUMN resent_by,
    DROP COLUMN resent_at,
    DROP COLUMN resend_of,
    DROP COLUMN unconfirmed_at;
