package configrepo_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/configdiff"
	"github.com/choirhq/choir/daemon/configrepo"
)

// file is one file of a test repository; a zero mode deletes it.
type file struct {
	data string
	mode os.FileMode
}

func text(s string) file   { return file{data: s, mode: 0o644} }
func script(s string) file { return file{data: s, mode: 0o755} }

var deleted = file{}

func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@choir.test",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@choir.test", "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// remote is a bare repository, the remote config.json names, and a work
// tree that pushes to it.
type remote struct {
	t    *testing.T
	bare string
	work string
}

func newRemote(t *testing.T, files map[string]file) *remote {
	t.Helper()
	r := &remote{t: t, bare: filepath.Join(t.TempDir(), "repo.git"), work: t.TempDir()}
	git(t, "", "init", "--quiet", "--bare", "--initial-branch=main", r.bare)
	git(t, r.work, "init", "--quiet", "--initial-branch=main")
	git(t, r.work, "remote", "add", "origin", r.bare)
	r.push(files)
	return r
}

// push commits files to the work tree and pushes; it returns the commit.
func (r *remote) push(files map[string]file) string {
	r.t.Helper()
	for name, f := range files {
		p := filepath.Join(r.work, name)
		if f.mode == 0 {
			os.Remove(p)
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			r.t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.data), f.mode); err != nil {
			r.t.Fatal(err)
		}
		os.Chmod(p, f.mode)
	}
	git(r.t, r.work, "add", "-A")
	git(r.t, r.work, "commit", "--quiet", "--allow-empty", "-m", "change")
	git(r.t, r.work, "push", "--quiet", "origin", "main")
	return git(r.t, r.work, "rev-parse", "HEAD")
}

func (r *remote) head() string { return git(r.t, r.work, "rev-parse", "HEAD") }

func manifest(name string) string {
	return `{"llm": {"name": "` + name + `", "description": "A test tool.", "parameters": {"type": "object", "properties": {}}},
 "runtime": {"timeout_ms": 5000, "side_effect": "read", "trust": "own", "version": "1.0"}}`
}

func skill(name, tool string) string {
	return `{"name": "` + name + `", "description": "Review something.", "initial_state": "work",
 "states": {"work": {"objective": "Do the work.", "allowed_tools": ["` + tool + `"], "transitions": [{"on": "complete", "to": "done"}]},
            "done": {"terminal": true}},
 "max_steps": 5, "interruptible": true}`
}

func globalFiles() map[string]file {
	return map[string]file{
		"Dockerfile.base":       text("ARG CHOIR_OS_IMAGE=scratch\nFROM ${CHOIR_OS_IMAGE}\nRUN echo base \\\n  > /etc/base\n"),
		"identity/USER.md":      text("# The user\n"),
		"identity/SOUL.md":      text("global soul\n"),
		"identity/SOUL-CORE.md": text("global core soul\n"),
		"tools/greet.json":      text(manifest("x.greet")),
		"tools/greet":           script("#!/bin/sh\necho hi\n"),
		"skills/review.json":    text(skill("review", "x.greet")),
		"README.md":             text("not baked\n"),
	}
}

func agentFiles() map[string]file {
	return map[string]file{
		"Dockerfile":        text("ARG CHOIR_BASE_IMAGE\nFROM ${CHOIR_BASE_IMAGE}\n"),
		"identity/SOUL.md":  text("agent soul\n"),
		"tools/local.json":  text(manifest("x.local")),
		"tools/local":       script("#!/bin/sh\necho local\n"),
		"skills/local.json": text(skill("local", "x.local")),
	}
}

type testBundle struct {
	home   string
	global *remote
	agent  *remote
	cfg    *config.Config
	repos  *configrepo.Repos
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{home: t.TempDir(), global: newRemote(t, globalFiles()), agent: newRemote(t, agentFiles()), repos: &configrepo.Repos{}}
	b.cfg = &config.Config{
		GlobalRepo: config.Repo{URL: b.global.bare, Ref: "main"},
		Agents: map[string]config.Agent{
			"agent-1": {Repo: config.Repo{URL: "file://" + b.agent.bare, Ref: "main"}},
			"norepo":  {},
		},
	}
	return b
}

func (b *testBundle) load(t *testing.T) (*configrepo.State, []string, error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	return b.repos.Load(ctx, configrepo.Options{Home: b.home}, b.cfg)
}

func (b *testBundle) mustLoad(t *testing.T) (*configrepo.State, []string) {
	t.Helper()
	st, warnings, err := b.load(t)
	if err != nil {
		t.Fatalf("load: %v", err)
	}
	return st, warnings
}

func TestLoad(t *testing.T) {
	t.Parallel()

	t.Run("FetchesEveryRepoAndHashesWhatABuildBakes", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		st, warnings := b.mustLoad(t)
		if len(warnings) != 0 {
			t.Errorf("warnings: %v", warnings)
		}
		if got := slices.Sorted(mapsKeys(st.Repos)); !slices.Equal(got, []string{"agent-1", "global"}) {
			t.Fatalf("repos = %v", got)
		}
		if g := st.Repos["global"]; g.Commit != b.global.head() || g.Stale {
			t.Errorf("global = %+v, want commit %s", g, b.global.head())
		}
		if a := st.Repos["agent-1"]; a.Commit != b.agent.head() {
			t.Errorf("agent-1 commit %s, want %s", a.Commit, b.agent.head())
		}
		wantFiles := []string{"Dockerfile.base", "identity/SOUL-CORE.md", "identity/SOUL.md", "identity/USER.md",
			"skills/review.json", "tools/greet", "tools/greet.json"}
		if got := slices.Sorted(mapsKeys(st.Repos["global"].Files)); !slices.Equal(got, wantFiles) {
			t.Errorf("global files = %v, want %v", got, wantFiles)
		}
		for _, p := range []string{"repos/global/tools/greet.json", "repos/agents/agent-1/tools/local.json"} {
			if _, err := os.Stat(filepath.Join(b.home, p)); err != nil {
				t.Errorf("clone: %v", err)
			}
		}
	})

	t.Run("UnreachableRemoteIsAWarningAndTheLastCopyIsChecked", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		first, _ := b.mustLoad(t)
		b.agent.push(map[string]file{"identity/SOUL.md": text("never fetched\n")})
		a := b.cfg.Agents["agent-1"]
		a.Repo.URL = "http://127.0.0.1:1/agent-1.git" // nothing listens on port 1
		b.cfg.Agents["agent-1"] = a
		st, warnings := b.mustLoad(t)
		if len(warnings) != 1 || !strings.Contains(warnings[0], "agent agent-1") ||
			!strings.Contains(warnings[0], "last fetched copy") || !strings.Contains(warnings[0], first.Repos["agent-1"].Commit[:7]) {
			t.Fatalf("warnings = %q", warnings)
		}
		if got := st.Repos["agent-1"]; !got.Stale || got.Commit != first.Repos["agent-1"].Commit {
			t.Errorf("agent-1 = %+v, want the stale first commit", got)
		}
		if st.Repos["global"].Stale {
			t.Error("global is stale")
		}
	})

	t.Run("UnreachableRemoteWithoutACopyIsAProblem", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.cfg.Agents["agent-2"] = config.Agent{Repo: config.Repo{URL: "http://127.0.0.1:1/agent-2.git", Ref: "main"}}
		st, _, err := b.load(t)
		var inv *configrepo.InvalidError
		if !errors.As(err, &inv) || st != nil {
			t.Fatalf("load = %v, %v", st, err)
		}
		if len(inv.Problems) != 1 || inv.Problems[0].Repo != "agent-2" || !strings.Contains(inv.Problems[0].Message, "no earlier copy") {
			t.Errorf("problems = %v", inv.Problems)
		}
	})

	t.Run("NoGlobalRepoChecksNothingAndSaysSo", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.cfg.GlobalRepo = config.Repo{}
		st, warnings := b.mustLoad(t)
		if len(st.Repos) != 0 || len(warnings) != 1 || !strings.Contains(warnings[0], "global_repo") {
			t.Errorf("state %v, warnings %v", st, warnings)
		}
	})
}

func TestLoadReportsEveryProblem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.global.push(map[string]file{
		"tools/broken.json": text(`{"llm": `),
		"Dockerfile.base":   text("ARG CHOIR_OS_IMAGE=scratch\nRUN echo before from\nFROM ${CHOIR_OS_IMAGE}\nCOPYY a b\n"),
	})
	b.agent.push(map[string]file{
		"tools/bad.json":   text(`{"llm": {"name": "Bad Name", "description": ""}, "runtime": {"timeout_ms": 0, "side_effect": "read", "trust": "own", "version": "1.0", "colour": "red"}}`),
		"tools/bad":        script("#!/bin/sh\n"),
		"tools/plain.json": text(manifest("x.plain")),
		"tools/plain":      text("not executable\n"),
		"skills/odd.json":  text(strings.Replace(skill("odd", "x.nowhere"), `"to": "done"`, `"to": "nowhere"`, 1)),
	})
	st, _, err := b.load(t)
	var inv *configrepo.InvalidError
	if !errors.As(err, &inv) || st != nil {
		t.Fatalf("load = %v, %v", st, err)
	}
	var got []string
	for _, p := range inv.Problems {
		got = append(got, p.String())
		if p.Repo == "" || p.File == "" {
			t.Errorf("problem without its repo or file: %+v", p)
		}
	}
	want := []string{
		"global:tools/broken.json $.llm: unexpected end of input",
		"global:Dockerfile.base line 2: RUN before the first FROM",
		"global:Dockerfile.base line 4: unknown instruction \"COPYY\"",
		"agent-1:tools/bad.json $.runtime.colour: unknown field",
		"agent-1:tools/plain.json $.runtime.exec_path: executable ",
		"agent-1:skills/odd.json $.states.work.allowed_tools[0]: unknown tool \"x.nowhere\"",
		"agent-1:skills/odd.json $.states.work.transitions[0].to: \"nowhere\" is not a state",
	}
	text := strings.Join(got, "\n")
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("problems lack %q:\n%s", w, text)
		}
	}
	if msg := err.Error(); !strings.Contains(msg, "nothing staged") || strings.Count(msg, "\n  ") != len(inv.Problems) {
		t.Errorf("error = %s", msg)
	}

	// With the tools fixed, the skill's problems remain.
	b.global.push(map[string]file{"tools/broken.json": deleted, "Dockerfile.base": globalFiles()["Dockerfile.base"]})
	b.agent.push(map[string]file{"tools/bad.json": deleted, "tools/bad": deleted, "tools/plain.json": deleted, "tools/plain": deleted})
	_, _, err = b.load(t)
	if !errors.As(err, &inv) || len(inv.Problems) != 2 ||
		inv.Problems[0].String() != `agent-1:skills/odd.json $.states.work.transitions[0].to: "nowhere" is not a state` ||
		inv.Problems[1].String() != `agent-1:skills/odd.json $.states.work.allowed_tools[0]: unknown tool "x.nowhere"` {
		t.Fatalf("load = %v", err)
	}

	// Fixed and pushed, the same repos load.
	b.agent.push(map[string]file{"skills/odd.json": deleted})
	b.mustLoad(t)
}

func TestLoadReportsStructurallyInvalidToolFields(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.agent.push(map[string]file{
		"tools/bad.json": text(`{"llm": {"name": "Bad Name", "description": ""}, "runtime": {"timeout_ms": 0, "side_effect": "read", "trust": "own", "version": "1.0"}}`),
		"tools/bad":      script("#!/bin/sh\n"),
	})
	_, _, err := b.load(t)
	var inv *configrepo.InvalidError
	if !errors.As(err, &inv) {
		t.Fatalf("load: %v", err)
	}
	paths := map[string]bool{}
	for _, p := range inv.Problems {
		if p.Repo == "agent-1" && p.File == "tools/bad.json" {
			paths[p.Path] = true
		}
	}
	for _, want := range []string{"$.llm.name", "$.llm.description", "$.runtime.timeout_ms"} {
		if !paths[want] {
			t.Errorf("no problem at %s: %v", want, inv.Problems)
		}
	}
}

func TestDiffClassifiesRepoChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first, _ := b.mustLoad(t)
	// The first load had no clones before it: everything is new.
	if ch := b.repos.Diff(first); len(ch) == 0 || ch[0].Op != configdiff.OpAdd || ch[0].Repo != "global" {
		t.Fatalf("first diff = %v", ch)
	}
	b.repos.Apply(first)
	if ch := b.repos.Diff(first); len(ch) != 0 {
		t.Fatalf("diff against itself = %v", ch)
	}

	oldGlobal, oldAgent := b.global.head(), b.agent.head()
	newGlobal := b.global.push(map[string]file{
		"tools/greet.json": text(strings.Replace(manifest("x.greet"), "A test tool.", "Greets.", 1)),
		"README.md":        text("changed, but not baked\n"),
	})
	newAgent := b.agent.push(map[string]file{
		"identity/SOUL.md":   text("a new soul\n"),
		"skills/review.json": text(skill("review", "x.local")),
		"skills/local.json":  deleted,
	})
	second, _ := b.mustLoad(t)
	var got []string
	for _, ch := range b.repos.Diff(second) {
		if ch.Effect != configrepo.EffectRestartRequired {
			t.Errorf("%s: effect %q", ch, ch.Effect)
		}
		got = append(got, ch.String())
	}
	want := []string{
		"~ global repo: " + oldGlobal + " -> " + newGlobal + "  [restart-required: choirctl agent update-all]",
		"~ global:tools/greet.json  [restart-required: choirctl agent update-all]",
		"~ agent-1 repo: " + oldAgent + " -> " + newAgent + "  [restart-required: choirctl agent update agent-1]",
		"~ agent-1:identity/SOUL.md  [restart-required: choirctl agent update agent-1]",
		"- agent-1:skills/local.json  [restart-required: choirctl agent update agent-1]",
		"+ agent-1:skills/review.json  [restart-required: choirctl agent update agent-1]",
	}
	if !slices.Equal(got, want) {
		t.Errorf("diff =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// The report prints them in the spec's form, hot and restart-required
	// alike, each with the command that applies it.
	report := configdiff.DiffReport{Changes: append([]configdiff.Change{{Op: configdiff.OpChange, File: config.ConfigFile,
		Path: "$.models.default", Old: "a", New: "b", Effect: "hot-reload"}}, b.repos.Diff(second)...)}
	out := report.String()
	for _, w := range []string{
		"~ config.json: models.default",
		"[hot-reload]",
		"→ included in: choirctl config apply",
		"  global repo: " + oldGlobal[:7] + " -> " + newGlobal[:7],
		"~ global:tools/greet.json",
		"[restart-required] → use: choirctl agent update-all",
		"~ agent-1:identity/SOUL.md",
		"→ use: choirctl agent update agent-1",
		"1 changes; 6 repository changes",
	} {
		if !strings.Contains(out, w) {
			t.Errorf("report lacks %q:\n%s", w, out)
		}
	}
}

func mapsKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
