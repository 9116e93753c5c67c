-- name: ProposalCreate :exec
-- ProposalCreate records a validated proposal with the text its person is
-- shown; a replay of the same request changes nothing.
INSERT INTO choir_control.proposals (approval_id, agent_id, kind, preview, base_sha256)
VALUES (@approval_id, @agent_id, @kind, @preview, @base_sha256)
ON CONFLICT (approval_id) DO NOTHING;

-- name: ProposalGet :one
SELECT * FROM choir_control.proposals WHERE approval_id = @approval_id;

-- name: ProposalStep :exec
-- ProposalStep records a step's outcome; empty fields keep their value.
UPDATE choir_control.proposals
   SET state = @state,
       step = @step,
       reason = @reason,
       merge_commit = CASE WHEN @merge_commit::text = '' THEN merge_commit ELSE @merge_commit::text END,
       image = CASE WHEN @image::text = '' THEN image ELSE @image::text END,
       image_version = CASE WHEN @image_version::text = '' THEN image_version ELSE @image_version::text END,
       deployment = CASE WHEN @deployment::text = '' THEN deployment ELSE @deployment::text END,
       updated_at = now()
 WHERE approval_id = @approval_id;
