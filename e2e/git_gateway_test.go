package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/gittest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// gitCommand is what the model has choir.exec run against the remote at
// HOST: a push of a new commit, a clone of what was pushed, and a push to
// a repository the identity may not reach, whose refusal it prints.
const gitCommand = `set -e
git init -q -b main src
cd src
echo hello > a.txt
git add a.txt
git commit -q -m "pushed by the agent"
git push -q https://HOST/team/app.git HEAD:refs/heads/main
cd ..
git clone -q https://HOST/team/app.git copy
echo "cloned: $(cat copy/a.txt)"
cd src
if git push https://HOST/else/app.git HEAD:refs/heads/main 2>refused.txt; then echo "else: pushed"; else echo "else: $(cat refused.txt)"; fi`

// TestGitThroughTheGateway: an agent that choird starts (the process
// runtime hands it the egress gateway) runs git push and git clone with
// choir.exec against an HTTPS remote that wants the git identity's token.
// Both work through choird's git route: the remote sees the token on
// every request, the agent's command never does, a push to a repository
// the identity may not reach is refused with the reason in git's output,
// and choird never hands the token to the agent, nor gives it on
// GET_SECRETS.
func TestGitThroughTheGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const token = "ghp-e2e-gateway-token"
	up := gittest.NewServer(t, token)
	up.Init(t, "team/app.git")
	up.Init(t, "else/app.git")

	var mu sync.Mutex
	var result string
	var done atomic.Bool
	args, _ := json.Marshal(map[string]any{"command": strings.ReplaceAll(gitCommand, "HOST", up.Host()), "timeout_ms": 60000})
	llm := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{ID: "git", Name: "choir.exec", Arguments: string(args)}),
		llmtest.Text("done").Expect(func(t testing.TB, req *llmtest.Request) {
			mu.Lock()
			defer mu.Unlock()
			for _, m := range req.Messages {
				if m.Role == "tool" && m.ToolCallID == "git" {
					result = m.Content
				}
			}
			done.Store(true)
		}),
		llmtest.Text("The agent pushed and cloned."), // the session summary at the stop
	)
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{ModelEndpoint: llm.BaseURL(), ReadyTimeout: 2 * time.Minute,
		Daemon: daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent"),
			ServiceTransport: up.Transport()},
		Edit: func(c *config.Config, s config.Secrets) {
			choirdtest.FastHeartbeat(c, s)
			c.CrashDetectionThresholdMS = 30_000 // about git through the gateway, not crash detection
			gi := c.GitIdentities["dev"]
			gi.Hosts, gi.Repos = []string{up.Host()}, []string{"team/*"}
			c.GitIdentities["dev"] = gi
			s["git-token"] = token
		}})
	if code, _, errs := choirctltest.Run(t, d.Home, "agent", "start", "assistant", "--dm", "console"); code != 0 {
		t.Fatalf("start: %s", errs)
	}
	st := d.WaitState(t, "assistant", admin.AgentActive)
	if _, err := d.Push(st.SessionID, choirdtest.UserMessage("push and clone")); err != nil {
		t.Fatal(err)
	}
	choirdtest.WaitFor(t, "choir.exec's result at the model", d.Logs, done.Load)
	d.StopAgents(t)
	mu.Lock()
	defer mu.Unlock()
	t.Logf("choir.exec:\n%s", result)

	if got := up.Log(t, "team/app.git", "main"); got != "pushed by the agent" {
		t.Errorf("the remote's main is %q, want the agent's commit", got)
	}
	if !strings.Contains(result, "cloned: hello") {
		t.Errorf("the clone did not bring back the pushed file: %s", result)
	}
	if !strings.Contains(result, "repository else/app is not allowed: git identity dev may reach team/*") {
		t.Errorf("the refused push does not say why: %s", result)
	}
	if strings.Contains(result, token) {
		t.Errorf("the command's output holds the token: %s", result)
	}
	reqs := up.Requests()
	if len(reqs) == 0 {
		t.Fatal("nothing reached the remote")
	}
	for _, r := range reqs {
		if !r.Authorized {
			t.Errorf("%s %s reached the remote without the token", r.Method, r.Path)
		}
		if strings.HasPrefix(r.Path, "/else/") {
			t.Errorf("the refused push reached the remote: %s %s", r.Method, r.Path)
		}
	}
	for _, line := range strings.Split(d.Logs.String(), "\n") {
		if strings.Contains(line, `"msg":"secrets handed to agent"`) && strings.Contains(line, "git-token") {
			t.Errorf("choird handed the agent the git token: %s", line)
		}
	}
	// The agent itself could not have had it either: its session may not
	// ask for it.
	agent := d.StandIn(t, "assistant", admin.StartOverrides{DM: "console"})
	_, err := agent.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"git-token"}})
	if !errors.Is(err, wire.ErrPermissionDenied) {
		t.Errorf("GET_SECRETS git-token: %v, want permission denied", err)
	}
}
