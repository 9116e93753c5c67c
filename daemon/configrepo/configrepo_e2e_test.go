package configrepo_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/configrepo"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
)

// bareRemote makes a bare repository holding files, and returns it and a
// function that commits and pushes more.
func bareRemote(t *testing.T, files map[string]string) (string, func(map[string]string)) {
	t.Helper()
	bare := filepath.Join(t.TempDir(), "remote.git")
	if out, err := exec.Command("git", "init", "-q", "--bare", "-b", "main", bare).CombinedOutput(); err != nil {
		t.Fatalf("git init: %v %s", err, out)
	}
	work := choirdtest.GitRepo(t, files)
	choirdtest.Git(t, work, "push", "-q", bare, "main")
	return bare, func(files map[string]string) {
		choirdtest.CommitFiles(t, work, files)
		choirdtest.Git(t, work, "push", "-q", bare, "main")
	}
}

// TestConfigLoadRepos runs config load through choirctl against real git
// remotes: the repos are fetched and their changes shown with the command
// that applies them; a broken manifest stages nothing and names every
// problem with its repo, file and JSON path; an unreachable remote is a
// warning.
func TestConfigLoadRepos(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := control.Scope{Admin: true, Actor: "test"}
	global, pushGlobal := bareRemote(t, map[string]string{
		"Dockerfile.base":       "ARG CHOIR_OS_IMAGE=scratch\nFROM ${CHOIR_OS_IMAGE}\n",
		"identity/USER.md":      "# The user\n",
		"identity/SOUL.md":      "global soul\n",
		"identity/SOUL-CORE.md": "global core soul\n",
	})
	agentRepo, pushAgent := bareRemote(t, map[string]string{
		"Dockerfile":       "ARG CHOIR_BASE_IMAGE\nFROM ${CHOIR_BASE_IMAGE}\n",
		"identity/SOUL.md": "agent soul\n",
	})
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(c *config.Config, s config.Secrets) {
		c.GlobalRepo = config.Repo{URL: global, Ref: "main"}
		a := c.Agents["assistant"]
		a.Repo = config.Repo{URL: "file://" + agentRepo, Ref: "main"}
		c.Agents["assistant"] = a
	}})
	home := d.Home

	code, out, errs := choirctltest.Run(t, home, "config", "load")
	if code != 0 || !strings.Contains(out, "  global repo: none -> ") || !strings.Contains(out, "+ assistant:identity/SOUL.md") {
		t.Fatalf("first load: %d\n%s\n%s", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(home, "repos", "agents", "assistant", "identity", "SOUL.md")); err != nil {
		t.Fatalf("the agent's repo is not cloned: %v", err)
	}
	if code, out, errs := choirctltest.Run(t, home, "config", "apply"); code != 0 || !strings.Contains(out, "not applied:") {
		t.Fatalf("apply: %d\n%s\n%s", code, out, errs)
	}

	t.Run("RepoChangesAreRestartRequired", func(t *testing.T) {
		pushAgent(map[string]string{"identity/SOUL.md": "a new soul\n"})
		code, out, errs := choirctltest.Run(t, home, "config", "load")
		if code != 0 {
			t.Fatalf("load: %d %s", code, errs)
		}
		for _, want := range []string{"  assistant repo: ", "~ assistant:identity/SOUL.md", "[restart-required] → use: choirctl agent update assistant"} {
			if !strings.Contains(out, want) {
				t.Errorf("load output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "global repo") {
			t.Errorf("the global repo did not change:\n%s", out)
		}
		diff, err := d.ConfigDiff(ctx, admin)
		if err != nil || len(diff.Changes) != 2 || diff.Changes[1].Effect != configrepo.EffectRestartRequired {
			t.Fatalf("diff = %+v, %v", diff, err)
		}
		if _, err := d.ConfigApply(ctx, admin); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("BrokenManifestStagesNothing", func(t *testing.T) {
		pushGlobal(map[string]string{
			"tools/bad.json": `{"llm": {"name": "Bad Name", "description": ""}, "runtime": {"timeout_ms": 0, "side_effect": "read", "trust": "own", "version": "1.0"}}`,
		})
		code, _, errs := choirctltest.Run(t, home, "config", "load")
		if code == 0 {
			t.Fatal("a broken manifest loaded")
		}
		for _, want := range []string{"nothing staged", "global:tools/bad.json $.llm.name:", "global:tools/bad.json $.llm.description:",
			"global:tools/bad.json $.runtime.timeout_ms:"} {
			if !strings.Contains(errs, want) {
				t.Errorf("load error lacks %q:\n%s", want, errs)
			}
		}
		if _, err := d.ConfigDiff(ctx, admin); !errors.Is(err, control.ErrNothingStaged) {
			t.Errorf("diff after a failed load: %v", err)
		}
		os.Remove(filepath.Join(home, "repos", "global", "tools", "bad.json")) // the next fetch restores it anyway
		pushGlobal(map[string]string{"tools/bad.json": `{"llm": {"name": "x.bad", "description": "Fixed.", "parameters": {"type": "object"}}, "runtime": {"timeout_ms": 1000, "side_effect": "read", "trust": "own", "version": "1.0", "exec_path": "bin/bad"}}`})
		if code, out, errs := choirctltest.Run(t, home, "config", "load"); code != 0 || !strings.Contains(out, "+ global:tools/bad.json") {
			t.Fatalf("fixed load: %d\n%s\n%s", code, out, errs)
		}
	})

	t.Run("UnreachableRemoteIsAWarning", func(t *testing.T) {
		choirdtest.EditHome(t, home, func(c *config.Config) {
			a := c.Agents["assistant"]
			a.Repo.URL = "http://127.0.0.1:1/assistant.git"
			c.Agents["assistant"] = a
		}, nil)
		code, out, errs := choirctltest.Run(t, home, "config", "load")
		if code != 0 || !strings.Contains(out, "warnings:") || !strings.Contains(out, "last fetched copy") {
			t.Fatalf("load: %d\n%s\n%s", code, out, errs)
		}
	})
}
