-- name: SessionOverrideSet :one
-- SessionOverrideSet sets a live session's transient model or voice
-- override; an empty value keeps the current one. Every call bumps rev, so
-- the agent fetches its dynamic configuration again. No row comes back when
-- the session is not live.
INSERT INTO choir_control.session_overrides (session_id, llm, voice_profile, set_by)
SELECT s.session_id, @llm::text, @voice_profile::text, @set_by::text
  FROM choir_control.sessions s
 WHERE s.session_id = @session_id AND s.status IN ('active', 'stopping')
ON CONFLICT (session_id) DO UPDATE
   SET llm           = CASE WHEN EXCLUDED.llm <> '' THEN EXCLUDED.llm ELSE session_overrides.llm END,
       voice_profile = CASE WHEN EXCLUDED.voice_profile <> '' THEN EXCLUDED.voice_profile
                            ELSE session_overrides.voice_profile END,
       set_by        = EXCLUDED.set_by,
       rev           = session_overrides.rev + 1,
       updated_at    = now()
RETURNING *;

-- name: SessionDynamicState :one
-- SessionDynamicState is what FETCH_DYNAMIC_CONFIG needs of a session
-- beyond the running config: its bindings, its transient overrides, and
-- its runtime (whether its agent has the egress gateway).
SELECT s.resource_bindings,
       s.runtime,
       coalesce(o.llm, '')::text           AS llm_override,
       coalesce(o.voice_profile, '')::text AS voice_profile_override,
       coalesce(o.rev, 0)::bigint          AS override_rev,
       coalesce(o.fetched_rev, 0)::bigint  AS fetched_rev
  FROM choir_control.sessions s
  LEFT JOIN choir_control.session_overrides o ON o.session_id = s.session_id
 WHERE s.session_id = @session_id;

-- name: SessionOverrideFetched :exec
-- SessionOverrideFetched records that the agent fetched the overrides of
-- rev; a later change (a higher rev) stays unfetched.
UPDATE choir_control.session_overrides
   SET fetched_rev = @rev::bigint
 WHERE session_id = @session_id AND fetched_rev < @rev::bigint AND rev >= @rev::bigint;

-- name: SessionEventsLast :many
-- SessionEventsLast is the newest max_rows events of a session, newest
-- first, with the audit view's one-line digest.
SELECT t.rev, t.created_at, t.lane, t.event_type, coalesce(t.digest, '')::text AS digest
  FROM choir_audit.session_timeline t
 WHERE t.session_id = @session_id
 ORDER BY t.rev DESC
 LIMIT @max_rows;

-- name: SessionList :many
-- SessionList is the sessions of every agent, or of one (an empty
-- agent_id), in one status or all (an empty status), newest first, each
-- with the number of events it logged: its last revision less its base,
-- since the append guard keeps a session's revisions contiguous from
-- base_rev + 1 (one index probe, where a count would read them all).
SELECT s.session_id, s.agent_id::text AS agent_id, s.status, s.started_at, s.ended_at, s.end_reason,
       coalesce((SELECT max(e.rev) FROM choir_control.session_events e WHERE e.session_id = s.session_id) - s.base_rev,
                0)::bigint AS events
  FROM choir_control.sessions s
 WHERE (@agent_id::text = '' OR s.agent_id = @agent_id::text)
   AND (@status::text = '' OR s.status = @status::text)
 ORDER BY s.started_at DESC, s.session_id
 LIMIT @max_rows;

-- name: SessionEventsFrom :many
-- SessionEventsFrom is a page of a session's events from rev from_rev,
-- oldest first, whole: what a replay shows and verifies.
SELECT e.rev, e.created_at, e.lane, e.event_type, e.payload, e.hash_prev, e.hash
  FROM choir_control.session_events e
 WHERE e.session_id = @session_id AND e.rev >= @from_rev::bigint
 ORDER BY e.rev
 LIMIT @max_rows;

-- name: SessionEventHashAt :one
-- SessionEventHashAt is the stored hash of a session's event at rev.
SELECT e.hash FROM choir_control.session_events e WHERE e.session_id = @session_id AND e.rev = @rev::bigint;

-- name: SessionEventRevBounds :one
-- SessionEventRevBounds is the first and last revision a session logged
-- (zero when it logged none).
SELECT coalesce(min(e.rev), 0)::bigint AS first_rev, coalesce(max(e.rev), 0)::bigint AS last_rev
  FROM choir_control.session_events e WHERE e.session_id = @session_id;

-- name: AuditToolCalls :many
-- AuditToolCalls is the latest tool calls and refused requests
-- (choir_audit.tool_calls), newest first, filtered by agent, tool and
-- outcome (each empty for any) and a time range.
SELECT t.agent_id::text AS agent_id, t.session_id, t.lane, coalesce(t.call_id, '')::text AS call_id,
       coalesce(t.tool, '')::text AS tool, t.called_at, coalesce(t.duration_ms, -1)::bigint AS duration_ms, coalesce(t.outcome, '')::text AS outcome,
       coalesce(t.error, '')::text AS error, coalesce(t.policy, '')::text AS policy, t.sources::jsonb AS sources, t.call_rev
  FROM choir_audit.tool_calls t
 WHERE (@agent_id::text = '' OR t.agent_id = @agent_id::text)
   AND (@tool::text = '' OR t.tool = @tool::text)
   AND (@outcome::text = '' OR t.outcome = @outcome::text)
   AND t.called_at >= @since::timestamptz AND t.called_at < @until::timestamptz
 ORDER BY t.called_at DESC, t.call_rev DESC
 LIMIT @max_rows;
