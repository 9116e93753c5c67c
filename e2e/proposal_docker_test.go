package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/verbatim"
	"github.com/choirhq/choir/rpc/admin"
)

// greetScript is the tool the model writes: busybox sh and printf only.
const greetScript = "#!/bin/sh\nprintf '{\"status\":\"success\",\"summary\":\"greeted\",\"output\":{\"greeting\":\"hello from greet.hello\"}}'\n"

// dockerGateway is the host's address on Docker's default bridge, where a container
// reaches the host.
func dockerGateway(t *testing.T) string {
	t.Helper()
	gw, err := bridgeGateway()
	if err != nil {
		t.Fatalf("the host's address on Docker's default bridge, for the container to reach the model: %v", err)
	}
	return gw
}

// proxy forwards every connection on addr to target (the scripted model
// listens on loopback; a container reaches the host on docker0 only). At
// cleanup it closes what is still open: a removed container's connection
// may never be closed from its end (its network namespace is gone), and
// the target keeps an idle one open for as long as it likes.
func proxy(t *testing.T, addr, target string) string {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		open  = map[net.Conn]bool{}
		track = func(c net.Conn, on bool) {
			mu.Lock()
			defer mu.Unlock()
			if on {
				open[c] = true
			} else {
				delete(open, c)
			}
		}
	)
	wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			track(c, true)
			wg.Go(func() {
				defer func() { track(c, false); c.Close() }()
				u, err := net.Dial("tcp", target)
				if err != nil {
					return
				}
				track(u, true)
				defer func() { track(u, false); u.Close() }()
				go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
				io.Copy(c, u)
			})
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for c := range open {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

func gitDir(t *testing.T, dir string, args ...string) string {
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

func repoWith(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	gitDir(t, dir, "init", "-q", "-b", "main")
	for name, data := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitDir(t, dir, "add", "-A")
	gitDir(t, dir, "commit", "-q", "-m", "initial")
	return dir
}

var stateRe = regexp.MustCompile(`from state (\w+)`)

// toolBuilderModel plays the model: asked for a greeting tool it runs the
// tool-builder skill (understand, design, validate, propose, done); asked
// to greet, it calls the new tool; anything else (the session summary at
// the update's stop, the outcome of the approval) gets a short text.
func toolBuilderModel(proposal string, greeted *atomic.Pointer[string]) func(context.Context, *llmtest.Request) llmtest.Step {
	return builderModel("greeting tool", "tool-builder", "choir.propose.tool", proposal, greeted)
}

// builderModel runs skill (tool-builder or skill-builder) when the user's
// message holds trigger, calling propose with proposal in its propose
// state.
func builderModel(trigger, skillName, propose, proposal string, greeted *atomic.Pointer[string]) func(context.Context, *llmtest.Request) llmtest.Step {
	var calls atomic.Int64
	call := func(name, args string) llmtest.Step {
		return llmtest.ToolCalls(llmtest.Call{ID: fmt.Sprintf("c%d", calls.Add(1)), Name: name, Arguments: args})
	}
	return func(_ context.Context, r *llmtest.Request) llmtest.Step {
		last := r.Last()
		if last.Role == "tool" && strings.Contains(last.Content, "hello from greet.hello") {
			greeted.Store(&last.Content)
			return llmtest.Text("The new tool says hello.")
		}
		if _, ok := r.Tool("greet.hello"); ok && last.Role == "user" && strings.Contains(last.Content, "greet me") {
			return call("greet.hello", `{}`)
		}
		if tr, ok := r.Tool(skill.TransitionToolName); ok {
			m := stateRe.FindStringSubmatch(tr.Description)
			if m != nil && m[1] == "propose" && !strings.Contains(last.Content, "approval_id") {
				return call(propose, proposal)
			}
			return call(skill.TransitionToolName, `{"event":"complete"}`)
		}
		if last.Role == "user" && strings.Contains(last.Content, trigger) {
			return call("choir.skill.start", `{"name":"`+skillName+`"}`)
		}
		return llmtest.Text("Done.")
	}
}

// TestToolProposalLandsUnderDocker is issue 19's done-when: through the
// tool-builder skill the agent proposes a new external tool, the person
// approves it with the Telegram button, choird commits it to the agent's
// repository, rebuilds the image and updates the agent; the new session's
// registry has the tool, and a call to it works.
//
// In the second run the agent is stopped while the approval waits: the
// change is still merged and built, the DM is told it takes effect at the
// next start, and the next start has the tool. The runs are sequential:
// both build images of agent "assistant". The test is not parallel to the
// others either: TestAgentReposStaged builds and removes
// choir-agent-assistant:latest too, an image name the engine shares, and
// did so under this test's second run (it then found no image to start).
func TestToolProposalLandsUnderDocker(t *testing.T) {
	t.Run("Running", func(t *testing.T) { toolProposalUnderDocker(t, false) })
	t.Run("StoppedBeforeTheApproval", func(t *testing.T) { toolProposalUnderDocker(t, true) })
}

func toolProposalUnderDocker(t *testing.T, stopFirst bool) {
	cli := runtimetest.RequireDocker(t)
	osImage := runtimetest.BusyboxImage(t, cli)
	bin := runtimetest.BuildStatic(t, "github.com/choirhq/choir/cmd/choir-agent")
	global := repoWith(t, map[string]string{
		"Dockerfile.base":       "ARG CHOIR_OS_IMAGE=scratch\nFROM ${CHOIR_OS_IMAGE}\n",
		"identity/USER.md":      "# The user\n",
		"identity/SOUL.md":      "global soul\n",
		"identity/SOUL-CORE.md": "global core soul\n",
	})
	work := repoWith(t, map[string]string{"Dockerfile": "ARG CHOIR_BASE_IMAGE\nFROM ${CHOIR_BASE_IMAGE}\n", "identity/SOUL.md": "agent soul\n"})
	agentRepo := filepath.Join(t.TempDir(), "agent.git")
	gitDir(t, filepath.Dir(agentRepo), "clone", "-q", "--bare", work, agentRepo)

	args, _ := json.Marshal(map[string]any{"change": "add", "name": "greet.hello", "description": "Greet the user.",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false},
		"behavior":   "Returns a greeting.", "rationale": "The user asked for a greeting tool.",
		"runtime": map[string]any{"side_effect": "read", "trust": "own"}, "implementation": map[string]string{"content": greetScript}})
	var greeted atomic.Pointer[string]
	llm := llmtest.NewServer(t)
	llm.SetResponder(toolBuilderModel(string(args), &greeted))
	endpoint := "http://" + proxy(t, dockerGateway(t)+":0", strings.TrimSuffix(strings.TrimPrefix(llm.BaseURL(), "http://"), "/v1")) + "/v1"

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
	t.Cleanup(func() {
		if t.Failed() {
			for i, r := range llm.Requests() {
				last := r.Last()
				t.Logf("model request %d: tools %v; last %s: %.300s", i, r.ToolNames(), last.Role, last.Content)
			}
		}
	})
	o := e.options(t)
	o.ReadyTimeout = 3 * time.Minute
	o.Daemon.Runtime, o.Daemon.AgentBinary, o.Daemon.OSImage = "docker", bin, osImage
	d2 := choirdtest.Start(t, o)
	ctx := context.Background()
	sc := control.Scope{Admin: true, Actor: actorAdmin}
	first, err := d2.AgentBuild(ctx, sc, "assistant", false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeImages(cli, first.Image, first.Version.BaseImage) })
	if _, err := d2.AgentStart(ctx, sc, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	d2.WaitState(t, "assistant", admin.AgentActive)

	e.bot.SendText(userAlice, "please make me a greeting tool")
	request := waitSentTo(t, e.bot, userAlice, "approval request with buttons",
		func(m telegramtest.Message) bool { return len(m.Keyboard()) > 0 })
	texts := strings.Join(sentTexts(e.bot, userAlice), "\n")
	if !strings.Contains(texts, verbatim.Lines(greetScript)) || !strings.Contains(request.Text, "will be merged, built and deployed") {
		t.Fatalf("the person did not see the code in full and what approval does:\n%s", texts)
	}
	landed := "): deployed;"
	if stopFirst {
		if _, err := d2.AgentStop(ctx, sc, "assistant"); err != nil {
			t.Fatal(err)
		}
		d2.WaitState(t, "assistant", admin.AgentStopped)
		landed = "the agent is not running, so it takes effect at its next start"
	}
	e.bot.PressButton(userAlice, request.MessageID, request.Keyboard()[0][0].Data)
	waitSentTo(t, e.bot, userAlice, "the merge step", containsText("merged into main"))
	deployed := waitSentToWithin(t, e.bot, userAlice, "the deploy step", 10*time.Minute, func(m telegramtest.Message) bool {
		return strings.Contains(m.Text, landed) || strings.Contains(m.Text, "failed; approved, not applied")
	})
	if !strings.Contains(deployed.Text, landed) {
		t.Fatalf("the proposal did not land: %s", deployed.Text)
	}
	if stopFirst {
		if _, err := d2.AgentStart(ctx, sc, "assistant", admin.StartOverrides{}); err != nil {
			t.Fatal(err)
		}
	}
	var merge, image, outcome, by string
	d2.Pool().QueryRow(ctx, `SELECT merge_commit, image, outcome, decided_by FROM choir_audit.proposals WHERE agent_id = 'assistant'`).
		Scan(&merge, &image, &outcome, &by)
	t.Cleanup(func() {
		// The build tags its newest image latest too: remove that tag when
		// it is this test's image.
		mine, err1 := cli.ImageInspect(context.Background(), image)
		latest, err2 := cli.ImageInspect(context.Background(), "choir-agent-assistant:latest")
		if err1 == nil && err2 == nil && mine.ID == latest.ID {
			removeImages(cli, "choir-agent-assistant:latest")
		}
		removeImages(cli, image)
	})
	if outcome != "applied" || merge == "" || image == first.Image || !strings.HasPrefix(by, "telegram:") {
		t.Errorf("audit: outcome %q merge %q image %q (was %q) by %q", outcome, merge, image, first.Image, by)
	}
	if got := gitDir(t, agentRepo, "show", "main:tools/greet.hello"); got+"\n" != greetScript {
		t.Errorf("the repository's tool = %q", got)
	}

	d2.WaitState(t, "assistant", admin.AgentActive)
	e.bot.SendText(userAlice, "greet me")
	waitSentTo(t, e.bot, userAlice, "the answer after the new tool ran", containsText("The new tool says hello."))
	if g := greeted.Load(); g == nil || !strings.Contains(*g, "hello from greet.hello") {
		t.Errorf("the tool's result = %v", g)
	}
}

// removeImages removes this test's images, by tag.
func removeImages(cli *client.Client, tags ...string) {
	for _, tag := range tags {
		if tag != "" {
			cli.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true, PruneChildren: true}) //nolint:errcheck
		}
	}
}
