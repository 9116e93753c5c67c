-- +goose Up
-- Memory pipeline and hybrid search: per-agent schemas gain
--   * embedding bookkeeping on documents (embedding_state: pending, embedded,
--     failed after the last retry, or none for long_term_detail chunks whose
--     vectors were dropped), so "rows waiting for vectors" is an index scan;
--   * the time span and event references of session chunks (range and hash
--     modes), and memory_sessions, the ledger of sessions in memory and their
--     tier, which makes chunking and promotion idempotent;
--   * knowledge_versions, every state a knowledge document has had, which
--     the agent role may read and append to but never rewrite;
--   * indexes for the recency-capped full-text side of hybrid search.
--
-- agent_schema_objects, which creates every object with IF NOT EXISTS,
-- is registered as a part of provision_agent's schema: new agents and
-- agents provisioned before end up with the same schema, and this
-- migration upgrades the schemas already provisioned by provisioning each
-- of them again.

-- +goose StatementBegin
-- text_sha256 is the SHA-256 of a text's UTF-8 bytes: the content hash of
-- knowledge documents and their versions. convert_to is only STABLE, since
-- in general it depends on the database encoding; with UTF8 as both source
-- and target it is deterministic, which makes IMMUTABLE (needed for a
-- generated column) true.
CREATE FUNCTION choir_control.text_sha256(t text) RETURNS bytea
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT sha256(convert_to(t, 'UTF8'))
$$;

-- agent_schema_objects creates or completes every table, column, index and
-- grant of one agent's memory schema s with vectors of p_dimensions. Every
-- statement is idempotent; columns added after the first version of the
-- schema are added only when missing, so a current schema takes no table
-- lock beyond the brief ones of CREATE INDEX IF NOT EXISTS.
CREATE FUNCTION choir_control.agent_schema_objects(s text, p_dimensions int) RETURNS void
LANGUAGE plpgsql
SET client_min_messages = warning AS $$
DECLARE
    upgraded_memory    bool := false;
    upgraded_knowledge bool := false;
BEGIN
    EXECUTE format($f$
        CREATE TABLE IF NOT EXISTS %1$I.memory_documents (
            id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            session_id          uuid NOT NULL,
            tier                text NOT NULL CHECK (tier IN ('mid_term', 'long_term_summary', 'long_term_detail')),
            chunk_index         int NOT NULL CHECK (chunk_index >= 0),
            text                text NOT NULL,
            tsv                 tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
            created_at          timestamptz NOT NULL DEFAULT now(),
            metadata            jsonb NOT NULL DEFAULT '{}',
            started_at          timestamptz NOT NULL DEFAULT now(),
            ended_at            timestamptz NOT NULL DEFAULT now(),
            embedding_state     text NOT NULL DEFAULT 'pending'
                                CHECK (embedding_state IN ('pending', 'embedded', 'failed', 'none')),
            embedding_error     text NOT NULL DEFAULT '',
            embedding_failed_at timestamptz,
            UNIQUE (session_id, tier, chunk_index)
        );
        CREATE TABLE IF NOT EXISTS %1$I.knowledge_documents (
            id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            key                 text UNIQUE CHECK (key <> ''),
            text                text NOT NULL,
            tsv                 tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
            created_at          timestamptz NOT NULL DEFAULT now(),
            updated_at          timestamptz NOT NULL DEFAULT now(),
            metadata            jsonb NOT NULL DEFAULT '{}',
            version             int NOT NULL DEFAULT 1 CHECK (version >= 1),
            content_hash        bytea NOT NULL GENERATED ALWAYS AS (choir_control.text_sha256(text)) STORED,
            embedding_state     text NOT NULL DEFAULT 'pending'
                                CHECK (embedding_state IN ('pending', 'embedded', 'failed')),
            embedding_error     text NOT NULL DEFAULT '',
            embedding_failed_at timestamptz
        );
    $f$, s);

    -- Schemas provisioned before this version lack the later columns.
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = format('%I.memory_documents', s)::regclass
                      AND attname = 'embedding_state' AND NOT attisdropped) THEN
        upgraded_memory := true;
        EXECUTE format($f$
            ALTER TABLE %1$I.memory_documents
                ADD COLUMN started_at          timestamptz NOT NULL DEFAULT now(),
                ADD COLUMN ended_at            timestamptz NOT NULL DEFAULT now(),
                ADD COLUMN embedding_state     text NOT NULL DEFAULT 'pending'
                           CHECK (embedding_state IN ('pending', 'embedded', 'failed', 'none')),
                ADD COLUMN embedding_error     text NOT NULL DEFAULT '',
                ADD COLUMN embedding_failed_at timestamptz;
            UPDATE %1$I.memory_documents SET started_at = created_at, ended_at = created_at;
            UPDATE %1$I.memory_documents d SET embedding_state = 'embedded'
             WHERE EXISTS (SELECT 1 FROM %1$I.memory_embeddings e WHERE e.document_id = d.id);
            DELETE FROM %1$I.memory_embeddings e USING %1$I.memory_documents d
             WHERE d.id = e.document_id AND d.tier = 'long_term_detail';
            UPDATE %1$I.memory_documents SET embedding_state = 'none' WHERE tier = 'long_term_detail';
        $f$, s);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                    WHERE attrelid = format('%I.knowledge_documents', s)::regclass
                      AND attname = 'embedding_state' AND NOT attisdropped) THEN
        upgraded_knowledge := true;
        EXECUTE format($f$
            ALTER TABLE %1$I.knowledge_documents
                ADD COLUMN version             int NOT NULL DEFAULT 1 CHECK (version >= 1),
                ADD COLUMN content_hash        bytea NOT NULL
                           GENERATED ALWAYS AS (choir_control.text_sha256(text)) STORED,
                ADD COLUMN embedding_state     text NOT NULL DEFAULT 'pending'
                           CHECK (embedding_state IN ('pending', 'embedded', 'failed')),
                ADD COLUMN embedding_error     text NOT NULL DEFAULT '',
                ADD COLUMN embedding_failed_at timestamptz;
            UPDATE %1$I.knowledge_documents d SET embedding_state = 'embedded'
             WHERE EXISTS (SELECT 1 FROM %1$I.knowledge_embeddings e WHERE e.document_id = d.id);
        $f$, s);
    END IF;
    -- A long_term_detail chunk never has a vector; every other chunk wants
    -- one. Named, so that the upgrade above can add it once.
    IF NOT EXISTS (SELECT 1 FROM pg_constraint
                    WHERE conrelid = format('%I.memory_documents', s)::regclass
                      AND conname = 'memory_documents_detail_has_no_vector') THEN
        EXECUTE format($f$
            ALTER TABLE %1$I.memory_documents ADD CONSTRAINT memory_documents_detail_has_no_vector
                CHECK ((tier = 'long_term_detail') = (embedding_state = 'none'));
        $f$, s);
    END IF;

    EXECUTE format($f$
        CREATE INDEX IF NOT EXISTS memory_documents_tsv ON %1$I.memory_documents USING gin (tsv);
        CREATE INDEX IF NOT EXISTS memory_documents_tier ON %1$I.memory_documents (tier, created_at);
        -- Hybrid search adds the matches among the newest chunks to its
        -- full-text candidates, read newest first (queries/agent/memory.sql).
        CREATE INDEX IF NOT EXISTS memory_documents_recent ON %1$I.memory_documents (created_at DESC, id);
        CREATE INDEX IF NOT EXISTS memory_documents_session ON %1$I.memory_documents (session_id, chunk_index);
        CREATE INDEX IF NOT EXISTS memory_documents_span ON %1$I.memory_documents (started_at);
        CREATE INDEX IF NOT EXISTS memory_documents_embedding_pending ON %1$I.memory_documents (created_at)
            WHERE embedding_state = 'pending';
        CREATE INDEX IF NOT EXISTS memory_documents_embedding_failed ON %1$I.memory_documents (embedding_failed_at)
            WHERE embedding_state = 'failed';

        CREATE TABLE IF NOT EXISTS %1$I.memory_embeddings (
            document_id uuid PRIMARY KEY REFERENCES %1$I.memory_documents (id) ON DELETE CASCADE,
            embedding   vector(%2$s) NOT NULL,
            model       text NOT NULL DEFAULT '',
            created_at  timestamptz NOT NULL DEFAULT now()
        );
        -- Only mid_term and long_term_summary chunks have vectors, so this
        -- index is the tier-filtered one without being partial.
        CREATE INDEX IF NOT EXISTS memory_embeddings_hnsw ON %1$I.memory_embeddings
            USING hnsw (embedding vector_cosine_ops);

        -- memory_sessions records each session whose events are in memory:
        -- a row exists once it is chunked (so chunking twice is a no-op) and
        -- its tier moves from mid_term to long_term exactly once.
        CREATE TABLE IF NOT EXISTS %1$I.memory_sessions (
            session_id     uuid PRIMARY KEY,
            tier           text NOT NULL DEFAULT 'mid_term' CHECK (tier IN ('mid_term', 'long_term')),
            started_at     timestamptz NOT NULL,
            ended_at       timestamptz NOT NULL,
            status         text NOT NULL,
            event_count    int NOT NULL CHECK (event_count >= 0),
            chunk_count    int NOT NULL CHECK (chunk_count >= 0),
            summary_chunks int NOT NULL DEFAULT 0 CHECK (summary_chunks >= 0),
            chunked_at     timestamptz NOT NULL DEFAULT now(),
            promoted_at    timestamptz,
            CHECK ((tier = 'long_term') = (promoted_at IS NOT NULL))
        );
        CREATE INDEX IF NOT EXISTS memory_sessions_mid_term ON %1$I.memory_sessions (ended_at DESC, session_id)
            WHERE tier = 'mid_term';

        -- memory_event_refs maps each chunked event's chain hash to its chunk,
        -- for the hash mode of choir.memory.query (prefix lookups are ranges
        -- of this primary key). Hashes differ between sessions in practice;
        -- the key does not rely on it.
        CREATE TABLE IF NOT EXISTS %1$I.memory_event_refs (
            hash        bytea NOT NULL CHECK (octet_length(hash) = 32),
            session_id  uuid NOT NULL,
            rev         bigint NOT NULL,
            document_id uuid NOT NULL REFERENCES %1$I.memory_documents (id) ON DELETE CASCADE,
            PRIMARY KEY (hash, session_id)
        );
        CREATE INDEX IF NOT EXISTS memory_event_refs_document ON %1$I.memory_event_refs (document_id);

        CREATE INDEX IF NOT EXISTS knowledge_documents_tsv ON %1$I.knowledge_documents USING gin (tsv);
        CREATE INDEX IF NOT EXISTS knowledge_documents_recent ON %1$I.knowledge_documents (updated_at DESC, id);
        CREATE INDEX IF NOT EXISTS knowledge_documents_hash ON %1$I.knowledge_documents (content_hash);
        CREATE INDEX IF NOT EXISTS knowledge_documents_embedding_pending ON %1$I.knowledge_documents (updated_at)
            WHERE embedding_state = 'pending';
        CREATE INDEX IF NOT EXISTS knowledge_documents_embedding_failed ON %1$I.knowledge_documents (embedding_failed_at)
            WHERE embedding_state = 'failed';

        CREATE TABLE IF NOT EXISTS %1$I.knowledge_embeddings (
            document_id uuid PRIMARY KEY REFERENCES %1$I.knowledge_documents (id) ON DELETE CASCADE,
            embedding   vector(%2$s) NOT NULL,
            model       text NOT NULL DEFAULT '',
            created_at  timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX IF NOT EXISTS knowledge_embeddings_hnsw ON %1$I.knowledge_embeddings
            USING hnsw (embedding vector_cosine_ops);

        -- knowledge_versions keeps every state of every knowledge document,
        -- deleted ones included: version n is the document after its n-th
        -- change. No foreign key, since versions outlive their document.
        CREATE TABLE IF NOT EXISTS %1$I.knowledge_versions (
            document_id  uuid NOT NULL,
            version      int NOT NULL CHECK (version >= 1),
            op           text NOT NULL CHECK (op IN ('insert', 'update', 'delete', 'restore')),
            key          text,
            text         text NOT NULL,
            metadata     jsonb NOT NULL DEFAULT '{}',
            content_hash bytea NOT NULL GENERATED ALWAYS AS (choir_control.text_sha256(text)) STORED,
            actor        text NOT NULL,
            created_at   timestamptz NOT NULL DEFAULT now(),
            PRIMARY KEY (document_id, version)
        );
        CREATE INDEX IF NOT EXISTS knowledge_versions_key ON %1$I.knowledge_versions (key, created_at);
        CREATE INDEX IF NOT EXISTS knowledge_versions_hash ON %1$I.knowledge_versions (content_hash);

        GRANT SELECT, INSERT, UPDATE, DELETE ON
            %1$I.memory_documents, %1$I.memory_embeddings, %1$I.memory_sessions, %1$I.memory_event_refs,
            %1$I.knowledge_documents, %1$I.knowledge_embeddings
            TO %1$I;
        -- History is append-only for the agent: only the admin may rewrite it.
        GRANT SELECT, INSERT ON %1$I.knowledge_versions TO %1$I;
        REVOKE UPDATE, DELETE, TRUNCATE ON %1$I.knowledge_versions FROM %1$I;
    $f$, s, p_dimensions);

    IF upgraded_knowledge THEN
        -- Documents written before versions were kept get their current
        -- state as version 1, so that history starts somewhere.
        EXECUTE format($f$
            INSERT INTO %1$I.knowledge_versions (document_id, version, op, key, text, metadata, actor, created_at)
            SELECT id, version, 'insert', key, text, metadata, 'migration', updated_at
              FROM %1$I.knowledge_documents
            ON CONFLICT DO NOTHING;
        $f$, s);
    END IF;
END;
$$;

-- change_agent_dimensions switches one agent's embeddings to vectors of
-- p_dimensions: it drops every stored vector (they cannot be converted),
-- retypes the columns, rebuilds the (then empty) HNSW indexes and records
-- the new size. The caller marks the documents pending and enqueues their
-- embedding in the same transaction (choirctl memory reembed). Returns
-- false when the schema already has that size.
CREATE FUNCTION choir_control.change_agent_dimensions(p_agent_id text, p_dimensions int) RETURNS bool
LANGUAGE plpgsql
SET client_min_messages = warning AS $$
DECLARE
    r choir_control.agent_schemas%ROWTYPE;
BEGIN
    IF p_dimensions IS NULL OR p_dimensions < 1 OR p_dimensions > 2000 THEN
        RAISE EXCEPTION 'invalid embedding dimensions % for agent %: HNSW indexes vectors of 1 to 2000 dimensions',
            p_dimensions, p_agent_id USING ERRCODE = 'invalid_parameter_value';
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('choir.provision:' || p_agent_id, 0));
    SELECT * INTO r FROM choir_control.agent_schemas WHERE agent_id = p_agent_id;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'agent % has no memory schema', p_agent_id
            USING ERRCODE = 'undefined_object', HINT = 'choird provisions configured agents at start-up';
    END IF;
    IF r.dimensions = p_dimensions THEN
        RETURN false;
    END IF;
    EXECUTE format($f$
        DROP INDEX IF EXISTS %1$I.memory_embeddings_hnsw;
        DROP INDEX IF EXISTS %1$I.knowledge_embeddings_hnsw;
        TRUNCATE %1$I.memory_embeddings, %1$I.knowledge_embeddings;
        ALTER TABLE %1$I.memory_embeddings ALTER COLUMN embedding TYPE vector(%2$s);
        ALTER TABLE %1$I.knowledge_embeddings ALTER COLUMN embedding TYPE vector(%2$s);
        CREATE INDEX memory_embeddings_hnsw ON %1$I.memory_embeddings USING hnsw (embedding vector_cosine_ops);
        CREATE INDEX knowledge_embeddings_hnsw ON %1$I.knowledge_embeddings USING hnsw (embedding vector_cosine_ops);
        UPDATE %1$I.memory_documents SET embedding_state = 'pending', embedding_error = '', embedding_failed_at = NULL
         WHERE embedding_state = 'embedded';
        UPDATE %1$I.knowledge_documents SET embedding_state = 'pending', embedding_error = '', embedding_failed_at = NULL
         WHERE embedding_state = 'embedded';
    $f$, r.schema_name, p_dimensions);
    UPDATE choir_control.agent_schemas SET dimensions = p_dimensions WHERE agent_id = p_agent_id;
    RETURN true;
END;
$$;

-- +goose StatementEnd
INSERT INTO choir_control.agent_schema_parts (part, position, fn)
VALUES ('memory', 20, 'choir_control.agent_schema_objects(text,int)')
ON CONFLICT (part) DO NOTHING;
-- +goose StatementBegin
-- Bring every schema provisioned so far up to date.
DO $$
DECLARE
    r choir_control.agent_schemas%ROWTYPE;
BEGIN
    FOR r IN SELECT * FROM choir_control.agent_schemas ORDER BY agent_id LOOP
        PERFORM choir_control.provision_agent(r.agent_id, r.dimensions);
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
-- Remove what Up added to each agent schema, and its part of new ones.
DO $$
DECLARE
    r choir_control.agent_schemas%ROWTYPE;
BEGIN
    FOR r IN SELECT * FROM choir_control.agent_schemas ORDER BY agent_id LOOP
        EXECUTE format($f$
            DROP TABLE IF EXISTS %1$I.knowledge_versions, %1$I.memory_event_refs, %1$I.memory_sessions;
            DROP INDEX IF EXISTS %1$I.memory_documents_recent, %1$I.memory_documents_session,
                %1$I.memory_documents_span, %1$I.memory_documents_embedding_pending,
                %1$I.memory_documents_embedding_failed, %1$I.knowledge_documents_recent,
                %1$I.knowledge_documents_hash, %1$I.knowledge_documents_embedding_pending,
                %1$I.knowledge_documents_embedding_failed;
            ALTER TABLE %1$I.memory_documents
                DROP CONSTRAINT IF EXISTS memory_documents_detail_has_no_vector,
                DROP COLUMN IF EXISTS started_at, DROP COLUMN IF EXISTS ended_at,
                DROP COLUMN IF EXISTS embedding_state, DROP COLUMN IF EXISTS embedding_error,
                DROP COLUMN IF EXISTS embedding_failed_at;
            ALTER TABLE %1$I.knowledge_documents
                DROP COLUMN IF EXISTS version, DROP COLUMN IF EXISTS content_hash,
                DROP COLUMN IF EXISTS embedding_state, DROP COLUMN IF EXISTS embedding_error,
                DROP COLUMN IF EXISTS embedding_failed_at;
        $f$, r.schema_name);
    END LOOP;
END;
$$;
-- +goose StatementEnd
DELETE FROM choir_control.agent_schema_parts WHERE part = 'memory';
DROP FUNCTION choir_control.change_agent_dimensions(text, int);
DROP FUNCTION choir_control.agent_schema_objects(text, int);
DROP FUNCTION choir_control.text_sha256(text);
