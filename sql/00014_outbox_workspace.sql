-- +goose Up
-- An outbox row names its file by the workspace that holds it (its name in
-- config.json) and a path relative to that workspace, below .choirtmp/send:
-- choird opens and removes the file through an os.Root on the workspace's
-- directory as configured, never by a host path an agent could have
-- steered. Rows queued before this migration keep workspace '' and an
-- absolute file_path; the delivery worker maps such a path onto the
-- configured workspace it lies in.
ALTER TABLE choir_control.outbox
    ADD COLUMN workspace text NOT NULL DEFAULT '',
    ADD CONSTRAINT outbox_file_in_workspace
        CHECK (workspace = '' OR (file_path <> '' AND file_path NOT LIKE '/%'));

-- +goose Down
ALTER TABLE choir_control.outbox DROP COLUMN workspace;
