-- +goose Up
-- session_events_guard_append moves from a per-row BEFORE trigger to one
-- AFTER ... FOR EACH STATEMENT check over the statement's transition table,
-- and it takes over the foreign key to sessions. The invariants are
-- unchanged: every appended event belongs to an existing, live session; its
-- predecessor exists (or it is its session's first, continuing
-- base_rev/base_hash); its hash_prev is that predecessor's hash; and a
-- session with events cannot be deleted (sessions_guard_events). Checking
-- the whole statement at once costs one query per heartbeat instead of three
-- per event (two in the row trigger, one for the foreign key), and because
-- the check runs after the statement's rows are in place, a patch's events
-- may name each other as predecessors. A failure aborts the statement, so a
-- refused append writes nothing.
--
-- Why the set check is as strong as the row check: revisions within a
-- session are unique (primary key), so following hash_prev links downwards
-- from any appended event ends at an event that existed before the statement
-- (checked by an earlier statement, by induction) or at the session's first
-- revision, base_rev + 1, whose hash_prev must be base_hash. A revision at or
-- below base_rev can never be appended: its predecessor would have to be an
-- earlier revision of the same session, and there is none.
--
-- What the foreign key did and this does not: lock the session row against
-- a concurrent delete while the append is uncommitted. The heartbeat path
-- holds the row locked FOR UPDATE for its whole transaction, and the only
-- delete of sessions (SessionDeleteUnstarted) takes only sessions that never
-- acknowledged an event, so the two cannot interleave; sessions_guard_events
-- refuses the delete of a session with committed events.
DROP TRIGGER session_events_guard_append ON choir_control.session_events;
ALTER TABLE choir_control.session_events DROP CONSTRAINT session_events_session_id_fkey;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION choir_control.session_events_guard_append() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bad record;
BEGIN
    -- One query checks the whole statement; it finds nothing unless the
    -- statement must fail, and then names the first offending event.
    SELECT c.* INTO bad
      FROM (SELECT a.session_id, a.rev, a.hash_prev, s.status,
                   CASE WHEN a.rev = s.base_rev + 1 THEN s.base_hash
                        ELSE (SELECT p.hash FROM choir_control.session_events p
                               WHERE p.session_id = a.session_id AND p.rev = a.rev - 1)
                   END AS prev
              FROM appended a
              LEFT JOIN choir_control.sessions s ON s.session_id = a.session_id
            OFFSET 0) c -- not flattened: prev is looked up once per row
     WHERE c.status IS NULL
        OR c.status NOT IN ('active', 'stopping')
        OR c.prev IS DISTINCT FROM c.hash_prev
     ORDER BY coalesce(c.status IN ('active', 'stopping'), false), c.session_id, c.rev
     LIMIT 1;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF bad.status IS NULL THEN
        RAISE EXCEPTION 'session % does not exist', bad.session_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'session_events_session_id_fkey';
    END IF;
    IF bad.status NOT IN ('active', 'stopping') THEN
        RAISE EXCEPTION 'session % is %, events can only be appended to a live session',
            bad.session_id, bad.status USING ERRCODE = 'check_violation';
    END IF;
    IF bad.prev IS NULL THEN
        RAISE EXCEPTION 'session % event rev % is out of sequence: rev % is missing',
            bad.session_id, bad.rev, bad.rev - 1
            USING ERRCODE = 'check_violation', CONSTRAINT = 'session_events_sequence';
    END IF;
    RAISE EXCEPTION 'session % event rev % breaks the hash chain', bad.session_id, bad.rev
        USING ERRCODE = 'check_violation', CONSTRAINT = 'session_events_chain',
              DETAIL = format('hash_prev %s, expected %s', encode(bad.hash_prev, 'hex'), encode(bad.prev, 'hex'));
END;
$$;

-- sessions_guard_events is the other half of the foreign key: a session
-- whose events are stored is never deleted or renumbered.
CREATE FUNCTION choir_control.sessions_guard_events() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND NEW.session_id = OLD.session_id THEN
        RETURN NEW;
    END IF;
    IF EXISTS (SELECT 1 FROM choir_control.session_events e WHERE e.session_id = OLD.session_id) THEN
        RAISE EXCEPTION 'session % has replicated events: it cannot be deleted or renamed', OLD.session_id
            USING ERRCODE = 'foreign_key_violation', CONSTRAINT = 'session_events_session_id_fkey';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END;
$$;
-- +goose StatementEnd

CREATE TRIGGER session_events_guard_append AFTER INSERT ON choir_control.session_events
    REFERENCING NEW TABLE AS appended
    FOR EACH STATEMENT EXECUTE FUNCTION choir_control.session_events_guard_append();
CREATE TRIGGER sessions_guard_events BEFORE DELETE OR UPDATE OF session_id ON choir_control.sessions
    FOR EACH ROW EXECUTE FUNCTION choir_control.sessions_guard_events();

-- Every heartbeat updates its session's row. With last_heartbeat_at
-- indexed, each of those updates wrote a new entry into every index of
-- sessions; without it, and with room left on each page, they are HOT
-- updates that touch no index. Crash detection, the index's reader, finds
-- the live sessions through sessions_one_live_per_agent just as well: there
-- is at most one per agent.
DROP INDEX choir_control.sessions_live_heartbeat;
ALTER TABLE choir_control.sessions SET (fillfactor = 50);

-- A snapshot keeps the chain hash the agent declared for its revision and
-- the SHA-256 of its state's canonical JSON, computed by choird when it
-- stored it. Recovery checks both (the hash against the event at that
-- revision) and falls back to an older snapshot and a longer tail when one
-- fails. Snapshots stored before this migration have neither and are
-- checked against their event only.
ALTER TABLE choir_control.session_snapshots
    ADD COLUMN hash bytea CHECK (octet_length(hash) = 32),
    ADD COLUMN state_sha256 bytea CHECK (octet_length(state_sha256) = 32);

-- +goose Down
ALTER TABLE choir_control.session_snapshots DROP COLUMN hash, DROP COLUMN state_sha256;
ALTER TABLE choir_control.sessions RESET (fillfactor);
CREATE INDEX sessions_live_heartbeat ON choir_control.sessions (last_heartbeat_at)
    WHERE status IN ('active', 'stopping');
DROP TRIGGER sessions_guard_events ON choir_control.sessions;
DROP FUNCTION choir_control.sessions_guard_events();
DROP TRIGGER session_events_guard_append ON choir_control.session_events;
ALTER TABLE choir_control.session_events
    ADD CONSTRAINT session_events_session_id_fkey FOREIGN KEY (session_id) REFERENCES choir_control.sessions;

-- +goose StatementBegin
CREATE OR REPLACE FUNCTION choir_control.session_events_guard_append() RETURNS trigger
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
-- +goose StatementEnd

CREATE TRIGGER session_events_guard_append BEFORE INSERT ON choir_control.session_events
    FOR EACH ROW EXECUTE FUNCTION choir_control.session_events_guard_append();
