-- +goose Up
-- Schedules and reminders (DESIGN.md: ours, not the spec's). A schedule is
-- a row and, while it is active, one River job (schedule_fire) scheduled
-- at next_run_at, inserted in the same transaction; job_id names it so
-- that pausing or cancelling removes it. Each fire is a row of
-- schedule_fires and, unless the missed-run policy skipped it, an inbox
-- row of kind 'scheduled' for the bound agent (gateway 'schedule',
-- update_id the fire's id), delivered like a user's message.
CREATE TABLE choir_control.schedules (
    schedule_id   bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id      choir_control.agent_id NOT NULL REFERENCES choir_control.agents,
    -- The DM the fire's message comes from, and whose chat the agent
    -- answers in.
    dm            text NOT NULL CHECK (dm <> ''),
    kind          text NOT NULL CHECK (kind IN ('cron', 'once')),
    cron          text CHECK (cron <> ''),
    run_at        timestamptz,
    -- An IANA zone name: cron fields are wall-clock times there.
    time_zone     text NOT NULL CHECK (time_zone <> ''),
    -- 'task': the text is an instruction for the agent; 'reminder': the
    -- agent passes the text on to its user.
    purpose       text NOT NULL CHECK (purpose IN ('task', 'reminder')),
    text          text NOT NULL CHECK (text <> '' AND length(text) <= 4096),
    -- What a fire found late after downtime does: 'skip' drops it,
    -- 'run_once' fires once, late; either way the next time is future.
    missed        text NOT NULL CHECK (missed IN ('skip', 'run_once')),
    start_agent   boolean NOT NULL DEFAULT false,
    status        text NOT NULL CHECK (status IN ('pending_approval', 'active', 'paused', 'done', 'cancelled')),
    -- Who made it: "choirctl:uid=0", "telegram:<dm>", "agent:<id>".
    created_by    text NOT NULL CHECK (created_by <> ''),
    -- The session and tool call that made it, for an agent's: a retried
    -- call finds the first schedule instead of making a second.
    session_id    uuid REFERENCES choir_control.sessions,
    call_id       text,
    approval_id   uuid REFERENCES choir_control.pending_approvals,
    next_run_at   timestamptz,
    job_id        bigint,
    fires         integer NOT NULL DEFAULT 0,
    last_fired_at timestamptz,
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    CHECK ((kind = 'cron') = (cron IS NOT NULL)),
    CHECK ((kind = 'once') = (run_at IS NOT NULL)),
    -- An active schedule always has its next run (its job is inserted,
    -- and named in job_id, in the transaction that makes it active).
    CONSTRAINT schedules_active_has_next CHECK (status <> 'active' OR next_run_at IS NOT NULL),
    CHECK ((session_id IS NULL) = (call_id IS NULL)),
    UNIQUE (session_id, call_id)
);
CREATE INDEX schedules_agent_open ON choir_control.schedules (agent_id, schedule_id)
    WHERE status IN ('pending_approval', 'active', 'paused');
CREATE INDEX schedules_approval ON choir_control.schedules (approval_id) WHERE approval_id IS NOT NULL;

CREATE TABLE choir_control.schedule_fires (
    fire_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    schedule_id bigint NOT NULL REFERENCES choir_control.schedules,
    due_at      timestamptz NOT NULL,
    fired_at    timestamptz NOT NULL DEFAULT now(),
    -- 'fired' on time; 'fired_late' by the run_once policy after
    -- downtime; 'skipped' by the skip policy (no message).
    outcome     text NOT NULL CHECK (outcome IN ('fired', 'fired_late', 'skipped')),
    -- A job run twice for the same time fires once.
    UNIQUE (schedule_id, due_at)
);

ALTER TABLE choir_control.inbox DROP CONSTRAINT inbox_kind_check;
ALTER TABLE choir_control.inbox ADD CONSTRAINT inbox_kind_check
    CHECK (kind IN ('message', 'inject', 'command', 'callback', 'scheduled'));

-- schedules: every schedule, open ones first, with its next run in its
-- own zone.
CREATE VIEW choir_audit.schedules AS
SELECT s.schedule_id,
       s.agent_id,
       s.dm,
       s.kind,
       coalesce(s.cron, to_char(s.run_at AT TIME ZONE s.time_zone, 'YYYY-MM-DD HH24:MI')) AS spec,
       s.time_zone,
       s.purpose,
       s.status,
       s.missed,
       s.start_agent,
       s.next_run_at,
       s.next_run_at AT TIME ZONE s.time_zone AS next_run_local,
       s.fires,
       s.last_fired_at,
       s.created_by,
       s.created_at,
       s.approval_id,
       left(s.text, 200) AS text
  FROM choir_control.schedules s;

-- schedule_fires: every fire, newest first by fire_id, with how late it
-- was and whether the agent's log holds its message yet.
CREATE VIEW choir_audit.schedule_fires AS
SELECT f.fire_id,
       f.schedule_id,
       s.agent_id,
       s.dm,
       s.kind,
       coalesce(s.cron, to_char(s.run_at AT TIME ZONE s.time_zone, 'YYYY-MM-DD HH24:MI')) AS spec,
       s.time_zone,
       f.due_at,
       f.fired_at,
       f.fired_at - f.due_at AS late_by,
       f.outcome,
       i.inbox_id,
       i.delivered_at,
       i.session_id,
       left(s.text, 200) AS text
  FROM choir_control.schedule_fires f
  JOIN choir_control.schedules s USING (schedule_id)
  LEFT JOIN choir_control.inbox i ON i.gateway = 'schedule' AND i.update_id = f.fire_id;

-- inbox_waiting lists scheduled messages too.
CREATE OR REPLACE VIEW choir_audit.inbox_waiting AS
SELECT i.inbox_id,
       i.gateway,
       i.dm,
       i.agent_id,
       i.kind,
       i.received_at,
       i.pushed_at,
       now() - i.received_at AS waiting
  FROM choir_control.inbox i
 WHERE i.delivered_at IS NULL
   AND i.agent_id IS NOT NULL
   AND i.kind IN ('message', 'inject', 'scheduled');

-- +goose Down
CREATE OR REPLACE VIEW choir_audit.inbox_waiting AS
SELECT i.inbox_id,
       i.gateway,
       i.dm,
       i.agent_id,
       i.kind,
       i.received_at,
       i.pushed_at,
       now() - i.received_at AS waiting
  FROM choir_control.inbox i
 WHERE i.delivered_at IS NULL
   AND i.agent_id IS NOT NULL
   AND i.kind IN ('message', 'inject');
DROP VIEW choir_audit.schedule_fires;
DROP VIEW choir_audit.schedules;
DELETE FROM choir_control.inbox WHERE kind = 'scheduled';
ALTER TABLE choir_control.inbox DROP CONSTRAINT inbox_kind_check;
ALTER TABLE choir_control.inbox ADD CONSTRAINT inbox_kind_check
    CHECK (kind IN ('message', 'inject', 'command', 'callback'));
DROP TABLE choir_control.schedule_fires;
DROP TABLE choir_control.schedules;
