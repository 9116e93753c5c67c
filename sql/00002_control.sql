-- +goose Up
-- choir_control holds the control plane's runtime state: everything that
-- must survive a crash of choird or of an agent is a row here.
CREATE SCHEMA choir_control;

CREATE DOMAIN choir_control.agent_id AS text
    CHECK (VALUE ~ '^[a-z][a-z0-9_-]{0,39}$');

CREATE TABLE choir_control.agents (
    agent_id      choir_control.agent_id PRIMARY KEY,
    name          text NOT NULL DEFAULT '',
    image_version text NOT NULL DEFAULT '',
    config        jsonb NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- config_versions numbers each distinct config.json choird has loaded, so
-- agents can compare a small integer on every heartbeat.
CREATE TABLE choir_control.config_versions (
    version    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    sha256     bytea NOT NULL CHECK (octet_length(sha256) = 32),
    loaded_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE choir_control.sessions (
    session_id        uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    agent_id          choir_control.agent_id NOT NULL REFERENCES choir_control.agents,
    status            text NOT NULL DEFAULT 'active'
                      CHECK (status IN ('active', 'stopping', 'ended', 'crashed')),
    -- The lease token itself is never stored: only its SHA-256.
    lease_token_hash  bytea NOT NULL UNIQUE CHECK (octet_length(lease_token_hash) = 32),
    -- A session resumed from an earlier one continues that session's chain:
    -- its first event has rev base_rev + 1 and hash_prev base_hash.
    resumed_from      uuid REFERENCES choir_control.sessions,
    base_rev          bigint NOT NULL DEFAULT 0 CHECK (base_rev >= 0),
    base_hash         bytea NOT NULL DEFAULT '\x0000000000000000000000000000000000000000000000000000000000000000'
                      CHECK (octet_length(base_hash) = 32),
    acked_rev         bigint NOT NULL DEFAULT 0 CHECK (acked_rev >= base_rev),
    acked_hash        bytea CHECK (octet_length(acked_hash) = 32),
    config_version    bigint NOT NULL DEFAULT 0,
    resource_bindings jsonb NOT NULL DEFAULT '{}',
    runtime           text NOT NULL DEFAULT '',
    container_id      text NOT NULL DEFAULT '',
    started_at        timestamptz NOT NULL DEFAULT now(),
    last_heartbeat_at timestamptz NOT NULL DEFAULT now(),
    ended_at          timestamptz,
    end_reason        text NOT NULL DEFAULT '',
    summary           jsonb,
    CHECK ((status IN ('ended', 'crashed')) = (ended_at IS NOT NULL))
);

-- At most one live session per agent (design invariant 11).
CREATE UNIQUE INDEX sessions_one_live_per_agent ON choir_control.sessions (agent_id)
    WHERE status IN ('active', 'stopping');
CREATE INDEX sessions_agent_started ON choir_control.sessions (agent_id, started_at DESC);
-- Crash detection scans live sessions by heartbeat age.
CREATE INDEX sessions_live_heartbeat ON choir_control.sessions (last_heartbeat_at)
    WHERE status IN ('active', 'stopping');

-- +goose StatementBegin
-- sessions_guard_live names the holder when a second live session of an
-- agent is attempted. The advisory lock serialises concurrent starts of one
-- agent so the check sees a committed rival; the unique index stays the
-- backstop for any path around this trigger.
CREATE FUNCTION choir_control.sessions_guard_live() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    holder uuid;
BEGIN
    IF NEW.status NOT IN ('active', 'stopping') THEN
        RETURN NEW;
    END IF;
    IF TG_OP = 'UPDATE' AND OLD.status IN ('active', 'stopping') THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended('choir.session:' || NEW.agent_id, 0));
    SELECT session_id INTO holder FROM choir_control.sessions
     WHERE agent_id = NEW.agent_id AND status IN ('active', 'stopping')
       AND session_id <> NEW.session_id;
    IF FOUND THEN
        RAISE EXCEPTION 'agent % already has a live session %', NEW.agent_id, holder
            USING ERRCODE = 'unique_violation',
                  CONSTRAINT = 'sessions_one_live_per_agent',
                  DETAIL = format('holder: agent %s, session %s', NEW.agent_id, holder),
                  HINT = 'stop the running session first: choirctl agent stop ' || NEW.agent_id;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER sessions_guard_live BEFORE INSERT OR UPDATE OF status ON choir_control.sessions
    FOR EACH ROW EXECUTE FUNCTION choir_control.sessions_guard_live();

CREATE TABLE choir_control.session_events (
    session_id uuid NOT NULL REFERENCES choir_control.sessions,
    rev        bigint NOT NULL CHECK (rev >= 1),
    event_type text NOT NULL CHECK (event_type IN (
        'user_msg', 'model_output', 'llm_call_committed',
        'tool_call_requested', 'tool_call_committed', 'tool_result_committed',
        'memory_write_committed', 'skill_transition_committed',
        'core_started', 'core_stopped', 'injected_instruction', 'cancelled',
        'session_summary')),
    lane       text NOT NULL CHECK (lane ~ '^(edge|system|core:[A-Za-z0-9][A-Za-z0-9_.-]{0,63})$'),
    payload    jsonb NOT NULL DEFAULT '{}',
    hash_prev  bytea NOT NULL CHECK (octet_length(hash_prev) = 32),
    hash       bytea NOT NULL CHECK (octet_length(hash) = 32),
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, rev)
);
CREATE INDEX session_events_type ON choir_control.session_events (event_type, created_at);

-- +goose StatementBegin
-- session_events_guard_append keeps the log a contiguous hash chain: an
-- event's predecessor must exist (or it must be the session's first) and its
-- hash_prev must be that predecessor's hash. Together with the primary key
-- this makes a gap, a reordering or a fork impossible from any client.
CREATE FUNCTION choir_control.session_events_guard_append() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    s    choir_control.sessions%ROWTYPE;
    prev bytea;
BEGIN
    SELECT * INTO s FROM choir_control.sessions WHERE session_id = NEW.session_id;
    IF s.status NOT IN ('active', 'stopping') THEN
        RAISE EXCEPTION 'session % is %, events can only be appended to a live session',
            NEW.session_id, s.status USING ERRCODE = 'check_violation';
    END IF;
    IF NEW.rev = s.base_rev + 1 THEN
        prev := s.base_hash;
    ELSE
        SELECT hash INTO prev FROM choir_control.session_events
         WHERE session_id = NEW.session_id AND rev = NEW.rev - 1;
        IF NOT FOUND THEN
            RAISE EXCEPTION 'session % event rev % is out of sequence: rev % is missing',
                NEW.session_id, NEW.rev, NEW.rev - 1
                USING ERRCODE = 'check_violation', CONSTRAINT = 'session_events_sequence';
        END IF;
    END IF;
    IF NEW.hash_prev <> prev THEN
        RAISE EXCEPTION 'session % event rev % breaks the hash chain', NEW.session_id, NEW.rev
            USING ERRCODE = 'check_violation', CONSTRAINT = 'session_events_chain',
                  DETAIL = format('hash_prev %s, expected %s', encode(NEW.hash_prev, 'hex'), encode(prev, 'hex'));
    END IF;
    RETURN NEW;
END;
$$;

CREATE FUNCTION choir_control.session_events_immutable() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'session_events is append-only: % is not allowed', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER session_events_guard_append BEFORE INSERT ON choir_control.session_events
    FOR EACH ROW EXECUTE FUNCTION choir_control.session_events_guard_append();
CREATE TRIGGER session_events_immutable BEFORE UPDATE OR DELETE ON choir_control.session_events
    FOR EACH ROW EXECUTE FUNCTION choir_control.session_events_immutable();

CREATE TABLE choir_control.session_snapshots (
    session_id uuid NOT NULL REFERENCES choir_control.sessions,
    rev        bigint NOT NULL CHECK (rev >= 0),
    snapshot   jsonb NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (session_id, rev)
);

CREATE TABLE choir_control.resource_leases (
    lease_id      bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    resource_kind text NOT NULL CHECK (resource_kind IN
                  ('workspace', 'git_identity', 'notion', 'email', 'dm', 'browser')),
    resource_name text NOT NULL CHECK (resource_name <> ''),
    agent_id      choir_control.agent_id NOT NULL REFERENCES choir_control.agents,
    session_id    uuid NOT NULL REFERENCES choir_control.sessions,
    acquired_at   timestamptz NOT NULL DEFAULT now(),
    released_at   timestamptz,
    CHECK (released_at IS NULL OR released_at >= acquired_at)
);
-- One holder per exclusive resource at a time.
CREATE UNIQUE INDEX resource_leases_one_holder ON choir_control.resource_leases
    (resource_kind, resource_name) WHERE released_at IS NULL;
CREATE INDEX resource_leases_session ON choir_control.resource_leases (session_id)
    WHERE released_at IS NULL;

-- +goose StatementBegin
-- resource_leases_guard names the current holder when a resource is leased
-- twice; see sessions_guard_live for why the advisory lock is taken.
CREATE FUNCTION choir_control.resource_leases_guard() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    h choir_control.resource_leases%ROWTYPE;
BEGIN
    IF NEW.released_at IS NOT NULL THEN
        RETURN NEW;
    END IF;
    PERFORM pg_advisory_xact_lock(hashtextextended(
        'choir.lease:' || NEW.resource_kind || ':' || NEW.resource_name, 0));
    SELECT * INTO h FROM choir_control.resource_leases
     WHERE resource_kind = NEW.resource_kind AND resource_name = NEW.resource_name
       AND released_at IS NULL;
    IF FOUND THEN
        RAISE EXCEPTION '% "%" is already leased to agent % (session %)',
            NEW.resource_kind, NEW.resource_name, h.agent_id, h.session_id
            USING ERRCODE = 'unique_violation',
                  CONSTRAINT = 'resource_leases_one_holder',
                  DETAIL = format('holder: agent %s, session %s, since %s',
                                  h.agent_id, h.session_id, h.acquired_at),
                  HINT = 'stop the holder first: choirctl agent stop ' || h.agent_id;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER resource_leases_guard BEFORE INSERT ON choir_control.resource_leases
    FOR EACH ROW EXECUTE FUNCTION choir_control.resource_leases_guard();

CREATE TABLE choir_control.pending_approvals (
    approval_id   uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    session_id    uuid NOT NULL REFERENCES choir_control.sessions,
    agent_id      choir_control.agent_id NOT NULL REFERENCES choir_control.agents,
    request_id    text NOT NULL,
    request_type  text NOT NULL CHECK (request_type <> ''),
    summary       text NOT NULL DEFAULT '',
    payload       jsonb NOT NULL DEFAULT '{}',
    status        text NOT NULL DEFAULT 'pending'
                  CHECK (status IN ('pending', 'approved', 'rejected')),
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL,
    resolved_at   timestamptz,
    -- Who resolved it: "choirctl:<user>", "telegram:<dm>", or "timeout".
    resolved_by   text,
    CHECK ((status = 'pending') = (resolved_at IS NULL)),
    CHECK ((status = 'pending') = (resolved_by IS NULL)),
    UNIQUE (session_id, request_id)
);
CREATE INDEX pending_approvals_pending ON choir_control.pending_approvals (agent_id, created_at)
    WHERE status = 'pending';

-- inbox holds every gateway message before the gateway acknowledges it to
-- its source, so nothing received is lost if choird or the agent dies.
CREATE TABLE choir_control.inbox (
    inbox_id     bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    gateway      text NOT NULL,
    update_id    bigint NOT NULL,
    dm           text NOT NULL,
    agent_id     choir_control.agent_id REFERENCES choir_control.agents,
    chat_id      text NOT NULL,
    user_id      text NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('message', 'inject', 'command', 'callback')),
    text         text NOT NULL DEFAULT '',
    attachments  jsonb NOT NULL DEFAULT '[]',
    received_at  timestamptz NOT NULL DEFAULT now(),
    delivered_at timestamptz,
    session_id   uuid REFERENCES choir_control.sessions,
    UNIQUE (gateway, update_id)
);
CREATE INDEX inbox_undelivered ON choir_control.inbox (agent_id, inbox_id)
    WHERE delivered_at IS NULL;

-- outbox holds every message for a user until it is sent; message_id is the
-- agent's idempotency key.
CREATE TABLE choir_control.outbox (
    outbox_id    bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id     choir_control.agent_id NOT NULL REFERENCES choir_control.agents,
    session_id   uuid REFERENCES choir_control.sessions,
    message_id   text NOT NULL CHECK (message_id <> ''),
    gateway      text NOT NULL,
    dm           text NOT NULL,
    chat_id      text NOT NULL,
    kind         text NOT NULL CHECK (kind IN ('text', 'document', 'photo', 'voice', 'video')),
    text         text NOT NULL DEFAULT '',
    file_path    text NOT NULL DEFAULT '',
    status       text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'failed')),
    attempts     int NOT NULL DEFAULT 0,
    last_error   text NOT NULL DEFAULT '',
    sent_ids     bigint[] NOT NULL DEFAULT '{}',
    created_at   timestamptz NOT NULL DEFAULT now(),
    sent_at      timestamptz,
    UNIQUE (agent_id, message_id),
    CHECK ((status = 'sent') = (sent_at IS NOT NULL))
);
CREATE INDEX outbox_pending ON choir_control.outbox (outbox_id) WHERE status = 'pending';

-- +goose Down
DROP SCHEMA choir_control CASCADE;
