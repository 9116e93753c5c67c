package propose

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/sql/seam"
)

func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// mergeSetup is a bare agent repository, a working clone of it, and a
// Proposer on a control layer whose config names the repository.
func mergeSetup(t *testing.T) (p *Proposer, bare, work string) {
	t.Helper()
	root := t.TempDir()
	work = filepath.Join(root, "work")
	os.MkdirAll(filepath.Join(work, "identity"), 0o755)
	gitT(t, work, "init", "-q", "-b", "main")
	os.WriteFile(filepath.Join(work, "identity", "SOUL.md"), []byte("soul\n"), 0o644)
	gitT(t, work, "add", "-A")
	gitT(t, work, "commit", "-qm", "initial")
	bare = filepath.Join(root, "agent.git")
	gitT(t, root, "clone", "-q", "--bare", work, bare)
	gitT(t, work, "remote", "add", "origin", bare)
	gitT(t, work, "fetch", "-q", "origin")
	cfg := &config.Config{Agents: map[string]config.Agent{"assistant": {Repo: config.Repo{URL: bare, Ref: "main"},
		Defaults: config.AgentDefaults{GitIdentity: "bot"}}},
		GitIdentities: map[string]config.GitIdentity{"bot": {Name: "Bot", Email: "bot@example.org"}}}
	pool := dbtest.NewPool(t)
	if _, err := seam.Queries(pool).AgentUpsert(context.Background(), db.AgentUpsertParams{AgentID: "assistant",
		Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	ctl := control.New(control.Options{Home: root, Config: cfg})
	return New(Options{Home: root, Control: ctl, Pool: pool}), bare, work
}

func approved(requestType string, payload any) approval.Approval {
	b, _ := json.Marshal(payload)
	return approval.Approval{ID: uuid.New(), AgentID: "assistant", Type: requestType,
		Payload: b, Status: "approved", ResolvedBy: "telegram:alice"}
}

// TestMergeRunsOnce: the merge step run again (a restart before its
// outcome was committed) finds its merge and adds nothing.
func TestMergeRunsOnce(t *testing.T) {
	t.Parallel()
	p, bare, _ := mergeSetup(t)
	a := approved("choir.propose.tool", map[string]any{"change": "add", "name": "greet.hello", "description": "d",
		"parameters": map[string]any{"type": "object"}, "behavior": "b", "rationale": "r",
		"runtime": map[string]any{"side_effect": "read", "trust": "own"}, "implementation": map[string]string{"content": "#!/bin/sh\necho hi\n"}})
	prop := db.ChoirControlProposal{ApprovalID: a.ID, Kind: "tool"}
	first, err := p.merge(context.Background(), a, prop)
	if err != nil {
		t.Fatal(err)
	}
	count := gitT(t, bare, "rev-list", "--count", "main")
	second, err := p.merge(context.Background(), a, prop)
	if err != nil {
		t.Fatal(err)
	}
	if first.merge == "" || second.merge != first.merge || gitT(t, bare, "rev-list", "--count", "main") != count {
		t.Errorf("merges %s then %s; commits %s then %s", first.merge, second.merge, count, gitT(t, bare, "rev-list", "--count", "main"))
	}
	if mode := gitT(t, bare, "ls-tree", "main", "tools/greet.hello"); !strings.HasPrefix(mode, "100755") {
		t.Errorf("the tool's executable = %s", mode)
	}
	if got := gitT(t, bare, "show", "-s", "--format=%an %ae", "main^2"); got != "Bot bot@example.org" {
		t.Errorf("author = %s", got)
	}
}

// TestMergeConflictFailsTheStep: a repo change that conflicts with the
// ref is not applied, and the ref is untouched.
func TestMergeConflictFailsTheStep(t *testing.T) {
	t.Parallel()
	p, bare, work := mergeSetup(t)
	branch := "proposal/s1/soul"
	gitT(t, work, "checkout", "-q", "-b", branch)
	os.WriteFile(filepath.Join(work, "identity", "SOUL.md"), []byte("branch soul\n"), 0o644)
	gitT(t, work, "commit", "-qam", "branch")
	gitT(t, work, "push", "-q", "origin", branch)
	gitT(t, work, "checkout", "-q", "main")
	os.WriteFile(filepath.Join(work, "identity", "SOUL.md"), []byte("main soul\n"), 0o644)
	gitT(t, work, "commit", "-qam", "main moved")
	gitT(t, work, "push", "-q", "origin", "main")
	head := gitT(t, bare, "rev-parse", "main")

	a := approved("choir.propose.repo_change", map[string]string{"branch": branch, "rationale": "r"})
	_, err := p.merge(context.Background(), a, db.ChoirControlProposal{ApprovalID: a.ID, Kind: "repo",
		HeadCommit: gitT(t, bare, "rev-parse", branch)})
	var sf *stepFailed
	if !errors.As(err, &sf) || sf.step != "merge" || !strings.Contains(err.Error(), "conflict") {
		t.Fatalf("merge = %v", err)
	}
	if gitT(t, bare, "rev-parse", "main") != head {
		t.Error("a failed merge changed main")
	}
	gitT(t, bare, "rev-parse", "--verify", "refs/heads/"+branch)
}
