-- Spend reserved at the egress gateway (issue 34, sql/00040_spend.sql).

-- name: SpendReserveChecked :one
-- SpendReserveChecked reserves a call's worst case if it fits under the
-- day caps (choir_control.spend_reserve), in one round trip.
SELECT coalesce(r.spend_id, 0)::bigint AS spend_id, coalesce(r.refused, '')::text AS refused,
       coalesce(r.spent_tokens, 0)::bigint AS spent_tokens, coalesce(r.spent_usd, 0)::float8 AS spent_usd
  FROM choir_control.spend_reserve(@agent_id::text, @session_id::uuid, @spend_key::text, @kind::text, @service::text,
           sqlc.narg('lane')::text, sqlc.narg('job_id')::text, sqlc.narg('purpose')::text, @expires_at::timestamptz,
           @reserved_tokens::bigint, @reserved_usd::float8, @unit::text, @units::bigint,
           @agent_day::timestamptz, @agent_tokens_cap::bigint, @agent_usd_cap::float8,
           @agent_other_tokens::bigint, @agent_other_usd::float8,
           @host_day::timestamptz, @host_tokens_cap::bigint, @host_usd_cap::float8,
           @host_other_tokens::bigint, @host_other_usd::float8) r;

-- name: SpendOtherTotals :one
-- SpendOtherTotals is what choir_audit.usage counts between two instants
-- besides the ledger's settled rows: the spend the agents' logs record of
-- calls that did not go through the gateway, and embeddings. agent_id
-- empty counts every agent.
SELECT (u.tokens - g.tokens)::bigint AS tokens, (u.cost_usd - g.cost_usd)::float8 AS cost_usd
  FROM (SELECT coalesce(sum(units) FILTER (WHERE kind = 'llm'), 0) AS tokens, coalesce(sum(cost_usd), 0) AS cost_usd
          FROM choir_audit.usage
         WHERE (@agent_id::text = '' OR agent_id = @agent_id::text)
           AND created_at >= @since::timestamptz AND created_at < @until::timestamptz) u,
       (SELECT coalesce(sum(units) FILTER (WHERE kind = 'llm'), 0) AS tokens, coalesce(sum(cost_usd), 0) AS cost_usd
          FROM choir_control.spend
         WHERE state <> 'reserved' AND (@agent_id::text = '' OR agent_id = @agent_id::text)
           AND created_at >= @since::timestamptz AND created_at < @until::timestamptz) g;

-- name: SpendExpire :execrows
-- SpendExpire settles the reservations whose calls choird lost (it
-- crashed or was killed mid-call) at their worst case: the provider may
-- have billed them, and a reservation must not hold room forever.
UPDATE choir_control.spend
   SET state = 'expired', settled_at = now(), outcome = 'expired',
       units = CASE WHEN kind = 'llm' THEN reserved_tokens ELSE units END,
       cost_usd = reserved_usd, cost_source = CASE WHEN reserved_usd > 0 THEN 'reserved' END
 WHERE state = 'reserved' AND expires_at <= @now::timestamptz;

-- name: SpendGetByID :one
SELECT * FROM choir_control.spend WHERE spend_id = @spend_id;

-- name: SpendSettle :one
-- SpendSettle records what reserved calls spent, one at each index of
-- the arrays (choir_control.spend_settle), and returns how many it
-- settled: one settled or expired already is left as it is.
SELECT choir_control.spend_settle(@spend_ids::bigint[], @outcomes::text[], @units::bigint[], @prompt_tokens::bigint[],
           @completion_tokens::bigint[], @cached_tokens::bigint[], @costs_usd::float8[], @cost_sources::text[])::bigint AS settled;

-- name: SpendDayTotals :one
-- SpendDayTotals is a scope's day (agent:<id> or host): its held and
-- settled parts together.
SELECT coalesce(sum(tokens), 0)::bigint AS tokens, coalesce(sum(cost_usd), 0)::float8 AS cost_usd
  FROM choir_control.spend_days WHERE scope = @scope::text AND day_start = @day_start::timestamptz;
