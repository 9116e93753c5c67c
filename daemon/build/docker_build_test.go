package build_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestAgentBuildAndUpdate builds an agent's image from real git repos,
// starts the real agent from it under docker (version.json checked first),
// then updates it after a repo change: a new image, the agent redeployed,
// and update-all with nothing changed skipping it.
func TestAgentBuildAndUpdate(t *testing.T) {
	t.Parallel()
	cli := runtimetest.RequireDocker(t)
	osImage := runtimetest.BusyboxImage(t, cli)
	bin := runtimetest.BuildStatic(t, "github.com/choirhq/choir/cmd/choir-agent")
	global := choirdtest.GitRepo(t, map[string]string{
		"Dockerfile.base":       "ARG CHOIR_OS_IMAGE=scratch\nFROM ${CHOIR_OS_IMAGE}\n",
		"identity/USER.md":      "# The user\n",
		"identity/SOUL.md":      "global soul\n",
		"identity/SOUL-CORE.md": "global core soul\n",
	})
	agentRepo := choirdtest.GitRepo(t, map[string]string{
		"Dockerfile":       "ARG CHOIR_BASE_IMAGE\nFROM ${CHOIR_BASE_IMAGE}\n",
		"identity/SOUL.md": "agent soul, first\n",
	})
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Daemon: daemon.Options{Runtime: "docker", AgentBinary: bin, OSImage: osImage},
		Edit: func(c *config.Config, s config.Secrets) {
			choirdtest.FastHeartbeat(c, s)
			c.GlobalRepo = config.Repo{URL: global, Ref: "main"}
			// Agents of this test's own: their images' names are the
			// engine's, shared with every other test's agents.
			a, h := c.Agents["assistant"], c.Agents["helper"]
			a.Repo = config.Repo{URL: "file://" + agentRepo, Ref: "main"}
			delete(c.Agents, "assistant")
			delete(c.Agents, "helper")
			c.Agents["bt-assistant"], c.Agents["bt-helper"] = a, h
		}})
	defer d.StopAgents(t)
	home := d.Home
	t.Cleanup(func() {
		removeAgentImages(t, cli, "choir-agent-bt-assistant")
		removeAgentImages(t, cli, "choir-agent-bt-helper")
	})

	code, out, errs := choirctltest.Run(t, home, "agent", "build", "bt-assistant", "--json")
	var built admin.BuildResult
	if code != 0 || json.Unmarshal([]byte(out), &built) != nil || !built.Built {
		t.Fatalf("build: %d %s %s", code, out, errs)
	}
	// Base images are keyed by the global commit: this test's are its own.
	t.Cleanup(func() {
		removeAgentImages(t, cli, strings.Split(built.Version.BaseImage, ":")[0]+":"+strings.Split(built.Version.BaseImage, ":")[1])
	})
	code, out, _ = choirctltest.Run(t, home, "agent", "build", "bt-assistant")
	if code != 0 || !strings.Contains(out, "up to date") {
		t.Fatalf("second build: %s", out)
	}
	if code, _, errs := choirctltest.Run(t, home, "agent", "start", "bt-assistant", "--dm", "console"); code != 0 {
		t.Fatalf("start: %s", errs)
	}
	first := d.WaitState(t, "bt-assistant", admin.AgentActive)

	choirdtest.CommitFiles(t, agentRepo, map[string]string{"identity/SOUL.md": "agent soul, second\n"})

	code, out, errs = choirctltest.Run(t, home, "agent", "update", "bt-assistant")
	if code != 0 || !strings.Contains(out, "redeployed") {
		t.Fatalf("update: %d %s %s", code, out, errs)
	}
	second := d.WaitState(t, "bt-assistant", admin.AgentActive)
	if second.SessionID == first.SessionID {
		t.Error("update did not start a new session")
	}
	code, out, _ = choirctltest.Run(t, home, "agent", "update-all", "--json")
	if code != 0 || !strings.Contains(out, `"agent_id": "bt-assistant"`) {
		t.Fatalf("update-all: %s", out)
	}
	var results []admin.UpdateResult
	if err := json.Unmarshal([]byte(out), &results); err != nil {
		t.Fatal(err)
	}
	for _, res := range results {
		if res.AgentID == "bt-assistant" && res.Outcome != "skipped" {
			t.Errorf("unchanged running agent: %+v, want skipped", res)
		}
		if res.AgentID == "bt-helper" && res.Outcome != "built" {
			t.Errorf("stopped agent: %+v, want built and not started", res)
		}
	}
}

func removeAgentImages(t *testing.T, cli *client.Client, repo string) {
	ctx := context.Background()
	list, err := cli.ImageList(ctx, client.ImageListOptions{})
	if err != nil {
		return
	}
	for _, img := range list.Items {
		for _, tag := range img.RepoTags {
			if strings.HasPrefix(tag, repo+":") || tag == repo {
				cli.ImageRemove(ctx, tag, client.ImageRemoveOptions{Force: true, PruneChildren: true}) //nolint:errcheck
			}
		}
	}
}
