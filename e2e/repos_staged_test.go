package e2e

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestAgentReposStaged: the agent's repositories reach it under both
// runtimes, through the same staging (git objects at the fetched commits):
// its SOUL.md is in the model's system prompt, its tool in the model's
// tools, and its .choir/mcp.json is read (the optional server that cannot
// start is logged by name). Before, a process agent got none of them.
func TestAgentReposStaged(t *testing.T) {
	t.Parallel()
	t.Run("Process", func(t *testing.T) { t.Parallel(); reposStaged(t, "process") })
	t.Run("Docker", func(t *testing.T) { t.Parallel(); reposStaged(t, "docker") })
}

func reposStaged(t *testing.T, rt string) {
	soul := "staged soul " + runtimetest.RandomHex(6)
	global := repoWith(t, map[string]string{
		"Dockerfile.base":       "ARG CHOIR_OS_IMAGE=scratch\nFROM ${CHOIR_OS_IMAGE}\n",
		"identity/USER.md":      "# The user\n",
		"identity/SOUL.md":      "global soul\n",
		"identity/SOUL-CORE.md": "global core soul\n",
	})
	agentRepo := repoWith(t, map[string]string{
		"identity/SOUL.md": soul + "\n",
		"tools/greet.hello.json": `{"llm": {"name": "greet.hello", "description": "Greet the user.", "parameters": {"type": "object", "properties": {}}},
 "runtime": {"timeout_ms": 5000, "side_effect": "read", "trust": "own", "version": "1.0"}}`,
		".choir/mcp.json": `{"servers": {"stagedfiles": {"command": "/nonexistent/files-mcp", "optional": true}}}`,
	})
	if err := os.WriteFile(filepath.Join(agentRepo, "tools", "greet.hello"), []byte(greetScript), 0o755); err != nil {
		t.Fatal(err)
	}
	gitDir(t, agentRepo, "add", "-A")
	gitDir(t, agentRepo, "commit", "-q", "-m", "the tool's executable")

	llm := llmtest.NewServer(t)
	llm.SetResponder(func(context.Context, *llmtest.Request) llmtest.Step { return llmtest.Text("Hello.") })
	endpoint := llm.BaseURL()
	if rt == "docker" {
		endpoint = "http://" + proxy(t, dockerGateway(t)+":0", strings.TrimSuffix(strings.TrimPrefix(llm.BaseURL(), "http://"), "/v1")) + "/v1"
	}
	e := newTGEnv(t, llm, func(c *config.Config) {
		m := c.Models["local"]
		m.Endpoint = endpoint
		c.Models["local"] = m
		c.GlobalRepo = config.Repo{URL: global, Ref: "main"}
		a := c.Agents["assistant"]
		a.Repo = config.Repo{URL: agentRepo, Ref: "main"}
		c.Agents["assistant"] = a
	})
	e.dumpLogsOnFailure(t, "assistant")
	o := e.options(t)
	ctx := context.Background()
	sc := control.Scope{Admin: true, Actor: actorAdmin}
	if rt == "docker" {
		cli := runtimetest.RequireDocker(t)
		o.ReadyTimeout = 3 * time.Minute
		o.Daemon.Runtime, o.Daemon.AgentBinary, o.Daemon.OSImage = "docker", runtimetest.BuildStatic(t, "github.com/choirhq/choir/cmd/choir-agent"), runtimetest.BusyboxImage(t, cli)
		d := choirdtest.Start(t, o)
		res, err := d.AgentBuild(ctx, sc, "assistant", false)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { removeImages(cli, res.Image, "choir-agent-assistant:latest", res.Version.BaseImage) })
		if _, err := d.AgentStart(ctx, sc, "assistant", admin.StartOverrides{}); err != nil {
			t.Fatal(err)
		}
		d.WaitState(t, "assistant", admin.AgentActive)
	} else {
		d := choirdtest.Start(t, o)
		if _, err := d.AgentStart(ctx, sc, "assistant", admin.StartOverrides{}); err != nil {
			t.Fatal(err)
		}
		d.WaitState(t, "assistant", admin.AgentActive)
	}
	e.bot.SendText(userAlice, "hello there")
	waitSentTo(t, e.bot, userAlice, "the answer", containsText("Hello."))
	reqs := llm.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model was never called")
	}
	if sys := reqs[0].System(); !strings.Contains(sys, soul) {
		t.Errorf("the system prompt lacks the agent repo's SOUL.md %q:\n%.2000s", soul, sys)
	}
	if names := reqs[0].ToolNames(); !slices.Contains(names, "greet.hello") {
		t.Errorf("the model's tools lack greet.hello: %v", names)
	}
	waitUntil(t, "the optional MCP server logged", func() bool { return strings.Contains(e.agentLog("assistant"), "stagedfiles") })
}

// TestAgentRepoLinkToAHostFileRefused: an agent repository whose SOUL.md
// is a link to a host file is refused, naming the file, before any agent
// runs on it, under both runtimes; the host file's content reaches
// neither the error nor choird's log.
func TestAgentRepoLinkToAHostFileRefused(t *testing.T) {
	t.Parallel()
	for _, rt := range []string{"process", "docker"} {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			secret := "CANARY-" + runtimetest.RandomHex(8)
			hostFile := filepath.Join(t.TempDir(), "secret.txt")
			if err := os.WriteFile(hostFile, []byte(secret+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			global := repoWith(t, map[string]string{
				"Dockerfile.base":       "ARG CHOIR_OS_IMAGE=scratch\nFROM ${CHOIR_OS_IMAGE}\n",
				"identity/USER.md":      "# The user\n",
				"identity/SOUL.md":      "global soul\n",
				"identity/SOUL-CORE.md": "global core soul\n",
			})
			agentRepo := repoWith(t, map[string]string{"README": "agent\n"})
			os.MkdirAll(filepath.Join(agentRepo, "identity"), 0o755)
			if err := os.Symlink(hostFile, filepath.Join(agentRepo, "identity", "SOUL.md")); err != nil {
				t.Fatal(err)
			}
			gitDir(t, agentRepo, "add", "-A")
			gitDir(t, agentRepo, "commit", "-q", "-m", "soul")
			llm := llmtest.NewServer(t)
			e := newTGEnv(t, llm, func(c *config.Config) {
				c.GlobalRepo = config.Repo{URL: global, Ref: "main"}
				a := c.Agents["assistant"]
				a.Repo = config.Repo{URL: agentRepo, Ref: "main"}
				c.Agents["assistant"] = a
			})
			o := e.options(t)
			ctx := context.Background()
			sc := control.Scope{Admin: true, Actor: actorAdmin}
			var err error
			if rt == "docker" {
				cli := runtimetest.RequireDocker(t)
				o.Daemon.Runtime, o.Daemon.AgentBinary, o.Daemon.OSImage = "docker", runtimetest.BuildAgent(t), runtimetest.BusyboxImage(t, cli)
				_, err = choirdtest.Start(t, o).AgentBuild(ctx, sc, "assistant", false)
			} else {
				_, err = choirdtest.Start(t, o).AgentStart(ctx, sc, "assistant", admin.StartOverrides{})
			}
			if err == nil || !strings.Contains(err.Error(), "agent repo identity/SOUL.md: a symbolic link to "+hostFile+", outside the repository") {
				t.Fatalf("%s: %v, want the link refused naming identity/SOUL.md", rt, err)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(e.choirdLog(), secret) {
				t.Error("the host file's content reached the error or choird's log")
			}
			if !strings.Contains(e.choirdLog(), "symbolic link that leaves it") {
				t.Error("choird did not log the refusal")
			}
			if len(llm.Requests()) > 0 {
				t.Error("an agent ran")
			}
		})
	}
}
