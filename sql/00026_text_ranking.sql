-- +goose Up
-- Full-text ranking by rarity, from an index: each agent schema gains
--   * memory_lexemes and knowledge_lexemes, how many documents of
--     memory_documents and knowledge_documents hold each full-text lexeme,
--     and lexeme_totals, how many documents each table has and how many
--     lexemes they hold together: the statistics of inverse document
--     frequency and average length that hybrid search ranks by and the
--     offline embedder weighs words with. Statement triggers keep them
--     exact as documents are inserted, changed and deleted, in the same
--     transaction;
--   * RUM indexes on both tsv columns (the rum extension, Debian's
--     postgresql-15-rum), which return a full-text query's best matches in
--     rank order from the index, without reading every match.
--   * idf_basis and idf_basis_totals, the counts the offline embedder's
--     vectors of each store were last all re-embedded with (choir-offline-
--     lexical-idf-v2 weighs a document's lexemes by their inverse document
--     frequency when it embeds it, so stored vectors drift from query
--     vectors made with today's counts): the embedding worker measures
--     the drift of today's IDF from this basis
--     (daemon/memory/pipeline/drift.go) and, when it is large, re-embeds
--     the store and copies today's counts here. The basis is kept apart
--     from the counts so that copying reads the counts without locking
--     them against the counting triggers; only choird's role writes it.
-- agent_schema_text_objects is registered as a part of provision_agent's
-- schema for new agents; this migration calls it for the agents
-- provisioned so far, counting the documents they already hold.
CREATE EXTENSION IF NOT EXISTS rum;

-- +goose StatementBegin
-- choir_word_docs returns, for each of lexemes in order, how many
-- documents of store (memory or knowledge) in agent schema p_schema hold
-- it, and then how many documents the store holds (nothing for no
-- lexemes): what hybrid search
-- ranks a query's words by (rankTerms in daemon/memory), read in the same
-- statement that enters the schema (MemorySearchScope), saving a round
-- trip. It runs with its caller's privileges: an agent role reads only
-- its own schema. It lives in public, which every role may use.
CREATE FUNCTION public.choir_word_docs(p_schema text, p_store text, p_lexemes text[]) RETURNS bigint[]
LANGUAGE plpgsql STABLE AS $$
DECLARE
    r bigint[];
BEGIN
    IF p_store IS NULL OR p_store NOT IN ('memory', 'knowledge') THEN
        RAISE EXCEPTION 'unknown store %: want memory or knowledge', quote_nullable(p_store)
            USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF coalesce(cardinality(p_lexemes), 0) = 0 THEN
        -- No words (the vector side of a search): nothing to count.
        RETURN '{}';
    END IF;
    EXECUTE format($f$
        SELECT array_append(coalesce(array_agg(coalesce(l.docs, 0)::bigint ORDER BY w.i), '{}'),
                            coalesce((SELECT t.docs FROM %1$I.lexeme_totals t WHERE t.store = $2), 0))
          FROM unnest($1::text[]) WITH ORDINALITY AS w(lexeme, i)
          LEFT JOIN %1$I.%2$I l ON l.lexeme = w.lexeme
    $f$, p_schema, p_store || '_lexemes') INTO r USING p_lexemes, p_store;
    RETURN r;
END;
$$;

-- count_lexemes is the statement trigger that keeps <store>_lexemes and
-- lexeme_totals exact (TG_ARGV[0] is the store: memory or knowledge). An
-- update counts only the rows whose tsv changed. Lexemes are upserted in
-- lexeme order, so two transactions counting documents that share words
-- lock their rows in the same order and cannot deadlock on them; a
-- removal is an upsert of a negative count (so the tables have no check
-- that counts are positive: the proposed row of an upsert is checked
-- before it meets the existing one), and lexemes left in no document are
-- then deleted. It runs as its owner: the agent role may read the
-- statistics, never write them.
CREATE FUNCTION choir_control.count_lexemes() RETURNS trigger
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $$
DECLARE
    store text := TG_ARGV[0];
    changes text;
BEGIN
    IF TG_OP = 'INSERT' THEN
        changes := 'SELECT tsv, 1 AS sign FROM new_rows';
    ELSIF TG_OP = 'DELETE' THEN
        changes := 'SELECT tsv, -1 AS sign FROM old_rows';
    ELSE
        changes := 'SELECT o.tsv, -1 AS sign FROM old_rows o JOIN new_rows n ON n.id = o.id
                     WHERE o.tsv IS DISTINCT FROM n.tsv
                    UNION ALL
                    SELECT n.tsv, 1 FROM old_rows o JOIN new_rows n ON n.id = o.id
                     WHERE o.tsv IS DISTINCT FROM n.tsv';
    END IF;
    EXECUTE format($f$
        WITH c AS (%3$s), counted AS (
            INSERT INTO %1$I.%2$I (lexeme, docs)
            SELECT l.lexeme, sum(c.sign)::int
              FROM c, unnest(tsvector_to_array(c.tsv)) AS l(lexeme)
             GROUP BY l.lexeme
            HAVING sum(c.sign) <> 0
             ORDER BY l.lexeme
            ON CONFLICT (lexeme) DO UPDATE SET docs = %2$I.docs + EXCLUDED.docs
            RETURNING 1
        )
        INSERT INTO %1$I.lexeme_totals AS t (store, docs, lexemes)
        SELECT $1, coalesce(sum(c.sign), 0), coalesce(sum(c.sign * length(c.tsv)), 0)
          FROM c
        ON CONFLICT (store) DO UPDATE
           SET docs = t.docs + EXCLUDED.docs, lexemes = t.lexemes + EXCLUDED.lexemes
    $f$, TG_TABLE_SCHEMA, store || '_lexemes', changes) USING store;
    IF TG_OP <> 'INSERT' THEN
        EXECUTE format('DELETE FROM %1$I.%2$I WHERE docs <= 0', TG_TABLE_SCHEMA, store || '_lexemes');
    END IF;
    RETURN NULL;
END;
$$;

-- agent_schema_text_objects creates or completes the full-text statistics,
-- their IDF basis and the RUM indexes of agent schema s. The triggers are
-- made before the statistics are counted, and making them locks the
-- tables against writes until the transaction ends, so no document is
-- counted twice or missed.
CREATE FUNCTION choir_control.agent_schema_text_objects(s text) RETURNS void
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
        GRANT SELECT ON %1$I.memory_lexemes, %1$I.knowledge_lexemes, %1$I.lexeme_totals,
            %1$I.idf_basis, %1$I.idf_basis_totals TO %1$I;
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
INSERT INTO choir_control.agent_schema_parts (part, position, fn)
VALUES ('text', 30, 'choir_control.agent_schema_text_objects(text)')
ON CONFLICT (part) DO NOTHING;
-- +goose StatementBegin
-- Bring every schema provisioned so far up to date.
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
            DROP TRIGGER IF EXISTS memory_lexemes_insert ON %1$I.memory_documents;
            DROP TRIGGER IF EXISTS memory_lexemes_update ON %1$I.memory_documents;
            DROP TRIGGER IF EXISTS memory_lexemes_delete ON %1$I.memory_documents;
            DROP TRIGGER IF EXISTS knowledge_lexemes_insert ON %1$I.knowledge_documents;
            DROP TRIGGER IF EXISTS knowledge_lexemes_update ON %1$I.knowledge_documents;
            DROP TRIGGER IF EXISTS knowledge_lexemes_delete ON %1$I.knowledge_documents;
            DROP INDEX IF EXISTS %1$I.memory_documents_rum, %1$I.knowledge_documents_rum;
            DROP TABLE IF EXISTS %1$I.memory_lexemes, %1$I.knowledge_lexemes, %1$I.lexeme_totals,
                %1$I.idf_basis, %1$I.idf_basis_totals;
        $f$, r.schema_name);
    END LOOP;
END;
$$;
DELETE FROM choir_control.agent_schema_parts WHERE part = 'text';
DROP FUNCTION choir_control.agent_schema_text_objects(text);
DROP FUNCTION choir_control.count_lexemes();
DROP FUNCTION public.choir_word_docs(text, text, text[]);
-- +goose StatementEnd
DROP EXTENSION IF EXISTS rum;
