-- +goose Up
-- What was approved is exactly what is applied (issue 29). A repo change
-- records the head commit of the branch its person was shown; the merge
-- takes exactly that commit, and refuses when the branch moved.
ALTER TABLE choir_control.proposals ADD COLUMN head_commit text NOT NULL DEFAULT '';

-- repo_commits: every commit choird made on an agent's configured ref (the
-- merge of an approved proposal, the revert of one whose image did not
-- build). A build refuses a ref whose first-parent history, since the
-- newest of these, holds a commit made as the agent: the agent pushed its
-- ref itself, past approval.
CREATE TABLE choir_control.repo_commits (
    agent_id    choir_control.agent_id NOT NULL REFERENCES choir_control.agents,
    commit_sha  text NOT NULL CHECK (commit_sha ~ '^[0-9a-f]{40,64}$'),
    approval_id uuid NOT NULL, -- the proposal whose merge or revert it is
    what        text NOT NULL CHECK (what IN ('merge', 'revert')),
    made_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (agent_id, commit_sha)
);

-- The merges choird made before this table existed.
INSERT INTO choir_control.repo_commits (agent_id, commit_sha, approval_id, what, made_at)
SELECT agent_id, merge_commit, approval_id, 'merge', updated_at
  FROM choir_control.proposals
 WHERE merge_commit ~ '^[0-9a-f]{40,64}$'
ON CONFLICT DO NOTHING;

-- +goose Down
DROP TABLE choir_control.repo_commits;
ALTER TABLE choir_control.proposals DROP COLUMN head_commit;
