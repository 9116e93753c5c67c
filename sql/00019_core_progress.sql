-- +goose Up
-- The live progress message of each core job (spec 7.4): one Telegram
-- message per job of a session, in the session's DM, edited in place as
-- the job advances. Its id is kept here so that a restarted choird edits
-- the same message instead of sending another; shown is the text the
-- message last showed (an edit to the same text is skipped), final whether
-- that text was the job's last state. A session resumed in a successor
-- (choird restarted, or the agent recovered) takes over the message of a
-- job that had not finished, under its own session id.
--
-- Progress is best effort, outside the outbox's exactly-once promise: a
-- choird killed between Telegram's answer to sendMessage and the write of
-- this row leaves that message orphaned, and the job gets a new one.
CREATE TABLE choir_control.core_progress (
    session_id uuid   NOT NULL REFERENCES choir_control.sessions ON DELETE CASCADE,
    job_name   text   NOT NULL CHECK (job_name <> ''),
    gateway    text   NOT NULL,
    chat_id    text   NOT NULL,
    message_id bigint NOT NULL CHECK (message_id > 0),
    shown      text   NOT NULL,
    final      boolean NOT NULL DEFAULT false,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, job_name)
);

-- +goose Down
DROP TABLE choir_control.core_progress;
