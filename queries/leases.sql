-- name: LeaseAcquire :one
INSERT INTO choir_control.resource_leases (resource_kind, resource_name, agent_id, session_id)
VALUES (@resource_kind, @resource_name, @agent_id, @session_id)
RETURNING *;

-- name: LeasesReleaseBySession :execrows
UPDATE choir_control.resource_leases SET released_at = now()
 WHERE session_id = @session_id AND released_at IS NULL;

-- name: LeaseListActive :many
SELECT * FROM choir_control.resource_leases
 WHERE released_at IS NULL
 ORDER BY resource_kind, resource_name;

-- name: LeaseGetHolder :one
SELECT * FROM choir_control.resource_leases
 WHERE resource_kind = @resource_kind AND resource_name = @resource_name AND released_at IS NULL;

-- name: LeasesDeleteBySession :execrows
DELETE FROM choir_control.resource_leases WHERE session_id = @session_id;
