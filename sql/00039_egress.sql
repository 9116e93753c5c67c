-- +goose Up
-- The egress gateway (issue 34): every connection an agent's container
-- opens goes through choird, which decides it and writes a row here, and
-- updates the row with the bytes carried when the connection ends.
-- origin is "proxy" (the agent's local proxy: choir.exec, external tools,
-- subprocesses) or "builtin:<client>" (the agent's own clients); decision
-- is 'allowed' or 'refused', reason says why in words. host is the name
-- asked for, address the IP choird dialled (null when refused before DNS).
CREATE TABLE choir_control.egress_connections (
    connection_id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    agent_id      choir_control.agent_id NOT NULL REFERENCES choir_control.agents ON DELETE CASCADE,
    session_id    uuid,
    lane          text NOT NULL DEFAULT '',
    origin        text NOT NULL,
    method        text NOT NULL,
    host          text NOT NULL,
    port          integer NOT NULL CHECK (port BETWEEN 0 AND 65535),
    address       text,
    decision      text NOT NULL CHECK (decision IN ('allowed', 'refused')),
    reason        text NOT NULL DEFAULT '',
    bytes_up      bigint NOT NULL DEFAULT 0,
    bytes_down    bigint NOT NULL DEFAULT 0,
    started_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz
);
CREATE INDEX egress_connections_agent ON choir_control.egress_connections (agent_id, started_at);

-- egress_grants: hosts a person allowed for an agent for good ("Always
-- allow this host" on an approval card), checked before asking again.
CREATE TABLE choir_control.egress_grants (
    agent_id   choir_control.agent_id NOT NULL REFERENCES choir_control.agents ON DELETE CASCADE,
    host       text NOT NULL,
    port       integer NOT NULL CHECK (port BETWEEN 0 AND 65535),
    granted_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, host, port)
);

-- egress: what an agent's containers reached or tried to, newest last.
CREATE VIEW choir_audit.egress AS
SELECT agent_id, session_id, lane, origin, method, host, port, address, decision, reason,
       bytes_up, bytes_down, started_at, ended_at
  FROM choir_control.egress_connections;

-- egress_counters: per agent, connections allowed and refused and the
-- bytes carried each way.
CREATE VIEW choir_audit.egress_counters AS
SELECT agent_id,
       count(*) FILTER (WHERE decision = 'allowed') AS connections,
       count(*) FILTER (WHERE decision = 'refused') AS refused,
       coalesce(sum(bytes_up), 0)::bigint AS bytes_up,
       coalesce(sum(bytes_down), 0)::bigint AS bytes_down,
       max(started_at) AS last_at
  FROM choir_control.egress_connections
 GROUP BY agent_id;

-- +goose Down
DROP VIEW choir_audit.egress_counters;
DROP VIEW choir_audit.egress;
DROP TABLE choir_control.egress_grants;
DROP TABLE choir_control.egress_connections;
