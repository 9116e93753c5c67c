-- Usage accounting (issue 20): totals over choir_audit.usage, which reads
-- the replicated commit logs.

-- name: UsageTotalsBetween :one
-- The agent's model tokens and cost between two instants (a day in the
-- DM's time zone).
SELECT coalesce(sum(units) FILTER (WHERE kind = 'llm'), 0)::bigint AS tokens,
       coalesce(sum(cost_usd), 0)::float8 AS cost_usd
  FROM choir_audit.usage
 WHERE agent_id = @agent_id::text AND created_at >= @since::timestamptz AND created_at < @until::timestamptz;

-- name: UsageSessionTotals :one
SELECT coalesce(sum(units) FILTER (WHERE kind = 'llm'), 0)::bigint AS tokens,
       coalesce(sum(cost_usd), 0)::float8 AS cost_usd
  FROM choir_audit.usage
 WHERE session_id = @session_id::uuid;

-- name: UsageSessionJobs :many
-- A session's spend per core job.
SELECT job_id::text AS job_id,
       max(lane)::text AS lane,
       coalesce(sum(units) FILTER (WHERE kind = 'llm'), 0)::bigint AS tokens,
       coalesce(sum(cost_usd), 0)::float8 AS cost_usd
  FROM choir_audit.usage
 WHERE session_id = @session_id::uuid AND job_id IS NOT NULL
 GROUP BY job_id
 ORDER BY min(created_at);

-- name: UsageLatestSession :one
-- The agent's latest session and whether it is live.
SELECT session_id, status, started_at
  FROM choir_control.sessions
 WHERE agent_id = @agent_id::text
 ORDER BY started_at DESC
 LIMIT 1;

-- name: UsageDaily :many
-- The agent's spend per day in time zone tz since an instant, oldest
-- first.
SELECT to_char(created_at AT TIME ZONE @tz::text, 'YYYY-MM-DD')::text AS day,
       coalesce(sum(units) FILTER (WHERE kind = 'llm'), 0)::bigint AS tokens,
       coalesce(sum(cost_usd), 0)::float8 AS cost_usd,
       count(*)::bigint AS uses
  FROM choir_audit.usage
 WHERE agent_id = @agent_id::text AND created_at >= @since::timestamptz
 GROUP BY 1
 ORDER BY 1;

-- name: EmbeddingUsageInsert :exec
-- EmbeddingUsageInsert records one embedding request a provider billed,
-- for the agent it was done for.
INSERT INTO choir_control.embedding_usage (agent_id, service, purpose, tokens, estimated, cost_usd)
VALUES (@agent_id, @service, @purpose, @tokens, @estimated, @cost_usd);

-- name: UsageBreakdown :many
-- UsageBreakdown is the agent's spend since an instant by model or
-- service (by = 'service') or by lane (by = 'lane'), the costliest first.
SELECT (CASE WHEN @by::text = 'lane' THEN coalesce(lane, 'none') ELSE kind || ':' || coalesce(service, '?') END)::text AS slice,
       coalesce(sum(units) FILTER (WHERE kind = 'llm'), 0)::bigint AS tokens,
       coalesce(sum(cost_usd), 0)::float8 AS cost_usd,
       count(*)::bigint AS uses
  FROM choir_audit.usage
 WHERE agent_id = @agent_id::text AND created_at >= @since::timestamptz
 GROUP BY 1
 ORDER BY 3 DESC, 2 DESC, 1;
