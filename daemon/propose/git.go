package propose

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/choirhq/choir/agent/proposal"
	"github.com/choirhq/choir/config"
)

// gitError is a git command that failed, with the tail of its output.
type gitError struct {
	args   []string
	err    error
	output string
}

func (e *gitError) Error() string {
	return fmt.Sprintf("git %s: %v: %s", strings.Join(e.args, " "), e.err, tail(e.output))
}

// clone is a working clone of an agent's repository.
type clone struct {
	p   *Proposer
	dir string
	env []string
}

// git runs git in the clone, non-interactively, and returns its stdout.
func (c *clone) git(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, c.p.o.Git, args...)
	cmd.Dir = c.dir
	cmd.Env = append(append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=", "SSH_ASKPASS=",
		"GIT_SSH_COMMAND=ssh -o BatchMode=yes", "LC_ALL=C", "GIT_CONFIG_NOSYSTEM=1"), c.env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", &gitError{args: args, err: err, output: errOut.String() + out.String()}
	}
	return strings.TrimSpace(out.String()), nil
}

// identity is the author of a proposal's commits: the agent's git
// identity, or, for an agent with none, a name that says whose it is.
func identity(cfg *config.Config, agentID string) []string {
	name, email := agentID+" (via choird)", agentID+"@choir.invalid"
	if gi, ok := cfg.GitIdentities[cfg.Agents[agentID].Defaults.GitIdentity]; ok && gi.Name != "" {
		name, email = gi.Name, gi.Email
	}
	return []string{"GIT_AUTHOR_NAME=" + name, "GIT_AUTHOR_EMAIL=" + email,
		"GIT_COMMITTER_NAME=" + name, "GIT_COMMITTER_EMAIL=" + email}
}

// openClone makes a fresh clone of the agent's repository in dir, with
// its configured ref checked out as a local branch.
func (p *Proposer) openClone(ctx context.Context, cfg *config.Config, agentID, dir string) (*clone, config.Repo, error) {
	a, ok := cfg.Agents[agentID]
	if !ok {
		return nil, config.Repo{}, fmt.Errorf("agent %s is no longer in config.json", agentID)
	}
	repo := a.Repo
	if repo.URL == "" || repo.Ref == "" {
		return nil, repo, fmt.Errorf("agent %s has no repository to change: set agents.%s.repo.url and .ref in config.json", agentID, agentID)
	}
	if err := os.RemoveAll(dir); err != nil {
		return nil, repo, err
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o700); err != nil {
		return nil, repo, err
	}
	c := &clone{p: p, dir: filepath.Dir(dir), env: identity(cfg, agentID)}
	if _, err := c.git(ctx, "clone", "--quiet", "--origin", "origin", "--", repo.URL, dir); err != nil {
		return nil, repo, fmt.Errorf("clone %s: %w", repo.URL, err)
	}
	c.dir = dir
	if _, err := c.git(ctx, "rev-parse", "--verify", "--quiet", "refs/remotes/origin/"+repo.Ref); err != nil {
		return nil, repo, fmt.Errorf("agents.%s.repo.ref %q is not a branch of %s, so nothing can be merged into it", agentID, repo.Ref, repo.URL)
	}
	if _, err := c.git(ctx, "checkout", "--quiet", "-B", repo.Ref, "refs/remotes/origin/"+repo.Ref); err != nil {
		return nil, repo, err
	}
	return c, repo, nil
}

// repoPreview fetches a proposal branch and shows what merging its head
// commit changes: the commit, the summary of the diff, then the diff in
// full. It returns the head commit it showed.
func (p *Proposer) repoPreview(ctx context.Context, agentID string, r proposal.Repo) (string, string, error) {
	dir, err := os.MkdirTemp("", "choir-proposal-preview-")
	if err != nil {
		return "", "", err
	}
	defer os.RemoveAll(dir)
	c, repo, err := p.openClone(ctx, p.o.Control.Snapshot().Config, agentID, filepath.Join(dir, "repo"))
	if err != nil {
		return "", "", err
	}
	head, err := c.fetchBranch(ctx, r.Branch)
	if err != nil {
		return "", "", err
	}
	stat, err := c.git(ctx, "diff", "--stat", repo.Ref+"..."+head)
	if err != nil {
		return "", "", err
	}
	if stat == "" {
		return "", "", fmt.Errorf("branch %s changes nothing against %s", r.Branch, repo.Ref)
	}
	log, _ := c.git(ctx, "log", "--format=%h %an <%ae>: %s", repo.Ref+".."+head)
	diff, err := c.git(ctx, "diff", repo.Ref+"..."+head)
	if err != nil {
		return "", "", err
	}
	return fmt.Sprintf("merge branch %s at commit %s into %s (exactly this commit: if the branch moves, nothing is merged)\nWhy: %s\nCommits:\n%s\nSummary:\n%s\n\n=== full diff ===\n%s\n=== end of diff ===\n",
		r.Branch, head, repo.Ref, strings.Join(strings.Fields(r.Rationale), " "), log, stat, diff), head, nil
}

// fetchBranch fetches a proposal branch and returns its commit.
func (c *clone) fetchBranch(ctx context.Context, branch string) (string, error) {
	local := "refs/remotes/origin/" + branch
	if _, err := c.git(ctx, "fetch", "--quiet", "origin", "+refs/heads/"+branch+":"+local); err != nil {
		return "", fmt.Errorf("branch %s is not in the agent's repository (push it first): %w", branch, err)
	}
	return c.git(ctx, "rev-parse", "--verify", local)
}

// approvedHead fetches a proposal branch and returns approved, the commit
// its person was shown, when the branch still holds exactly it.
func (c *clone) approvedHead(ctx context.Context, branch, approved string) (string, error) {
	if approved == "" {
		return "", errors.New("the proposal recorded no commit of its branch, so what was shown is unknown; nothing merged: propose it again")
	}
	head, err := c.fetchBranch(ctx, branch)
	if err != nil {
		return "", err
	}
	if head != approved {
		return "", fmt.Errorf("branch %s moved since it was shown: the approval was for commit %.12s, the branch now holds %.12s; nothing merged: propose the branch again",
			branch, approved, head)
	}
	return approved, nil
}

// writeFiles writes a proposal's files into the clone.
func (c *clone) writeFiles(files []proposal.File) error {
	for _, f := range files {
		clean := filepath.Clean(filepath.FromSlash(f.Path))
		if filepath.IsAbs(clean) || strings.HasPrefix(clean, "..") {
			return fmt.Errorf("file %s: outside the repository", f.Path)
		}
		p := filepath.Join(c.dir, clean)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		mode := os.FileMode(0o644)
		if f.Executable {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(f.Content), mode); err != nil {
			return err
		}
		if err := os.Chmod(p, mode); err != nil {
			return err
		}
	}
	return nil
}

// mergedAlready finds the merge commit of approval id on the ref, if a
// run before a restart got that far.
func (c *clone) mergedAlready(ctx context.Context, ref, id string) string {
	out, err := c.git(ctx, "log", "--format=%H", "-n", "1", "--fixed-strings", "--grep", "Choir-Approval: "+id, ref)
	if err != nil {
		return ""
	}
	return out
}

// jsonObject decodes a JSON object leniently; false if it is not one.
func jsonObject(data []byte, v any) bool { return json.Unmarshal(data, v) == nil }

// isPushRace reports a push refused because the branch moved meanwhile:
// the step is retried on a fresh clone.
func isPushRace(err error) bool {
	var ge *gitError
	return errors.As(err, &ge) && (strings.Contains(ge.output, "non-fast-forward") || strings.Contains(ge.output, "fetch first"))
}
