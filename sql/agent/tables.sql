-- The tables of one agent's memory schema, unqualified, as sqlc sees them.
--
-- This file is not a migration: choir_control.provision_agent creates these
-- tables in each schema choir_<agent_id> (sql/00004_agent_schema.sql,
-- completed by sql/00010_memory.sql), and the queries in queries/agent/ run
-- with that schema first on search_path. sqlc only needs names and types
-- from here; TestAgentTablesMatchProvisionedSchema in sql/ fails when this
-- file and the provisioned schema disagree. Vectors have no fixed size here:
-- each agent's size comes from config.json.

CREATE TABLE memory_documents (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    session_id          uuid NOT NULL,
    tier                text NOT NULL,
    chunk_index         int NOT NULL,
    text                text NOT NULL,
    tsv                 tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
    created_at          timestamptz NOT NULL DEFAULT now(),
    metadata            jsonb NOT NULL DEFAULT '{}',
    started_at          timestamptz NOT NULL DEFAULT now(),
    ended_at            timestamptz NOT NULL DEFAULT now(),
    embedding_state     text NOT NULL DEFAULT 'pending',
    embedding_error     text NOT NULL DEFAULT '',
    embedding_failed_at timestamptz,
    UNIQUE (session_id, tier, chunk_index)
);

CREATE TABLE memory_embeddings (
    document_id uuid PRIMARY KEY REFERENCES memory_documents (id) ON DELETE CASCADE,
    embedding   vector NOT NULL,
    model       text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE memory_sessions (
    session_id     uuid PRIMARY KEY,
    tier           text NOT NULL DEFAULT 'mid_term',
    started_at     timestamptz NOT NULL,
    ended_at       timestamptz NOT NULL,
    status         text NOT NULL,
    event_count    int NOT NULL,
    chunk_count    int NOT NULL,
    summary_chunks int NOT NULL DEFAULT 0,
    chunked_at     timestamptz NOT NULL DEFAULT now(),
    promoted_at    timestamptz
);

CREATE TABLE memory_event_refs (
    hash        bytea NOT NULL,
    session_id  uuid NOT NULL,
    rev         bigint NOT NULL,
    document_id uuid NOT NULL REFERENCES memory_documents (id) ON DELETE CASCADE,
    PRIMARY KEY (hash, session_id)
);

CREATE TABLE knowledge_documents (
    id                  uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    key                 text UNIQUE,
    text                text NOT NULL,
    tsv                 tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
    created_at          timestamptz NOT NULL DEFAULT now(),
    updated_at          timestamptz NOT NULL DEFAULT now(),
    metadata            jsonb NOT NULL DEFAULT '{}',
    version             int NOT NULL DEFAULT 1,
    content_hash        bytea NOT NULL,
    embedding_state     text NOT NULL DEFAULT 'pending',
    embedding_error     text NOT NULL DEFAULT '',
    embedding_failed_at timestamptz
);

CREATE TABLE knowledge_embeddings (
    document_id uuid PRIMARY KEY REFERENCES knowledge_documents (id) ON DELETE CASCADE,
    embedding   vector NOT NULL,
    model       text NOT NULL DEFAULT '',
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE knowledge_versions (
    document_id  uuid NOT NULL,
    version      int NOT NULL,
    op           text NOT NULL,
    key          text,
    text         text NOT NULL,
    metadata     jsonb NOT NULL DEFAULT '{}',
    content_hash bytea NOT NULL,
    actor        text NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (document_id, version)
);

-- Full-text statistics (sql/00026_text_ranking.sql), kept by triggers.
CREATE TABLE memory_lexemes (
    lexeme text PRIMARY KEY,
    docs   int NOT NULL
);

CREATE TABLE knowledge_lexemes (
    lexeme text PRIMARY KEY,
    docs   int NOT NULL
);

CREATE TABLE lexeme_totals (
    store   text PRIMARY KEY,
    docs    bigint NOT NULL,
    lexemes bigint NOT NULL
);

-- The IDF basis of the offline embedder's vectors (sql/00026_text_ranking.sql).
CREATE TABLE idf_basis (
    store  text NOT NULL,
    lexeme text NOT NULL,
    docs   int NOT NULL,
    PRIMARY KEY (store, lexeme)
);

CREATE TABLE idf_basis_totals (
    store    text PRIMARY KEY,
    docs     bigint NOT NULL,
    based_at timestamptz NOT NULL
);
