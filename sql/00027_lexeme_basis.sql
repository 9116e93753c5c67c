-- +goose Up
-- The basis of the offline embedder's IDF weights. The offline embedder
-- (daemon/embed, choir-offline-lexical-idf-v2) weighs each lexeme of a
-- document by its inverse document frequency in the agent's store, read
-- from memory_lexemes / knowledge_lexemes and lexeme_totals when the
-- document is embedded. The statistics move as documents arrive, so the
-- stored vectors drift from query vectors made with today's statistics.
-- Each agent schema gains
--   * idf_basis, per store and lexeme, the document count the store's
--     vectors were last all re-embedded with (a lexeme absent had none);
--   * idf_basis_totals, per store, the document count then and when (no
--     row: never re-embedded on drift).
-- The embedding worker measures the drift of today's IDF from the basis
-- (daemon/memory/pipeline/drift.go); when it is large, it re-embeds the
-- store and copies today's counts into the basis ("rebases"). The basis
-- is kept apart from the counts so that rebasing reads the counts without
-- locking them against the counting triggers. Only choird's role writes
-- it; the agent role reads it.
-- +goose StatementBegin
-- agent_schema_text_objects creates or completes the full-text statistics,
-- their IDF basis and the RUM indexes of agent schema s (as in sql/00026,
-- plus the basis tables).
CREATE OR REPLACE FUNCTION choir_control.agent_schema_text_objects(s text) RETURNS void
LANGUAGE plpgsql
SET client_min_messages = warning AS $$
DECLARE
    store text;
BEGIN
    EXECUTE format($f$
        CREATE TABLE IF NOT EXISTS %1$I.memory_lexemes (
            lexeme text PRIMARY KEY,
            docs   int NOT NULL
        );
        CREATE TABLE IF NOT EXISTS %1$I.knowledge_lexemes (
            lexeme text PRIMARY KEY,
            docs   int NOT NULL
        );
        CREATE TABLE IF NOT EXISTS %1$I.lexeme_totals (
            store   text PRIMARY KEY CHECK (store IN ('memory', 'knowledge')),
            docs    bigint NOT NULL,
            lexemes bigint NOT NULL
        );
        CREATE INDEX IF NOT EXISTS memory_documents_rum ON %1$I.memory_documents USING rum (tsv rum_tsvector_ops);
        CREATE INDEX IF NOT EXISTS knowledge_documents_rum ON %1$I.knowledge_documents
            USING rum (tsv rum_tsvector_ops);
        CREATE TABLE IF NOT EXISTS %1$I.idf_basis (
            store  text NOT NULL CHECK (store IN ('memory', 'knowledge')),
            lexeme text NOT NULL,
            docs   int NOT NULL,
            PRIMARY KEY (store, lexeme)
        );
        CREATE TABLE IF NOT EXISTS %1$I.idf_basis_totals (
            store    text PRIMARY KEY CHECK (store IN ('memory', 'knowledge')),
            docs     bigint NOT NULL,
            based_at timestamptz NOT NULL
        );
        GRANT SELECT ON %1$I.idf_basis, %1$I.idf_basis_totals TO %1$I;
        GRANT SELECT ON %1$I.memory_lexemes, %1$I.knowledge_lexemes, %1$I.lexeme_totals TO %1$I;
    $f$, s);
    FOREACH store IN ARRAY ARRAY['memory', 'knowledge'] LOOP
        EXECUTE format($f$
            CREATE OR REPLACE TRIGGER %2$I AFTER INSERT ON %1$I.%3$I
                REFERENCING NEW TABLE AS new_rows
                FOR EACH STATEMENT EXECUTE FUNCTION choir_control.count_lexemes(%4$L);
            CREATE OR REPLACE TRIGGER %5$I AFTER UPDATE ON %1$I.%3$I
                REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
                FOR EACH STATEMENT EXECUTE FUNCTION choir_control.count_lexemes(%4$L);
            CREATE OR REPLACE TRIGGER %6$I AFTER DELETE ON %1$I.%3$I
                REFERENCING OLD TABLE AS old_rows
                FOR EACH STATEMENT EXECUTE FUNCTION choir_control.count_lexemes(%4$L);
        $f$, s, store || '_lexemes_insert', store || '_documents', store, store || '_lexemes_update',
            store || '_lexemes_delete');
        EXECUTE format($f$
            INSERT INTO %1$I.%2$I (lexeme, docs)
            SELECT l.lexeme, count(*)::int
              FROM %1$I.%3$I d, unnest(tsvector_to_array(d.tsv)) AS l(lexeme)
             WHERE NOT EXISTS (SELECT 1 FROM %1$I.lexeme_totals WHERE store = %4$L)
             GROUP BY l.lexeme;
            INSERT INTO %1$I.lexeme_totals (store, docs, lexemes)
            SELECT %4$L, count(*), coalesce(sum(length(d.tsv)), 0) FROM %1$I.%3$I d
            ON CONFLICT (store) DO NOTHING;
        $f$, s, store || '_lexemes', store || '_documents', store);
    END LOOP;
END;
$$;

DO $$
DECLARE
    r choir_control.agent_schemas%ROWTYPE;
BEGIN
    FOR r IN SELECT * FROM choir_control.agent_schemas ORDER BY agent_id LOOP
        PERFORM choir_control.agent_schema_text_objects(r.schema_name);
    END LOOP;
END;
$$;
-- +goose StatementEnd

-- +goose Down
-- +goose StatementBegin
DO $$
DECLARE
    r choir_control.agent_schemas%ROWTYPE;
BEGIN
    FOR r IN SELECT * FROM choir_control.agent_schemas ORDER BY agent_id LOOP
        EXECUTE format($f$
            DROP TABLE IF EXISTS %1$I.idf_basis, %1$I.idf_basis_totals;
        $f$, r.schema_name);
    END LOOP;
END;
$$;
CREATE OR REPLACE FUNCTION choir_control.agent_schema_text_objects(s text) RETURNS void
LANGUAGE plpgsql
SET client_min_messages = warning AS $$
DECLARE
    store text;
BEGIN
    EXECUTE format($f$
        CREATE TABLE IF NOT EXISTS %1$I.memory_lexemes (
            lexeme text PRIMARY KEY,
            docs   int NOT NULL
        );
        CREATE TABLE IF NOT EXISTS %1$I.knowledge_lexemes (
            lexeme text PRIMARY KEY,
            docs   int NOT NULL
        );
        CREATE TABLE IF NOT EXISTS %1$I.lexeme_totals (
            store   text PRIMARY KEY CHECK (store IN ('memory', 'knowledge')),
            docs    bigint NOT NULL,
            lexemes bigint NOT NULL
        );
        CREATE INDEX IF NOT EXISTS memory_documents_rum ON %1$I.memory_documents USING rum (tsv rum_tsvector_ops);
        CREATE INDEX IF NOT EXISTS knowledge_documents_rum ON %1$I.knowledge_documents
            USING rum (tsv rum_tsvector_ops);
        GRANT SELECT ON %1$I.memory_lexemes, %1$I.knowledge_lexemes, %1$I.lexeme_totals TO %1$I;
    $f$, s);
    FOREACH store IN ARRAY ARRAY['memory', 'knowledge'] LOOP
        EXECUTE format($f$
            CREATE OR REPLACE TRIGGER %2$I AFTER INSERT ON %1$I.%3$I
                REFERENCING NEW TABLE AS new_rows
                FOR EACH STATEMENT EXECUTE FUNCTION choir_control.count_lexemes(%4$L);
            CREATE OR REPLACE TRIGGER %5$I AFTER UPDATE ON %1$I.%3$I
                REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
                FOR EACH STATEMENT EXECUTE FUNCTION choir_control.count_lexemes(%4$L);
            CREATE OR REPLACE TRIGGER %6$I AFTER DELETE ON %1$I.%3$I
                REFERENCING OLD TABLE AS old_rows
                FOR EACH STATEMENT EXECUTE FUNCTION choir_control.count_lexemes(%4$L);
        $f$, s, store || '_lexemes_insert', store || '_documents', store, store || '_lexemes_update',
            store || '_lexemes_delete');
        EXECUTE format($f$
            INSERT INTO %1$I.%2$I (lexeme, docs)
            SELECT l.lexeme, count(*)::int
              FROM %1$I.%3$I d, unnest(tsvector_to_array(d.tsv)) AS l(lexeme)
             WHERE NOT EXISTS (SELECT 1 FROM %1$I.lexeme_totals WHERE store = %4$L)
             GROUP BY l.lexeme;
            INSERT INTO %1$I.lexeme_totals (store, docs, lexemes)
            SELECT %4$L, count(*), coalesce(sum(length(d.tsv)), 0) FROM %1$I.%3$I d
            ON CONFLICT (store) DO NOTHING;
        $f$, s, store || '_lexemes', store || '_documents', store);
    END LOOP;
END;
$$;
-- +goose StatementEnd
