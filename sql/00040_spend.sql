-- +goose Up
-- Spend reserved at the egress gateway (issue 34). Every metered call an
-- agent makes through choird's gateway (a model call, a search query,
-- speech) is a row here: reserved at its worst case before it is
-- forwarded, in the transaction that checks the agent's day caps and the
-- host-wide day caps against what is spent and reserved, then settled
-- from the provider's answer. A reservation whose call choird lost (it
-- crashed mid-call) is expired by the spend_expire job at its worst case:
-- the provider may have billed it.
--
-- The gateway's row is the call's usage record: choir_audit.usage lists
-- it once settled (kind, service, units and cost as for the log's
-- records), and leaves out the agent's own record of the same call (an
-- llm_call_committed event, or a tool's usage record, carrying the same
-- spend_key in the same session), so that every spend counts exactly
-- once whichever side reported it first.
CREATE TABLE choir_control.spend (
    spend_id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id          choir_control.agent_id NOT NULL,
    session_id        uuid NOT NULL REFERENCES choir_control.sessions,
    -- spend_key names the call in the agent's own record of it (the
    -- Choir-Spend-Key header); the gateway makes one when the agent sent
    -- none.
    spend_key         text NOT NULL CHECK (spend_key ~ '^[A-Za-z0-9_-]{1,64}$'),
    kind              text NOT NULL CHECK (kind IN ('llm', 'search', 'tts')),
    service           text NOT NULL,
    -- Attribution the agent gives (Choir-Lane, Choir-Job, Choir-Purpose):
    -- labels for the reports, never trusted for who is calling.
    lane              text,
    job_id            text,
    purpose           text,
    state             text NOT NULL DEFAULT 'reserved' CHECK (state IN ('reserved', 'settled', 'expired')),
    created_at        timestamptz NOT NULL DEFAULT now(),
    -- The starts of the days the call counts in: the agent's (midnight
    -- in its DM's zone) and the host's (UTC midnight).
    agent_day         timestamptz NOT NULL,
    host_day          timestamptz NOT NULL,
    expires_at        timestamptz NOT NULL,
    settled_at        timestamptz,
    -- The worst case held while the call is in flight.
    reserved_tokens   bigint NOT NULL CHECK (reserved_tokens >= 0),
    reserved_usd      float8 NOT NULL CHECK (reserved_usd >= 0),
    -- What was spent, once settled: tokens for a model call, queries or
    -- characters otherwise.
    unit              text NOT NULL CHECK (unit IN ('tokens', 'queries', 'characters')),
    units             bigint NOT NULL DEFAULT 0 CHECK (units >= 0),
    prompt_tokens     bigint NOT NULL DEFAULT 0 CHECK (prompt_tokens >= 0),
    completion_tokens bigint NOT NULL DEFAULT 0 CHECK (completion_tokens >= 0),
    cached_tokens     bigint NOT NULL DEFAULT 0 CHECK (cached_tokens >= 0),
    cost_usd          float8 NOT NULL DEFAULT 0 CHECK (cost_usd >= 0),
    cost_source       text,
    -- outcome says how it was settled: ok, billed_failure (the provider
    -- refused or broke off and reported usage), not_billed (an error the
    -- provider bills nothing for), worst_case (no usage could be read),
    -- expired.
    outcome           text CHECK (outcome IN ('ok', 'billed_failure', 'not_billed', 'worst_case', 'expired')),
    UNIQUE (session_id, spend_key),
    CHECK ((state = 'reserved') = (settled_at IS NULL))
);
CREATE INDEX spend_agent_created ON choir_control.spend (agent_id, created_at);
CREATE INDEX spend_created ON choir_control.spend (created_at);
CREATE INDEX spend_open ON choir_control.spend (expires_at) WHERE state = 'reserved';

-- spend_days keeps each day's ledger total per agent (scope agent:<id>,
-- days in its DM's zone) and for the host (scope host, UTC days): model
-- tokens and the cost of every kind, in two parts. The held part counts
-- every reservation at its worst case; a reservation checks the caps
-- against it locked, so a check costs the same at the day's
-- ten-thousandth call as at its first, and two calls cannot both pass on
-- the last dollar. The settled part counts what settlements changed
-- (what a call spent less its worst case, most often below zero); only
-- settlements write it, so they never wait for a reservation's lock nor
-- hold one up, and a reservation reads it as last committed. The day's
-- total is the sum of both.
CREATE TABLE choir_control.spend_days (
    scope     text NOT NULL,
    day_start timestamptz NOT NULL,
    part      text NOT NULL CHECK (part IN ('held', 'settled')),
    tokens    bigint NOT NULL DEFAULT 0,
    cost_usd  float8 NOT NULL DEFAULT 0,
    PRIMARY KEY (scope, day_start, part)
);

-- +goose StatementBegin
-- spend_reserve reserves a call's worst case if it fits under the day
-- caps, in one round trip. It locks the held part of the agent's day in
-- spend_days, then the host's (always in that order, so two calls never
-- wait on each other in a cycle), checks the caps against them plus the
-- settled parts plus the day's spend the ledger does not hold (the
-- *_other_* arguments, choir_audit.usage's other rows, which the caller
-- reads), and adds the reservation to the held parts. A cap of 0 is no cap. On refusal no
-- row is written and refused names the cap (agent_tokens, agent_usd,
-- host_tokens or host_usd), spent_* what it found spent.
CREATE FUNCTION choir_control.spend_reserve(
    p_agent_id text, p_session_id uuid, p_spend_key text, p_kind text, p_service text,
    p_lane text, p_job_id text, p_purpose text, p_expires_at timestamptz,
    p_tokens bigint, p_usd float8, p_unit text, p_units bigint,
    p_agent_day timestamptz, p_agent_tokens_cap bigint, p_agent_usd_cap float8,
    p_agent_other_tokens bigint, p_agent_other_usd float8,
    p_host_day timestamptz, p_host_tokens_cap bigint, p_host_usd_cap float8,
    p_host_other_tokens bigint, p_host_other_usd float8,
    OUT spend_id bigint, OUT refused text, OUT spent_tokens bigint, OUT spent_usd float8)
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    a_scope text := 'agent:' || p_agent_id;
    a_tokens bigint; a_usd float8; h_tokens bigint; h_usd float8;
BEGIN
    INSERT INTO choir_control.spend_days (scope, day_start, part)
    VALUES (a_scope, p_agent_day, 'held'), ('host', p_host_day, 'held')
        ON CONFLICT DO NOTHING;
    SELECT d.tokens, d.cost_usd INTO a_tokens, a_usd FROM choir_control.spend_days d
     WHERE d.scope = a_scope AND d.day_start = p_agent_day AND d.part = 'held' FOR UPDATE;
    SELECT d.tokens, d.cost_usd INTO h_tokens, h_usd FROM choir_control.spend_days d
     WHERE d.scope = 'host' AND d.day_start = p_host_day AND d.part = 'held' FOR UPDATE;
    -- The settled parts, as last committed: a settlement committing now
    -- only lowers them (unless a provider billed past a worst case).
    SELECT a_tokens + coalesce(sum(d.tokens) FILTER (WHERE d.scope = a_scope AND d.day_start = p_agent_day), 0),
           a_usd + coalesce(sum(d.cost_usd) FILTER (WHERE d.scope = a_scope AND d.day_start = p_agent_day), 0),
           h_tokens + coalesce(sum(d.tokens) FILTER (WHERE d.scope = 'host' AND d.day_start = p_host_day), 0),
           h_usd + coalesce(sum(d.cost_usd) FILTER (WHERE d.scope = 'host' AND d.day_start = p_host_day), 0)
      INTO a_tokens, a_usd, h_tokens, h_usd
      FROM choir_control.spend_days d
     WHERE d.part = 'settled' AND ((d.scope = a_scope AND d.day_start = p_agent_day)
                                   OR (d.scope = 'host' AND d.day_start = p_host_day));
    a_tokens := a_tokens + p_agent_other_tokens; a_usd := a_usd + p_agent_other_usd;
    h_tokens := h_tokens + p_host_other_tokens; h_usd := h_usd + p_host_other_usd;
    -- Token caps count model tokens: only a call that takes some is
    -- stopped by one. A cost cap already reached stops an unpriced call.
    IF p_agent_tokens_cap > 0 AND p_tokens > 0 AND a_tokens + p_tokens > p_agent_tokens_cap THEN
        refused := 'agent_tokens'; spent_tokens := a_tokens; spent_usd := a_usd; RETURN;
    END IF;
    IF p_agent_usd_cap > 0 AND (a_usd >= p_agent_usd_cap OR a_usd + p_usd > p_agent_usd_cap) THEN
        refused := 'agent_usd'; spent_tokens := a_tokens; spent_usd := a_usd; RETURN;
    END IF;
    IF p_host_tokens_cap > 0 AND p_tokens > 0 AND h_tokens + p_tokens > p_host_tokens_cap THEN
        refused := 'host_tokens'; spent_tokens := h_tokens; spent_usd := h_usd; RETURN;
    END IF;
    IF p_host_usd_cap > 0 AND (h_usd >= p_host_usd_cap OR h_usd + p_usd > p_host_usd_cap) THEN
        refused := 'host_usd'; spent_tokens := h_tokens; spent_usd := h_usd; RETURN;
    END IF;
    INSERT INTO choir_control.spend (agent_id, session_id, spend_key, kind, service, lane, job_id, purpose,
                                     agent_day, host_day, expires_at, reserved_tokens, reserved_usd, unit, units)
    VALUES (p_agent_id, p_session_id, p_spend_key, p_kind, p_service, p_lane, p_job_id, p_purpose,
            p_agent_day, p_host_day, p_expires_at, p_tokens, p_usd, p_unit, p_units)
    RETURNING choir_control.spend.spend_id INTO spend_reserve.spend_id;
    UPDATE choir_control.spend_days d SET tokens = d.tokens + p_tokens, cost_usd = d.cost_usd + p_usd
     WHERE d.scope = a_scope AND d.day_start = p_agent_day AND d.part = 'held';
    UPDATE choir_control.spend_days d SET tokens = d.tokens + p_tokens, cost_usd = d.cost_usd + p_usd
     WHERE d.scope = 'host' AND d.day_start = p_host_day AND d.part = 'held';
END
$$;
-- +goose StatementEnd

-- +goose StatementBegin
-- spend_settle records what reserved calls spent (the arrays hold one
-- call each at the same index), and adds what each spent less its worst
-- case to the settled parts of its days (the agents' first, sorted, the
-- host's last, so two batches never wait on each other in a cycle). A
-- call already settled or expired is left as it is; it returns how many
-- it settled. An expiry needs no such change: it settles a call at its
-- worst case.
CREATE FUNCTION choir_control.spend_settle(
    p_spend_ids bigint[], p_outcomes text[], p_units bigint[], p_prompt_tokens bigint[], p_completion_tokens bigint[],
    p_cached_tokens bigint[], p_costs_usd float8[], p_cost_sources text[])
RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
    n bigint;
    scopes text[]; days timestamptz[]; d_tokens bigint[]; d_usd float8[];
BEGIN
    WITH i AS (
        SELECT * FROM unnest(p_spend_ids, p_outcomes, p_units, p_prompt_tokens, p_completion_tokens, p_cached_tokens,
                             p_costs_usd, p_cost_sources)
                   AS t(spend_id, outcome, units, prompt_tokens, completion_tokens, cached_tokens, cost_usd, cost_source)
    ), s AS (
        UPDATE choir_control.spend g
           SET state = 'settled', settled_at = now(), outcome = i.outcome, units = i.units,
               prompt_tokens = i.prompt_tokens, completion_tokens = i.completion_tokens, cached_tokens = i.cached_tokens,
               cost_usd = i.cost_usd, cost_source = nullif(i.cost_source, '')
          FROM i
         WHERE g.spend_id = i.spend_id AND g.state = 'reserved'
        RETURNING g.agent_id, g.agent_day, g.host_day,
                  CASE WHEN g.kind = 'llm' THEN g.units ELSE 0 END - g.reserved_tokens AS dt,
                  g.cost_usd - g.reserved_usd AS du
    ), d AS (
        SELECT 'agent:' || s.agent_id AS scope, s.agent_day AS day, sum(s.dt)::bigint AS dt, sum(s.du)::float8 AS du
          FROM s GROUP BY 1, 2
        UNION ALL
        SELECT 'host', s.host_day, sum(s.dt)::bigint, sum(s.du)::float8 FROM s GROUP BY 2
    )
    SELECT array_agg(d.scope ORDER BY d.scope = 'host', d.scope, d.day),
           array_agg(d.day ORDER BY d.scope = 'host', d.scope, d.day),
           array_agg(d.dt ORDER BY d.scope = 'host', d.scope, d.day),
           array_agg(d.du ORDER BY d.scope = 'host', d.scope, d.day),
           (SELECT count(*) FROM s)
      INTO scopes, days, d_tokens, d_usd, n
      FROM d;
    FOR k IN 1..coalesce(array_length(scopes, 1), 0) LOOP
        INSERT INTO choir_control.spend_days AS x (scope, day_start, part, tokens, cost_usd)
        VALUES (scopes[k], days[k], 'settled', d_tokens[k], d_usd[k])
            ON CONFLICT (scope, day_start, part)
            DO UPDATE SET tokens = x.tokens + EXCLUDED.tokens, cost_usd = x.cost_usd + EXCLUDED.cost_usd;
    END LOOP;
    RETURN coalesce(n, 0);
END
$$;
-- +goose StatementEnd

CREATE OR REPLACE VIEW choir_audit.usage AS
SELECT s.agent_id,
       e.session_id,
       e.rev,
       e.created_at,
       e.lane,
       nullif(e.payload->>'job_id', '') AS job_id,
       'llm'::text AS kind,
       e.payload->>'model' AS service,
       coalesce((e.payload->>'prompt_tokens')::bigint, 0)
         + coalesce((e.payload->>'completion_tokens')::bigint, 0) AS units,
       'tokens'::text AS unit,
       coalesce((e.payload->>'prompt_tokens')::bigint, 0) AS prompt_tokens,
       coalesce((e.payload->>'completion_tokens')::bigint, 0) AS completion_tokens,
       coalesce((e.payload->>'cached_tokens')::bigint, 0) AS cached_tokens,
       coalesce((e.payload->>'cost_usd')::numeric, 0) AS cost_usd,
       e.payload->>'cost_source' AS cost_source,
       coalesce(nullif(e.payload->>'purpose', ''), 'step') AS purpose
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id)
 WHERE e.event_type = 'llm_call_committed'
   AND NOT EXISTS (SELECT 1 FROM choir_control.spend g
                    WHERE g.session_id = e.session_id AND g.spend_key = e.payload->>'spend_key')
UNION ALL
SELECT s.agent_id,
       e.session_id,
       e.rev,
       e.created_at,
       e.lane,
       j.job_id,
       u->>'kind',
       u->>'service',
       coalesce((u->>'units')::bigint, 0),
       u->>'unit',
       0, 0, 0,
       coalesce((u->>'cost_usd')::numeric, 0),
       u->>'cost_source',
       e.payload->>'tool'
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id)
 CROSS JOIN LATERAL jsonb_array_elements(e.payload->'usage') u
  LEFT JOIN LATERAL (
        SELECT nullif(l.payload->>'job_id', '') AS job_id
          FROM choir_control.session_events l
         WHERE l.session_id = e.session_id AND l.lane = e.lane
           AND l.event_type = 'llm_call_committed' AND l.rev < e.rev
         ORDER BY l.rev DESC LIMIT 1) j ON true
 WHERE e.event_type = 'tool_result_committed'
   AND jsonb_typeof(e.payload->'usage') = 'array'
   AND NOT EXISTS (SELECT 1 FROM choir_control.spend g
                    WHERE g.session_id = e.session_id AND g.spend_key = u->>'spend_key')
UNION ALL
SELECT u.agent_id,
       NULL::uuid,
       NULL::bigint,
       u.created_at,
       NULL::text,
       NULL::text,
       'embedding'::text,
       u.service,
       u.tokens,
       'tokens'::text,
       0, 0, 0,
       u.cost_usd::numeric,
       CASE WHEN u.cost_usd > 0 THEN 'prices' END,
       u.purpose
  FROM choir_control.embedding_usage u
UNION ALL
SELECT g.agent_id,
       g.session_id,
       NULL::bigint,
       g.created_at,
       g.lane,
       g.job_id,
       g.kind,
       g.service,
       g.units,
       g.unit,
       g.prompt_tokens,
       g.completion_tokens,
       g.cached_tokens,
       g.cost_usd::numeric,
       g.cost_source,
       CASE WHEN g.outcome = 'billed_failure' THEN 'billed_failure'
            ELSE coalesce(nullif(g.purpose, ''), CASE WHEN g.kind = 'llm' THEN 'step' ELSE g.kind END) END
  FROM choir_control.spend g
 WHERE g.state <> 'reserved';

-- +goose Down
DROP FUNCTION choir_control.spend_settle;
DROP FUNCTION choir_control.spend_reserve;
CREATE OR REPLACE VIEW choir_audit.usage AS
SELECT s.agent_id,
       e.session_id,
       e.rev,
       e.created_at,
       e.lane,
       nullif(e.payload->>'job_id', '') AS job_id,
       'llm'::text AS kind,
       e.payload->>'model' AS service,
       coalesce((e.payload->>'prompt_tokens')::bigint, 0)
         + coalesce((e.payload->>'completion_tokens')::bigint, 0) AS units,
       'tokens'::text AS unit,
       coalesce((e.payload->>'prompt_tokens')::bigint, 0) AS prompt_tokens,
       coalesce((e.payload->>'completion_tokens')::bigint, 0) AS completion_tokens,
       coalesce((e.payload->>'cached_tokens')::bigint, 0) AS cached_tokens,
       coalesce((e.payload->>'cost_usd')::numeric, 0) AS cost_usd,
       e.payload->>'cost_source' AS cost_source,
       coalesce(nullif(e.payload->>'purpose', ''), 'step') AS purpose
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id)
 WHERE e.event_type = 'llm_call_committed'
UNION ALL
SELECT s.agent_id,
       e.session_id,
       e.rev,
       e.created_at,
       e.lane,
       j.job_id,
       u->>'kind',
       u->>'service',
       coalesce((u->>'units')::bigint, 0),
       u->>'unit',
       0, 0, 0,
       coalesce((u->>'cost_usd')::numeric, 0),
       u->>'cost_source',
       e.payload->>'tool'
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id)
 CROSS JOIN LATERAL jsonb_array_elements(e.payload->'usage') u
  LEFT JOIN LATERAL (
        SELECT nullif(l.payload->>'job_id', '') AS job_id
          FROM choir_control.session_events l
         WHERE l.session_id = e.session_id AND l.lane = e.lane
           AND l.event_type = 'llm_call_committed' AND l.rev < e.rev
         ORDER BY l.rev DESC LIMIT 1) j ON true
 WHERE e.event_type = 'tool_result_committed'
   AND jsonb_typeof(e.payload->'usage') = 'array'
UNION ALL
SELECT u.agent_id,
       NULL::uuid,
       NULL::bigint,
       u.created_at,
       NULL::text,
       NULL::text,
       'embedding'::text,
       u.service,
       u.tokens,
       'tokens'::text,
       0, 0, 0,
       u.cost_usd::numeric,
       CASE WHEN u.cost_usd > 0 THEN 'prices' END,
       u.purpose
  FROM choir_control.embedding_usage u;
DROP TABLE choir_control.spend_days;
DROP TABLE choir_control.spend;
