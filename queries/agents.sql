-- name: AgentUpsert :one
INSERT INTO choir_control.agents (agent_id, config)
VALUES (@agent_id, @config)
ON CONFLICT (agent_id) DO UPDATE
   SET config = EXCLUDED.config, updated_at = now()
RETURNING *;

-- name: AgentList :many
SELECT * FROM choir_control.agents ORDER BY agent_id;

-- name: AgentProvisionSchema :one
SELECT choir_control.provision_agent(@agent_id::text, @dimensions::int)::text AS schema_name;

-- name: AgentSchemaGet :one
SELECT * FROM choir_control.agent_schemas WHERE agent_id = @agent_id;

-- name: ConfigVersionRecord :one
-- ConfigVersionRecord returns the version number of a config.json by its
-- hash, creating a new version only when the content differs from the
-- latest one.
WITH latest AS (
    SELECT version, sha256 FROM choir_control.config_versions ORDER BY version DESC LIMIT 1
), inserted AS (
    INSERT INTO choir_control.config_versions (sha256)
    SELECT @sha256::bytea
     WHERE NOT EXISTS (SELECT 1 FROM latest WHERE sha256 = @sha256::bytea)
    RETURNING version
)
SELECT version FROM inserted
UNION ALL
SELECT version FROM latest WHERE sha256 = @sha256::bytea;

-- name: AgentHold :one
-- AgentHold records a person's stop of an agent (and takes its row lock):
-- choird starts it on its own again only once a person has started it.
INSERT INTO choir_control.agents (agent_id, held_by, held_at)
VALUES (@agent_id, @held_by, now())
ON CONFLICT (agent_id) DO UPDATE
   SET held_by = EXCLUDED.held_by, held_at = EXCLUDED.held_at, updated_at = now()
RETURNING *;

-- name: AgentRelease :execrows
-- AgentRelease clears a person's stop: a person started the agent again.
UPDATE choir_control.agents SET held_by = NULL, held_at = NULL, updated_at = now()
 WHERE agent_id = @agent_id AND held_by IS NOT NULL;
