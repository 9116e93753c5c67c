-- +goose Up
-- inbox_waiting lists new mail too: a 'mail' row (00022) is delivered like
-- a scheduled message, so one not yet in the agent's log is waiting.
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
   AND i.kind IN ('message', 'inject', 'scheduled', 'mail');

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
   AND i.kind IN ('message', 'inject', 'scheduled');
