-- +goose Up
-- agent_schemas records each agent's memory schema, so that provisioning is
-- idempotent and a later change of embedding dimensions is caught.
CREATE TABLE choir_control.agent_schemas (
    agent_id       choir_control.agent_id PRIMARY KEY REFERENCES choir_control.agents,
    schema_name    text NOT NULL UNIQUE,
    role_name      text NOT NULL UNIQUE,
    dimensions     int NOT NULL CHECK (dimensions BETWEEN 1 AND 2000),
    provisioned_at timestamptz NOT NULL DEFAULT now()
);

-- +goose StatementBegin
-- agent_schema_name maps an agent id to the name of its schema and role:
-- choir_ followed by the id with '-' replaced by '_'.
CREATE FUNCTION choir_control.agent_schema_name(p_agent_id text) RETURNS text
LANGUAGE sql IMMUTABLE STRICT AS $$
    SELECT 'choir_' || replace(p_agent_id, '-', '_')
$$;

-- provisioning: begin (00042 runs this section again on databases made
-- before it; keep it idempotent on such a database.)
--
-- agent_schema_base creates (or completes) the first objects of one
-- agent's memory schema s: memory and knowledge documents with generated
-- tsvector columns under GIN, and embeddings of vector(p_dimensions)
-- under HNSW cosine indexes, readable and writable by the agent's role.
CREATE OR REPLACE FUNCTION choir_control.agent_schema_base(s text, p_dimensions int) RETURNS void
LANGUAGE plpgsql
SET client_min_messages = warning AS $$
BEGIN
    EXECUTE format($f$
        CREATE TABLE IF NOT EXISTS %1$I.memory_documents (
            id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            session_id  uuid NOT NULL,
            tier        text NOT NULL CHECK (tier IN ('mid_term', 'long_term_summary', 'long_term_detail')),
            chunk_index int NOT NULL CHECK (chunk_index >= 0),
            text        text NOT NULL,
            tsv         tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
            created_at  timestamptz NOT NULL DEFAULT now(),
            metadata    jsonb NOT NULL DEFAULT '{}',
            UNIQUE (session_id, tier, chunk_index)
        );
        CREATE INDEX IF NOT EXISTS memory_documents_tsv ON %1$I.memory_documents USING gin (tsv);
        CREATE INDEX IF NOT EXISTS memory_documents_tier ON %1$I.memory_documents (tier, created_at);

        CREATE TABLE IF NOT EXISTS %1$I.memory_embeddings (
            document_id uuid PRIMARY KEY REFERENCES %1$I.memory_documents (id) ON DELETE CASCADE,
            embedding   vector(%2$s) NOT NULL,
            model       text NOT NULL DEFAULT '',
            created_at  timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX IF NOT EXISTS memory_embeddings_hnsw ON %1$I.memory_embeddings
            USING hnsw (embedding vector_cosine_ops);

        CREATE TABLE IF NOT EXISTS %1$I.knowledge_documents (
            id         uuid PRIMARY KEY DEFAULT gen_random_uuid(),
            key        text UNIQUE CHECK (key <> ''),
            text       text NOT NULL,
            tsv        tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, text)) STORED,
            created_at timestamptz NOT NULL DEFAULT now(),
            updated_at timestamptz NOT NULL DEFAULT now(),
            metadata   jsonb NOT NULL DEFAULT '{}'
        );
        CREATE INDEX IF NOT EXISTS knowledge_documents_tsv ON %1$I.knowledge_documents USING gin (tsv);

        CREATE TABLE IF NOT EXISTS %1$I.knowledge_embeddings (
            document_id uuid PRIMARY KEY REFERENCES %1$I.knowledge_documents (id) ON DELETE CASCADE,
            embedding   vector(%2$s) NOT NULL,
            model       text NOT NULL DEFAULT '',
            created_at  timestamptz NOT NULL DEFAULT now()
        );
        CREATE INDEX IF NOT EXISTS knowledge_embeddings_hnsw ON %1$I.knowledge_embeddings
            USING hnsw (embedding vector_cosine_ops);

        GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA %1$I TO %1$I;
    $f$, s, p_dimensions);
END;
$$;

-- provision_agent creates or completes one agent's memory schema and the
-- role that owns its data access. This is its one definition: what is in
-- the schema is the parts registered in agent_schema_parts, each a
-- function that creates or completes its objects with IF NOT EXISTS, run
-- in order; a migration that adds to the schema registers a part (and its
-- down unregisters it) instead of rewriting this function. The embedding
-- dimensions are checked first: a count other than the one the schema was
-- made with is refused, since the stored vectors would have to be
-- re-embedded first (choirctl memory reembed does that). Calling it again
-- is cheap and brings a schema made by an older version up to date.
--
-- The schema is owned by the caller (choird's admin role); the agent role
-- only gets USAGE and row privileges, so it can neither drop nor alter its
-- tables, and it has no privilege at all on other agents' schemas.
CREATE OR REPLACE FUNCTION choir_control.provision_agent(p_agent_id text, p_dimensions int)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    s        text := choir_control.agent_schema_name(p_agent_id);
    existing choir_control.agent_schemas%ROWTYPE;
    part     record;
BEGIN
    IF p_agent_id IS NULL OR p_agent_id !~ '^[a-z][a-z0-9_-]{0,39}$' THEN
        RAISE EXCEPTION 'invalid agent id %: want ^[a-z][a-z0-9_-]{0,39}$', quote_nullable(p_agent_id)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_dimensions IS NULL OR p_dimensions < 1 OR p_dimensions > 2000 THEN
        RAISE EXCEPTION 'invalid embedding dimensions % for agent %: HNSW indexes vectors of 1 to 2000 dimensions',
            p_dimensions, p_agent_id USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Serialise provisioning of one agent (choird and tests may race).
    PERFORM pg_advisory_xact_lock(hashtextextended('choir.provision:' || p_agent_id, 0));

    SELECT * INTO existing FROM choir_control.agent_schemas WHERE agent_id = p_agent_id;
    IF FOUND THEN
        IF existing.dimensions <> p_dimensions THEN
            RAISE EXCEPTION 'agent % memory uses vector(%), not vector(%)', p_agent_id,
                existing.dimensions, p_dimensions
                USING ERRCODE = 'invalid_parameter_value',
                      HINT = 'changing the embedding model needs a re-embedding migration: run choirctl memory reembed, '
                             || 'or keep embedding.dimensions at ' || existing.dimensions;
        END IF;
    ELSIF EXISTS (SELECT 1 FROM choir_control.agent_schemas WHERE schema_name = s) THEN
        RAISE EXCEPTION 'agent % maps to schema %, which another agent already uses', p_agent_id, s
            USING ERRCODE = 'unique_violation';
    ELSE
        INSERT INTO choir_control.agents (agent_id) VALUES (p_agent_id) ON CONFLICT DO NOTHING;
    END IF;

    -- Roles are cluster-wide: another database of the cluster may create
    -- the same role at the same moment, which is fine.
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = s) THEN
        BEGIN
            EXECUTE format('CREATE ROLE %I NOLOGIN', s);
        EXCEPTION WHEN duplicate_object OR unique_violation THEN
            NULL;
        END;
    END IF;
    -- The admin must be a member to SET LOCAL ROLE for own-agent queries.
    IF NOT pg_has_role(current_user, s, 'MEMBER') THEN
        EXECUTE format('GRANT %I TO %I', s, current_user);
    END IF;

    EXECUTE format('CREATE SCHEMA IF NOT EXISTS %I', s);
    EXECUTE format('REVOKE ALL ON SCHEMA %I FROM PUBLIC', s);
    EXECUTE format('GRANT USAGE ON SCHEMA %I TO %I', s, s);

    -- A part takes the schema's name, and its vectors' dimensions when it
    -- declares a second argument.
    FOR part IN
        SELECT p.fn::oid::regproc AS fn, pr.pronargs
          FROM choir_control.agent_schema_parts p JOIN pg_proc pr ON pr.oid = p.fn::oid
         ORDER BY p.position
    LOOP
        IF part.pronargs = 1 THEN
            EXECUTE format('SELECT %s($1)', part.fn) USING s;
        ELSE
            EXECUTE format('SELECT %s($1, $2)', part.fn) USING s, p_dimensions;
        END IF;
    END LOOP;

    INSERT INTO choir_control.agent_schemas (agent_id, schema_name, role_name, dimensions)
    VALUES (p_agent_id, s, s, p_dimensions)
    ON CONFLICT (agent_id) DO NOTHING;
    RETURN s;
END;
$$;
-- +goose StatementEnd

-- agent_schema_parts are what provision_agent creates in an agent's
-- schema, in order of position: each a function of the schema's name (and
-- dimensions) that creates or completes its objects.
CREATE TABLE IF NOT EXISTS choir_control.agent_schema_parts (
    part     text PRIMARY KEY,
    position int NOT NULL UNIQUE,
    fn       regprocedure NOT NULL
);
INSERT INTO choir_control.agent_schema_parts (part, position, fn)
VALUES ('base', 10, 'choir_control.agent_schema_base(text,int)')
ON CONFLICT (part) DO NOTHING;
-- provisioning: end

-- +goose StatementBegin
-- drop_agent_schema removes one agent's memory schema and role. It exists
-- for the down migration and for tests; choird never calls it.
CREATE FUNCTION choir_control.drop_agent_schema(p_agent_id text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    r choir_control.agent_schemas%ROWTYPE;
BEGIN
    SELECT * INTO r FROM choir_control.agent_schemas WHERE agent_id = p_agent_id;
    IF NOT FOUND THEN
        RETURN;
    END IF;
    EXECUTE format('DROP SCHEMA IF EXISTS %I CASCADE', r.schema_name);
    IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = r.role_name) THEN
        EXECUTE format('DROP OWNED BY %I', r.role_name);
        -- Roles are cluster-wide: another database of this cluster may still
        -- grant to the role, in which case it stays.
        BEGIN
            EXECUTE format('DROP ROLE %I', r.role_name);
        EXCEPTION WHEN dependent_objects_still_exist THEN
            RAISE NOTICE 'role % is still used in another database; left in place', r.role_name;
        END;
    END IF;
    DELETE FROM choir_control.agent_schemas WHERE agent_id = p_agent_id;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    a text;
BEGIN
    FOR a IN SELECT agent_id FROM choir_control.agent_schemas LOOP
        PERFORM choir_control.drop_agent_schema(a);
    END LOOP;
END;
$$;
-- +goose StatementEnd
DROP FUNCTION choir_control.drop_agent_schema(text);
DROP FUNCTION choir_control.provision_agent(text, int);
DROP TABLE choir_control.agent_schema_parts;
DROP FUNCTION choir_control.agent_schema_base(text, int);
DROP FUNCTION choir_control.agent_schema_name(text);
DROP TABLE choir_control.agent_schemas;
