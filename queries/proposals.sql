-- name: ProposalCreate :exec
-- ProposalCreate records a validated proposal with the text its person is
-- shown; a replay of the same request changes nothing.
INSERT INTO choir_control.proposals (approval_id, agent_id, kind, preview, base_sha256, head_commit)
VALUES (@approval_id, @agent_id, @kind, @preview, @base_sha256, @head_commit)
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

-- name: RepoCommitRecord :exec
-- RepoCommitRecord records a commit choird made on an agent's ref; a run
-- again after a restart changes nothing.
INSERT INTO choir_control.repo_commits (agent_id, commit_sha, approval_id, what)
VALUES (@agent_id, @commit_sha, @approval_id, @what)
ON CONFLICT (agent_id, commit_sha) DO NOTHING;

-- name: RepoCommitsByAgent :many
-- RepoCommitsByAgent lists the commits choird made on an agent's ref.
SELECT commit_sha FROM choir_control.repo_commits WHERE agent_id = @agent_id ORDER BY made_at;
