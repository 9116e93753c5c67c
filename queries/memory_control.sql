-- Control-plane queries of the memory pipeline (MemoryStore, the embed,
-- chunk and promote workers, choirctl memory). The queries that run inside
-- an agent's own schema are in queries/agent/.

-- name: MemoryScopeEnter :one
-- MemoryScopeEnter confines the rest of the transaction to one agent's
-- memory schema: unqualified table names resolve there (search_path), and,
-- when role is the agent's role rather than 'none', Postgres checks every
-- statement against that role's privileges. It returns the search_path in
-- force before, for MemoryScopeLeave.
SELECT current_setting('search_path')::text AS previous_search_path,
       set_config('search_path', @search_path::text, true)::text AS search_path,
       set_config('role', @role::text, true)::text AS role;

-- name: MemoryScopeLeave :exec
-- MemoryScopeLeave returns the transaction to choird's own role and the
-- given search_path, so that it can insert River jobs and complete them.
SELECT set_config('role', 'none', true), set_config('search_path', @search_path::text, true);

-- name: MemorySearchScope :one
-- MemorySearchScope is MemoryScopeEnter for hybrid search, in the same
-- round trip setting what the search needs for the transaction (see
-- MemorySearchText and MemorySearchVector): pgvector 0.8's iterative
-- index scans, so that filters applied after the HNSW scan cannot starve
-- the results, with hnsw.ef_search; no sequential scans, so that words
-- are always found through the RUM index, never checked against every
-- row; a custom plan for every execution (a generic plan would not see that the
-- vector side has no filter worth an exact scan); no JIT, whose compile
-- time exceeds the whole query's budget; and a statement_timeout, so that
-- one agent's searches cannot hold choird's connections. query_nodes is 0
-- when the text has no searchable words; lexemes are its words as
-- full-text search stores them. required_nodes counts the nodes of
-- @query_required (quoted phrases and -words) read as web search.
-- word_docs are how many documents of the store hold each lexeme, then
-- how many it holds (choir_word_docs, sql/00026_text_ranking.sql).
SELECT current_setting('search_path')::text AS previous_search_path,
       set_config('search_path', @search_path::text, true)::text AS search_path,
       set_config('role', @role::text, true)::text AS role,
       set_config('hnsw.iterative_scan', 'relaxed_order', true)::text AS iterative_scan,
       set_config('hnsw.ef_search', (@ef_search::int)::text, true)::text AS ef_search,
       set_config('enable_seqscan', 'off', true)::text AS enable_seqscan,
       set_config('plan_cache_mode', 'force_custom_plan', true)::text AS plan_cache_mode,
       set_config('jit', 'off', true)::text AS jit,
       set_config('statement_timeout', (@statement_timeout_ms::int)::text, true)::text AS statement_timeout,
       numnode(websearch_to_tsquery('english', @query_text::text))::int AS query_nodes,
       tsvector_to_array(to_tsvector('english', @query_text::text))::text[] AS lexemes,
       numnode(websearch_to_tsquery('english', @query_required::text))::int AS required_nodes,
       choir_word_docs(@stats_schema::text, @stats_store::text,
                       tsvector_to_array(to_tsvector('english', @query_text::text)))::bigint[] AS word_docs;

-- name: MemoryAgentSchemaList :many
SELECT * FROM choir_control.agent_schemas ORDER BY agent_id;

-- name: MemorySessionForChunking :one
-- MemorySessionForChunking reads what chunking needs of a session, and its
-- summary: the sessions.summary column, else the payload of its latest
-- session_summary event.
SELECT s.session_id, s.agent_id, s.status, s.started_at, s.ended_at,
       coalesce(s.summary,
                (SELECT e.payload FROM choir_control.session_events e
                  WHERE e.session_id = s.session_id AND e.event_type = 'session_summary'
                  ORDER BY e.rev DESC LIMIT 1)) AS summary
  FROM choir_control.sessions s
 WHERE s.session_id = @session_id;

-- name: MemorySessionSummaries :many
-- MemorySessionSummaries returns the summary of each given session that
-- has one, as MemorySessionForChunking finds it.
SELECT s.session_id,
       coalesce(s.summary,
                (SELECT e.payload FROM choir_control.session_events e
                  WHERE e.session_id = s.session_id AND e.event_type = 'session_summary'
                  ORDER BY e.rev DESC LIMIT 1))::jsonb AS summary
  FROM choir_control.sessions s
 WHERE s.session_id = ANY(@session_ids::uuid[]);

-- name: MemoryAgentDimensionsChange :one
SELECT choir_control.change_agent_dimensions(@agent_id::text, @dimensions::int)::bool AS changed;

-- name: MemoryPromoteLock :exec
-- MemoryPromoteLock serialises promotion runs of one agent for the rest of
-- the transaction; each step is idempotent anyway, this only avoids two
-- runs doing the same work at once.
SELECT pg_advisory_xact_lock(hashtextextended('choir.promote:' || @agent_id::text, 0));

-- name: MemoryTextQueryNodes :one
-- MemoryTextQueryNodes counts the nodes of a text query as full-text
-- search reads it: 0 when it has no searchable words (only English stop
-- words or punctuation).
SELECT numnode(websearch_to_tsquery('english', @query_text::text))::int AS nodes;

-- name: MemoryScopeCheck :exec
-- MemoryScopeCheck names a table of the schema explicitly, so that a role
-- without privileges on that schema gets Postgres' permission error
-- (search_path alone skips such a schema silently: unqualified names would
-- just not resolve).
SELECT (@schema_name::text || '.knowledge_documents')::regclass::oid;
