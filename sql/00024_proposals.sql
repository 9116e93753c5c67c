-- +goose Up
-- Self-evolution proposals (spec 8.10, 20): one row per approval of a
-- choir.propose.* request, written when choird accepts the request (after
-- validation), with exactly what the person was shown. Once approved, the
-- apply pipeline (River jobs of kind proposal_apply, one per step) records
-- each step here: the merge commit, the image and its version, the
-- deployment, or the step that failed and why ("approved, not applied").
CREATE TABLE choir_control.proposals (
    approval_id   uuid PRIMARY KEY REFERENCES choir_control.pending_approvals,
    agent_id      choir_control.agent_id NOT NULL REFERENCES choir_control.agents,
    kind          text NOT NULL CHECK (kind IN ('tool', 'skill', 'config', 'repo')),
    -- The full text the person was shown before deciding.
    preview       text NOT NULL,
    -- For a config change: sha256 of config.json the diff was made against.
    base_sha256   text NOT NULL DEFAULT '',
    state         text NOT NULL DEFAULT 'pending'
                  CHECK (state IN ('pending', 'applying', 'applied', 'not_applied')),
    -- The step running or last run: merge, build, update, config.
    step          text NOT NULL DEFAULT '',
    reason        text NOT NULL DEFAULT '',
    merge_commit  text NOT NULL DEFAULT '',
    image         text NOT NULL DEFAULT '',
    image_version text NOT NULL DEFAULT '',
    deployment    text NOT NULL DEFAULT '',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

-- proposals: every proposal with its decision, who made it, and what was
-- applied (merge commit, image version, deployment) or why not.
CREATE VIEW choir_audit.proposals AS
SELECT p.approval_id,
       p.agent_id,
       a.session_id,
       a.request_type,
       a.summary,
       a.created_at AS proposed_at,
       a.status AS decision,
       a.resolved_by AS decided_by,
       a.resolved_at AS decided_at,
       CASE WHEN a.status = 'pending' THEN 'pending'
            WHEN a.status = 'rejected' THEN 'rejected'
            WHEN p.state = 'not_applied' THEN 'approved, not applied'
            WHEN p.state = 'applied' THEN 'applied'
            ELSE 'approved, applying' END AS outcome,
       p.step,
       p.reason,
       p.merge_commit,
       p.image,
       p.image_version,
       p.deployment,
       p.updated_at,
       p.preview
  FROM choir_control.proposals p
  JOIN choir_control.pending_approvals a USING (approval_id);

-- +goose Down
DROP VIEW choir_audit.proposals;
DROP TABLE choir_control.proposals;
