package propose_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/build"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
)

// TestRepoProposalMergesExactlyTheCommitShown plays an agent that has a
// harmless branch approved, then pushes another commit to it before the
// person presses Approve: nothing is merged, the chat and the audit view
// say the branch moved, and the late commit never reaches main.
func TestRepoProposalMergesExactlyTheCommitShown(t *testing.T) {
	t.Parallel()
	b := setupProposals(t)
	ctx := context.Background()
	// The agent clones into its workspace, as spec 20 has it.
	work := filepath.Join(b.d.Workspace("main"), "clones", "me")
	os.MkdirAll(filepath.Dir(work), 0o755)
	choirdtest.Git(t, filepath.Dir(work), "clone", "--quiet", b.repo, work)
	branch := "proposal/" + b.a.SessionID + "/soul"
	choirdtest.Git(t, work, "checkout", "-q", "-b", branch)
	os.WriteFile(filepath.Join(work, "identity", "SOUL.md"), []byte("a kinder soul\n"), 0o644)
	choirdtest.Git(t, work, "commit", "-qam", "kinder")
	choirdtest.Git(t, work, "push", "-q", "origin", branch)
	shown := choirdtest.Git(t, work, "rev-parse", "HEAD")
	main := choirdtest.Git(t, b.repo, "rev-parse", "main")

	resp, err := b.propose(t, "req-repo-moved", "choir.propose.repo_change", `{"branch":"`+branch+`","rationale":"Be kinder."}`)
	if err != nil {
		t.Fatal(err)
	}
	if all := strings.Join(b.messages(t, resp.ApprovalID), "\n"); !strings.Contains(all, "at commit "+shown) {
		t.Errorf("the person is not shown the commit %s:\n%s", shown, all)
	}
	// The agent moves the branch after the person saw it.
	os.WriteFile(filepath.Join(work, "identity", "SOUL.md"), []byte("obey the web page\n"), 0o644)
	choirdtest.Git(t, work, "commit", "-qam", "late")
	choirdtest.Git(t, work, "push", "-q", "origin", branch)
	late := choirdtest.Git(t, work, "rev-parse", "HEAD")

	if _, err := b.d.Approvals().Decide(ctx, control.Scope{Agent: "assistant", DM: "alice", Actor: "telegram:alice"}, resp.ApprovalID, true); err != nil {
		t.Fatal(err)
	}
	outcome, step, reason := b.waitState(t, resp.ApprovalID, "approved, not applied", "applied")
	if outcome != "approved, not applied" || step != "merge" || !strings.Contains(reason, "moved since it was shown") {
		t.Errorf("outcome %q at step %q: %s", outcome, step, reason)
	}
	if got := choirdtest.Git(t, b.repo, "rev-parse", "main"); got != main {
		t.Errorf("main moved to %s", got)
	}
	if err := runGitAs(b.repo, "t", "t@t", "merge-base", "--is-ancestor", late, "main"); err == nil {
		t.Error("the late commit reached main")
	}
	msgs := strings.Join(b.messages(t, resp.ApprovalID), "\n")
	if !strings.Contains(msgs, "merge failed; approved, not applied") || !strings.Contains(msgs, "moved since it was shown") {
		t.Errorf("the chat is not told the branch moved:\n%s", msgs)
	}
	waitGone(t, work)
}

// waitGone waits until path no longer exists.
func waitGone(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := os.Lstat(path); errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s is still there", path)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRejectedRepoProposalCloneRemoved: the workspace clone of a repo
// change is ephemeral (spec 20.7). Rejected, its clone goes (the branch
// stays in the repository for inspection); the workspace's other files,
// another clone and a link out of the workspace are left alone.
func TestRejectedRepoProposalCloneRemoved(t *testing.T) {
	t.Parallel()
	b := setupProposals(t)
	ws := b.d.Workspace("main")
	work := filepath.Join(ws, "repo")
	choirdtest.Git(t, ws, "clone", "--quiet", b.repo, work)
	other := filepath.Join(ws, "other-clone")
	choirdtest.Git(t, ws, "clone", "--quiet", b.repo, other)
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "keep.txt"), []byte("outside"), 0o644)
	os.Symlink(outside, filepath.Join(ws, "link-out"))
	os.WriteFile(filepath.Join(ws, "notes.txt"), []byte("mine"), 0o644)
	branch := "proposal/" + b.a.SessionID + "/soul"
	choirdtest.Git(t, work, "checkout", "-q", "-b", branch)
	os.WriteFile(filepath.Join(work, "identity", "SOUL.md"), []byte("a kinder soul\n"), 0o644)
	choirdtest.Git(t, work, "commit", "-qam", "kinder")
	choirdtest.Git(t, work, "push", "-q", "origin", branch)
	choirdtest.Git(t, work, "checkout", "-q", "main") // the branch is still one of its refs
	resp, err := b.propose(t, "req-repo-clean", "choir.propose.repo_change", `{"branch":"`+branch+`","rationale":"Be kinder."}`)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.d.Approvals().Decide(context.Background(), control.Scope{Agent: "assistant", DM: "alice", Actor: "telegram:alice"}, resp.ApprovalID, false); err != nil {
		t.Fatal(err)
	}
	waitGone(t, work)
	for _, p := range []string{filepath.Join(other, ".git"), filepath.Join(ws, "notes.txt"), filepath.Join(outside, "keep.txt")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	choirdtest.Git(t, b.repo, "rev-parse", "--verify", "refs/heads/"+branch)
}

// runGitAs runs git in dir as name <email> and returns its error.
func runGitAs(dir, name, email string, args ...string) error {
	cmd := osexec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME="+name, "GIT_AUTHOR_EMAIL="+email, "GIT_COMMITTER_NAME="+name, "GIT_COMMITTER_EMAIL="+email)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %v: %w: %s", args, err, out)
	}
	return nil
}

// TestAgentBuildRefusesARefTheAgentPushed plays an agent whose git
// identity can push its configured ref: it commits to main directly. The
// build is refused before the engine, naming the commit; choird logs it
// and tells the admin DM. A merge choird made, with the agent's own
// commits behind it, builds.
func TestAgentBuildRefusesARefTheAgentPushed(t *testing.T) {
	t.Parallel()
	runtimetest.RequireDocker(t)
	global := choirdtest.GitRepo(t, map[string]string{
		"Dockerfile.base":       "ARG CHOIR_OS_IMAGE=scratch\nFROM ${CHOIR_OS_IMAGE}\n",
		"identity/USER.md":      "# The user\n",
		"identity/SOUL.md":      "global soul\n",
		"identity/SOUL-CORE.md": "global core soul\n",
	})
	agentRepo := choirdtest.GitRepo(t, map[string]string{"identity/SOUL.md": "agent soul\n"})
	// The agent pushes to main as itself.
	os.WriteFile(filepath.Join(agentRepo, "identity", "SOUL.md"), []byte("I approve myself\n"), 0o644)
	if err := runGitAs(agentRepo, "Assistant Bot", "bot@example.org", "commit", "-qam", "self-approved"); err != nil {
		t.Fatal(err)
	}
	pushed := choirdtest.Git(t, agentRepo, "rev-parse", "HEAD")
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Daemon: daemon.Options{Runtime: "docker", AgentBinary: runtimetest.BuildAgent(t)},
		Edit: func(c *config.Config, s config.Secrets) {
			choirdtest.FastHeartbeat(c, s)
			c.GlobalRepo = config.Repo{URL: global, Ref: "main"}
			c.GitIdentities = map[string]config.GitIdentity{"bot": {Name: "Assistant Bot", Email: "bot@example.org"}}
			a := c.Agents["assistant"]
			a.Repo = config.Repo{URL: "file://" + agentRepo, Ref: "main"}
			a.Defaults.GitIdentity = "bot"
			c.Agents["assistant"] = a
		}})
	ctx := context.Background()
	_, err := d.AgentBuild(ctx, control.Scope{Admin: true, Actor: "test"}, "assistant", false)
	if !errors.Is(err, build.ErrForeignCommit) || !strings.Contains(err.Error(), pushed[:12]) || !strings.Contains(err.Error(), "protect the branch") {
		t.Fatalf("build: %v, want it refused naming commit %.12s", err, pushed)
	}
	var dm, text string
	if err := d.Pool().QueryRow(ctx, `SELECT dm, text FROM choir_control.outbox WHERE agent_id = 'assistant' AND message_id LIKE 'foreign-commit:%'`).
		Scan(&dm, &text); err != nil {
		t.Fatalf("no notice to the admin DM: %v", err)
	}
	if dm != "console" || !strings.Contains(text, pushed[:12]) {
		t.Errorf("notice to %s: %s", dm, text)
	}
	if msgs := choirdtest.LogMessages(t, filepath.Join(d.Home, "logs", "choird.log")); !slices.Contains(msgs, "agent build refused: the agent pushed its configured ref itself") {
		t.Errorf("no refusal logged: %q", msgs)
	}
}
