-- Spend reserved at the egress gateway (issue 34, sql/00040_spend.sql).

-- name: SpendLock :exec
-- SpendLock serialises the reservations that check agent_id's day caps
-- and, when host is true, every reservation that checks the host-wide
-- caps, until the transaction ends: two calls cannot both pass on the
-- last dollar. The agent's lock is always taken first, so two
-- transactions never wait on each other in a cycle.
SELECT pg_advisory_xact_lock(1936745828, hashtext(@agent_id::text)),
       CASE WHEN @host::boolean THEN pg_advisory_xact_lock(1936745828001) END;

-- name: SpendAgentTotals :one
-- SpendAgentTotals is what agent_id spent between two instants (a day in
-- its DM's zone), as choir_audit.usage counts it, plus its reservations
-- still open: model tokens, and the cost of every kind.
SELECT (u.tokens + r.tokens)::bigint AS tokens, (u.cost_usd + r.cost_usd)::float8 AS cost_usd
  FROM (SELECT coalesce(sum(units) FILTER (WHERE kind = 'llm'), 0) AS tokens, coalesce(sum(cost_usd), 0) AS cost_usd
          FROM choir_audit.usage
         WHERE agent_id = @agent_id::text AND created_at >= @since::timestamptz AND created_at < @until::timestamptz) u,
       (SELECT coalesce(sum(reserved_tokens), 0) AS tokens, coalesce(sum(reserved_usd), 0) AS cost_usd
          FROM choir_control.spend
         WHERE state = 'reserved' AND agent_id = @agent_id::text
           AND created_at >= @since::timestamptz AND created_at < @until::timestamptz) r;

-- name: SpendHostTotals :one
-- SpendHostTotals is SpendAgentTotals for all agents together.
SELECT (u.tokens + r.tokens)::bigint AS tokens, (u.cost_usd + r.cost_usd)::float8 AS cost_usd
  FROM (SELECT coalesce(sum(units) FILTER (WHERE kind = 'llm'), 0) AS tokens, coalesce(sum(cost_usd), 0) AS cost_usd
          FROM choir_audit.usage
         WHERE created_at >= @since::timestamptz AND created_at < @until::timestamptz) u,
       (SELECT coalesce(sum(reserved_tokens), 0) AS tokens, coalesce(sum(reserved_usd), 0) AS cost_usd
          FROM choir_control.spend
         WHERE state = 'reserved' AND created_at >= @since::timestamptz AND created_at < @until::timestamptz) r;

-- name: SpendReserve :one
-- SpendReserve holds a call's worst case until it is settled or expires.
INSERT INTO choir_control.spend (agent_id, session_id, spend_key, kind, service, lane, job_id, purpose,
                                 expires_at, reserved_tokens, reserved_usd, unit, units)
VALUES (@agent_id, @session_id, @spend_key, @kind, @service, sqlc.narg('lane'), sqlc.narg('job_id'), sqlc.narg('purpose'),
        @expires_at, @reserved_tokens, @reserved_usd, @unit, @units)
RETURNING spend_id, created_at;

-- name: SpendSettle :execrows
-- SpendSettle records what a reserved call spent; a call already
-- settled or expired is left as it is.
UPDATE choir_control.spend
   SET state = 'settled', settled_at = now(), outcome = @outcome, units = @units,
       prompt_tokens = @prompt_tokens, completion_tokens = @completion_tokens, cached_tokens = @cached_tokens,
       cost_usd = @cost_usd, cost_source = sqlc.narg('cost_source')
 WHERE spend_id = @spend_id AND state = 'reserved';

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
