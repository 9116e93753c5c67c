-- +goose Up
-- pgvector provides the vector type for memory embeddings. The migrate
-- command checks that the extension is available before it gets here, so
-- that a missing pgvector is reported with instructions, not a bare error.
CREATE EXTENSION IF NOT EXISTS vector;

-- +goose Down
DROP EXTENSION IF EXISTS vector;
