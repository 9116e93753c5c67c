package build_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/build"
	"github.com/choirhq/choir/daemon/runtime"
)

// offline returns a builder whose engine does not exist: whatever these
// tests check must fail before the engine is called.
func offline(t *testing.T) (*build.Builder, string) {
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
	b, err := build.New(build.Options{Home: home, Docker: cli, AgentBinary: bin})
	if err != nil {
		t.Fatal(err)
	}
	return b, home
}

func req(global, agent *gitRepo) build.Request {
	r := build.Request{AgentID: "agent-1", Global: config.Repo{URL: global.dir, Ref: "main"}}
	if agent != nil {
		r.Agent = config.Repo{URL: "file://" + agent.dir, Ref: "main"}
	}
	return r
}

func TestBuildFailsBeforeTheEngine(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name        string
		globalEdit  map[string]file
		agentEdit   map[string]file
		want        []string
		notEngine   bool
		wantInvalid bool
	}{
		{
			name:        "InvalidToolManifest",
			agentEdit:   map[string]file{"tools/bad.json": text(`{"llm": {"name": "Bad Name", "description": ""}, "runtime": {}}`), "tools/bad": script("#!/bin/sh\n")},
			want:        []string{"agent repo tools/bad.json", "llm.name", "llm.description: required", "runtime.timeout_ms"},
			wantInvalid: true,
		},
		{
			name:        "ToolManifestSyntaxError",
			globalEdit:  map[string]file{"tools/broken.json": text(`{"llm": `)},
			want:        []string{"global repo tools/broken.json"},
			wantInvalid: true,
		},
		{
			name:        "ToolExecutableNotExecutable",
			agentEdit:   map[string]file{"tools/plain.json": text(manifest("x.plain", "")), "tools/plain": text("not executable")},
			want:        []string{"agent repo tools/plain", "not executable"},
			wantInvalid: true,
		},
		{
			name:        "SkillWithUnknownTool",
			agentEdit:   map[string]file{"skills/odd.json": text(strings.Replace(strings.Replace(skillJSON, `"review"`, `"odd"`, 1), "x.greet", "x.nowhere", 1))},
			want:        []string{"agent repo skills/odd.json", "x.nowhere"},
			wantInvalid: true,
		},
		{
			name:        "SkillSyntaxError",
			globalEdit:  map[string]file{"skills/review.json": text(`{"name": "review", "bogus": 1}`)},
			want:        []string{"global repo skills/review.json", "bogus"},
			wantInvalid: true,
		},
		{
			name:        "MissingUserMD",
			globalEdit:  map[string]file{"identity/USER.md": {}},
			want:        []string{"USER.md is missing", "the global repo's identity/USER.md"},
			wantInvalid: true,
		},
		{
			name:        "UserMDOnlyFromGlobal",
			globalEdit:  map[string]file{"identity/USER.md": {}},
			agentEdit:   map[string]file{"identity/USER.md": text("agent's own user\n")},
			want:        []string{"USER.md is missing"},
			wantInvalid: true,
		},
		{
			name:        "MissingDockerfileBase",
			globalEdit:  map[string]file{"Dockerfile.base": {}},
			want:        []string{"no Dockerfile.base"},
			wantInvalid: true,
		},
		{
			name:        "EveryProblemAtOnce",
			globalEdit:  map[string]file{"identity/SOUL-CORE.md": {}},
			agentEdit:   map[string]file{"tools/bad.json": text(`{}`)},
			want:        []string{"SOUL-CORE.md is missing", "agent repo tools/bad.json"},
			wantInvalid: true,
		},
		{
			name:        "AgentDockerfileAddsAURL",
			agentEdit:   map[string]file{"Dockerfile": text("ARG CHOIR_BASE_IMAGE\nFROM ${CHOIR_BASE_IMAGE}\nADD http://169.254.169.254/latest/meta-data /m\n")},
			want:        []string{"agent repo Dockerfile line 3", "ADD http://169.254.169.254/latest/meta-data: a remote source"},
			wantInvalid: true,
		},
		{
			name:        "AgentDockerfileAddsAGitRepo",
			agentEdit:   map[string]file{"Dockerfile": text("ARG CHOIR_BASE_IMAGE\nFROM ${CHOIR_BASE_IMAGE}\nADD git@example.com:x/y.git /y\n")},
			want:        []string{"agent repo Dockerfile line 3", "ADD git@example.com:x/y.git"},
			wantInvalid: true,
		},
		{
			name: "AgentDockerfileReadsAnotherAgentsImage",
			agentEdit: map[string]file{"Dockerfile": text("ARG CHOIR_BASE_IMAGE\nFROM choir-agent-other:latest AS victim\nFROM ${CHOIR_BASE_IMAGE}\n" +
				"COPY --from=choir-agent-victim:latest /choir/SOUL.md /x\nCOPY --from=victim /choir /y\n")},
			want:        []string{"line 2: FROM choir-agent-other:latest", "line 4: COPY --from=choir-agent-victim:latest"},
			wantInvalid: true,
		},
		{
			name: "AgentDockerfileMountsAndTriggers",
			agentEdit: map[string]file{"Dockerfile": text("ARG CHOIR_BASE_IMAGE\nARG SRC=http://x/y\nFROM ${CHOIR_BASE_IMAGE}\n" +
				"RUN --mount=type=bind,source=/,target=/host cat /host/etc/shadow\nONBUILD ADD http://x /x\nADD ${SRC} /s\n")},
			want:        []string{"line 4: RUN --mount=type=bind", "line 5: ONBUILD is not allowed", "line 6: ADD ${SRC}: a source named by a variable"},
			wantInvalid: true,
		},
		{
			name:        "InvalidMCPFile",
			agentEdit:   map[string]file{".choir/mcp.json": text(`{"servers": {"files": {"command": "x", "url": "http://y"}}}`)},
			want:        []string{"agent repo .choir/mcp.json", "servers.files: give command (stdio) or url"},
			wantInvalid: true,
		},
		{
			name: "ValidReposReachTheEngine",
			want: []string{"cannot reach the Docker engine at unix://", "is dockerd running?"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			global, agent := newRepo(t, globalFiles()), newRepo(t, agentFiles())
			if tt.globalEdit != nil {
				global.commit(tt.globalEdit)
			}
			if tt.agentEdit != nil {
				agent.commit(tt.agentEdit)
			}
			b, _ := offline(t)
			_, err := b.Build(t.Context(), req(global, agent))
			if err == nil {
				t.Fatal("build succeeded")
			}
			if tt.wantInvalid != errors.Is(err, build.ErrInvalidRepo) {
				t.Errorf("errors.Is(err, ErrInvalidRepo) = %v: %v", !tt.wantInvalid, err)
			}
			if tt.wantInvalid == errors.Is(err, runtime.ErrEngineUnreachable) {
				t.Errorf("engine reached: %v", err)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error lacks %q:\n%v", w, err)
				}
			}
		})
	}
}

func TestFetch(t *testing.T) {
	t.Parallel()

	t.Run("UnreachableRepo", func(t *testing.T) {
		t.Parallel()
		b, _ := offline(t)
		missing := filepath.Join(t.TempDir(), "gone")
		_, err := b.Prepare(t.Context(), build.Request{AgentID: "a", Global: config.Repo{URL: "file://" + missing, Ref: "main"}})
		var fe *build.FetchError
		if !errors.As(err, &fe) {
			t.Fatalf("err = %v, want *FetchError", err)
		}
		if fe.Repo != "global" || fe.Step != "git clone" {
			t.Errorf("fetch error %+v", fe)
		}
		for _, w := range []string{"fetch global repo file://" + missing, "git clone", "does not appear to be a git repository", "check global_repo.url"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q: %v", w, err)
			}
		}
	})

	t.Run("UnknownRef", func(t *testing.T) {
		t.Parallel()
		b, _ := offline(t)
		global, agent := newRepo(t, globalFiles()), newRepo(t, agentFiles())
		r := req(global, agent)
		r.Agent.Ref = "release-9"
		_, err := b.Prepare(t.Context(), r)
		var fe *build.FetchError
		if !errors.As(err, &fe) || fe.Repo != "agent agent-1" || fe.Step != "resolve ref" {
			t.Fatalf("err = %v", err)
		}
		for _, w := range []string{`no branch, tag or commit "release-9"`, "branches: main", "agents.agent-1.repo"} {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("error lacks %q: %v", w, err)
			}
		}
	})

	t.Run("RemoteGoneAfterClone", func(t *testing.T) {
		t.Parallel()
		b, _ := offline(t)
		global := newRepo(t, globalFiles())
		r := build.Request{AgentID: "a", Global: config.Repo{URL: global.dir, Ref: "main"}}
		p, err := b.Prepare(t.Context(), r)
		if err != nil {
			t.Fatal(err)
		}
		p.Close()
		if err := os.RemoveAll(global.dir); err != nil {
			t.Fatal(err)
		}
		_, err = b.Prepare(t.Context(), r)
		var fe *build.FetchError
		if !errors.As(err, &fe) || fe.Step != "git fetch" {
			t.Fatalf("err = %v, want a git fetch failure", err)
		}
	})

	t.Run("RefsTagsAndCommitsAndUpdates", func(t *testing.T) {
		t.Parallel()
		b, home := offline(t)
		global := newRepo(t, globalFiles())
		first := git(t, global.dir, "rev-parse", "HEAD")
		git(t, global.dir, "tag", "v1")
		second := global.commit(map[string]file{"identity/SOUL.md": text("newer\n")})
		for _, tc := range []struct{ ref, want string }{{"main", second}, {"v1", first}, {first, first}, {first[:10], first}, {"main", second}} {
			p, err := b.Prepare(t.Context(), build.Request{AgentID: "a", Global: config.Repo{URL: global.dir, Ref: tc.ref}})
			if err != nil {
				t.Fatalf("ref %s: %v", tc.ref, err)
			}
			p.Close()
			if p.Version.GlobalRepoCommit != tc.want {
				t.Errorf("ref %s checked out %s, want %s", tc.ref, p.Version.GlobalRepoCommit, tc.want)
			}
			if head := git(t, filepath.Join(home, "repos", "global"), "rev-parse", "HEAD"); head != tc.want {
				t.Errorf("clone HEAD %s, want %s", head, tc.want)
			}
		}
	})

	t.Run("PrepareNeedsNoEngine", func(t *testing.T) {
		t.Parallel()
		b, home := offline(t)
		global, agent := newRepo(t, globalFiles()), newRepo(t, agentFiles())
		p, err := b.Prepare(t.Context(), req(global, agent))
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		if p.AgentDir != filepath.Join(home, "repos", "agents", "agent-1") || p.Version.AgentRepoCommit == "" {
			t.Errorf("plan %+v", p)
		}
		want := []string{"/choir/tools/agent/bin/compiled", "/choir/tools/global/bin/gcompiled"}
		if !slices.Equal(p.DockerfileOutputs, want) {
			t.Errorf("dockerfile outputs %v, want %v", p.DockerfileOutputs, want)
		}
	})

	t.Run("ConcurrentPlansShareTheGlobalClone", func(t *testing.T) {
		t.Parallel()
		b, _ := offline(t)
		global := newRepo(t, globalFiles())
		head := git(t, global.dir, "rev-parse", "HEAD")
		errs := make(chan error, 4)
		for i := range 4 {
			go func() {
				agent := "c" + string(rune('a'+i))
				p, err := b.Prepare(t.Context(), build.Request{AgentID: agent, Global: config.Repo{URL: global.dir, Ref: "main"}})
				if err == nil {
					if p.Version.GlobalRepoCommit != head {
						err = errors.New("wrong commit " + p.Version.GlobalRepoCommit)
					}
					p.Close()
				}
				errs <- err
			}()
		}
		for range 4 {
			if err := <-errs; err != nil {
				t.Error(err)
			}
		}
	})

	t.Run("BadAgentID", func(t *testing.T) {
		t.Parallel()
		b, _ := offline(t)
		if _, err := b.Prepare(t.Context(), build.Request{AgentID: "Bad ID", Global: config.Repo{URL: "/x", Ref: "main"}}); err == nil || !strings.Contains(err.Error(), "agent id") {
			t.Errorf("err = %v", err)
		}
		if _, err := b.Prepare(t.Context(), build.Request{AgentID: "a"}); err == nil || !strings.Contains(err.Error(), "global_repo is not configured") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	if _, err := build.New(build.Options{Home: t.TempDir(), AgentBinary: filepath.Join(t.TempDir(), "nope")}); err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0 go build ./cmd/choir-agent") {
		t.Errorf("missing binary: %v", err)
	}
}
