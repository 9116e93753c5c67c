package build_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/choirhq/choir/daemon/build"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
)

// canary is a host file outside every repository: a build must never
// read it.
func canary(t *testing.T) (path, secret string) {
	t.Helper()
	secret = "CANARY-" + runtimetest.RandomHex(8)
	path = filepath.Join(t.TempDir(), "host-secret.txt")
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path, secret
}

// TestBuildRefusesLinksLeavingTheRepo plays an agent that committed links
// to host files in its repository: the build is refused before the
// engine, naming the file, and the canary is read nowhere.
func TestBuildRefusesLinksLeavingTheRepo(t *testing.T) {
	t.Parallel()
	hostFile, secret := canary(t)
	tests := []struct {
		name      string
		global    map[string]file
		agent     map[string]file
		wantFiles []string
	}{
		{name: "SoulToAHostFile", agent: map[string]file{"identity/SOUL.md": link(hostFile)}, wantFiles: []string{"agent repo identity/SOUL.md"}},
		{name: "ToolClimbsOut", agent: map[string]file{"tools/leak.json": link("../../../../../../../../.." + hostFile)},
			wantFiles: []string{"agent repo tools/leak.json"}},
		{name: "SkillAndDockerfile", agent: map[string]file{"skills/leak.json": link(hostFile), "Dockerfile": link(hostFile)},
			wantFiles: []string{"agent repo skills/leak.json", "agent repo Dockerfile"}},
		{name: "ThroughAnInTreeLink", agent: map[string]file{"d": link("."), "identity/SOUL.md": link("../d/../../x")},
			wantFiles: []string{"agent repo identity/SOUL.md"}},
		{name: "MCPFile", agent: map[string]file{".choir/mcp.json": link(hostFile)}, wantFiles: []string{"agent repo .choir/mcp.json"}},
		{name: "GlobalUserMD", global: map[string]file{"identity/USER.md": link(hostFile)}, wantFiles: []string{"global repo identity/USER.md"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			global, agent := newRepo(t, globalFiles()), newRepo(t, agentFiles())
			if tt.global != nil {
				global.commit(tt.global)
			}
			if tt.agent != nil {
				agent.commit(tt.agent)
			}
			var logs bytes.Buffer
			b, _ := offlineLogged(t, &logs)
			_, err := b.Build(t.Context(), req(global, agent))
			if err == nil {
				t.Fatal("build succeeded")
			}
			if !errors.Is(err, build.ErrInvalidRepo) {
				t.Errorf("not ErrInvalidRepo (did it reach the engine?): %v", err)
			}
			for _, w := range append(tt.wantFiles, "outside the repository") {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(logs.String(), secret) {
				t.Errorf("the canary's content reached the error or the log")
			}
			for _, w := range append(tt.wantFiles, "symbolic link that leaves it") {
				if !strings.Contains(logs.String(), w) {
					t.Errorf("log lacks %q:\n%s", w, logs.String())
				}
			}
		})
	}
}

// offlineLogged is offline with the builder's log in logs.
func offlineLogged(t *testing.T, logs *bytes.Buffer) (*build.Builder, string) {
	t.Helper()
	cli, err := client.New(client.WithHost("unix://" + filepath.Join(t.TempDir(), "no-engine.sock")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	bin := filepath.Join(t.TempDir(), "choir-agent")
	if err := os.WriteFile(bin, []byte("\x7fELF stand-in"), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	// slog's handler writes one record at a time; logs is read after.
	b, err := build.New(build.Options{Home: home, Docker: cli, AgentBinary: bin,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	return b, home
}

// TestCheckerSeesWhatTheBuildSees runs config load's check on the same
// repositories: the link is a problem located at its file.
func TestCheckerSeesWhatTheBuildSees(t *testing.T) {
	t.Parallel()
	hostFile, secret := canary(t)
	global, agent := newRepo(t, globalFiles()), newRepo(t, agentFiles())
	agent.commit(map[string]file{"identity/SOUL.md": link(hostFile), ".choir/mcp.json": text(`{"servers": {"Bad Name": {"command": "x"}}}`)})
	c, err := build.NewChecker(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	gdir, adir := filepath.Join(home, "global"), filepath.Join(home, "agent")
	ctx := context.Background()
	if _, err := c.Fetch(ctx, "global", req(global, agent).Global, gdir); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Fetch(ctx, "agent a", req(global, agent).Agent, adir); err != nil {
		t.Fatal(err)
	}
	ps, err := c.Check(ctx, gdir, adir)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range ps {
		if strings.Contains(p.Message, secret) {
			t.Errorf("the canary reached a problem: %+v", p)
		}
		if p.Repo == "agent" && p.File == "identity/SOUL.md" && strings.Contains(p.Message, "outside the repository") {
			found = true
		}
	}
	if !found {
		t.Errorf("no problem at agent identity/SOUL.md: %+v", ps)
	}

	// Without the link, the invalid mcp.json is found as the build finds it.
	agent.commit(map[string]file{"identity/SOUL.md": text("soul\n")})
	if _, err := c.Fetch(ctx, "agent a", req(global, agent).Agent, adir); err != nil {
		t.Fatal(err)
	}
	if ps, err = c.Check(ctx, gdir, adir); err != nil {
		t.Fatal(err)
	}
	if len(ps) != 1 || ps[0].Repo != "agent" || ps[0].File != ".choir/mcp.json" || !strings.Contains(ps[0].Message, "servers.Bad Name") {
		t.Errorf("problems %+v, want one at agent .choir/mcp.json", ps)
	}
}

// TestPrepareProvenance: a proposal's build takes exactly the commit
// choird merged, even when the ref moved on; a commit the agent made on
// the ref itself refuses the build, unless it came in behind a merge
// choird made.
func TestPrepareProvenance(t *testing.T) {
	t.Parallel()
	global, agent := newRepo(t, globalFiles()), newRepo(t, agentFiles())
	b, _ := offline(t)
	pinned := git(t, agent.dir, "rev-parse", "HEAD")
	agent.commit(map[string]file{"identity/SOUL.md": text("later soul\n")})

	r := req(global, agent)
	r.AgentCommit = pinned
	p, err := b.Prepare(t.Context(), r)
	if err != nil {
		t.Fatal(err)
	}
	if p.Version.AgentRepoCommit != pinned {
		t.Errorf("built %s, want the pinned %s", p.Version.AgentRepoCommit, pinned)
	}
	p.Close()
	r.AgentCommit = strings.Repeat("ab", 20)
	if _, err := b.Prepare(t.Context(), r); err == nil || !strings.Contains(err.Error(), "is not in the agent's repository") {
		t.Errorf("an unknown pinned commit: %v", err)
	}

	// The agent commits on a side branch; choird merges it as a merge
	// commit it records; then the agent commits on main as itself.
	git(t, agent.dir, "checkout", "-q", "-b", "proposal/s/x")
	os.WriteFile(filepath.Join(agent.dir, "identity", "SOUL.md"), []byte("proposed soul\n"), 0o644)
	gitAs(t, agent.dir, "bot@example.org", "commit", "-qam", "proposed")
	git(t, agent.dir, "checkout", "-q", "main")
	gitAs(t, agent.dir, "bot@example.org", "merge", "-q", "--no-ff", "-m", "Merge proposal", "proposal/s/x")
	merge := git(t, agent.dir, "rev-parse", "HEAD")
	r = req(global, agent)
	r.Provenance = &build.Provenance{Made: []string{merge}, AgentEmails: []string{"bot@example.org"}}
	p, err = b.Prepare(t.Context(), r)
	if err != nil {
		t.Fatalf("choird's merge refused: %v", err)
	}
	p.Close()
	r.Provenance.Made = nil
	_, err = b.Prepare(t.Context(), r)
	if fe, ok := errors.AsType[*build.ForeignCommitError](err); !ok || len(fe.Commits) != 1 || fe.Commits[0].SHA != merge {
		t.Errorf("an unrecorded merge as the agent: %v", err)
	}
	r.Provenance.Made = []string{merge}
	os.WriteFile(filepath.Join(agent.dir, "identity", "SOUL.md"), []byte("self-approved\n"), 0o644)
	gitAs(t, agent.dir, "BOT@example.org", "commit", "-qam", "self-approved")
	pushed := git(t, agent.dir, "rev-parse", "HEAD")
	_, err = b.Prepare(t.Context(), r)
	if !errors.Is(err, build.ErrForeignCommit) || !strings.Contains(err.Error(), pushed[:12]) || strings.Contains(err.Error(), merge[:12]) {
		t.Errorf("the agent's own commit on main: %v", err)
	}
}

// gitAs runs git in dir committing as email.
func gitAs(t *testing.T, dir, email string, args ...string) {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=bot", "GIT_AUTHOR_EMAIL="+email, "GIT_COMMITTER_NAME=bot",
		"GIT_COMMITTER_EMAIL="+email, "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
}
