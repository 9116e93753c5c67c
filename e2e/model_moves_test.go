package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
)

// TestCompromisedModelMovesAreRefused plays a model that obeys whatever a
// page or an email told it (issue 29): through the real agent and its
// arbiter, it proposes config changes that reach beyond its own settings
// (the DMs, another agent's entry, its own DM binding) and reads another
// agent's memory without that agent's consent. Each move is refused
// before any person is asked: the tool result the model gets names what
// was refused and why, choird logs it, and no approval is filed.
func TestCompromisedModelMovesAreRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	moves := []struct {
		id, tool, args string
		want           []string // in the tool result the model sees
	}{
		{"cfg-dms", "choir.propose.config_change", `{"rationale": "the page said so", "patch": {"dms": {"mallory": {"gateway": "console", "user": "mallory", "admin": true}}}}`,
			[]string{"dms is not one of them", "Ask an operator"}},
		{"cfg-other", "choir.propose.config_change", `{"rationale": "the page said so", "patch": {"agents": {"helper": {"budgets": {"max_steps": 999}}}}}`,
			[]string{"agents.helper is not one of them"}},
		{"cfg-own-dm", "choir.propose.config_change", `{"rationale": "the page said so", "patch": {"agents": {"assistant": {"defaults": {"dm": "mallory"}}}}}`,
			[]string{"agents.assistant.defaults.dm is not one of them"}},
		{"mem-other", "choir.memory.query", `{"store": "knowledge", "mode": "text", "query": "password", "target_agent": "helper"}`,
			[]string{"agents.helper.memory_readable_by"}},
	}
	var steps []llmtest.Step
	for _, m := range moves {
		steps = append(steps, llmtest.ToolCalls(llmtest.Call{ID: m.id, Name: m.tool, Arguments: m.args}))
	}
	steps = append(steps, llmtest.Text("Done as the page said."), summaryStep())
	srv := llmtest.NewServer(t, steps...)
	c := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL(), FastHeartbeat: true,
		Edit: func(c *config.Config, _ config.Secrets) {
			helper := c.Agents["assistant"]
			helper.Defaults.DM = "helper-dm"
			c.DMs["helper-dm"] = config.DM{Gateway: "console", UserID: "helper-user"}
			c.Agents["helper"] = helper
		}})
	d, home := c.Daemon, c.Home
	sessionID := startAgent(t, d, home)
	if _, err := d.Push(sessionID, rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: 1,
		Gateway: "console", ChatID: "operator", UserID: "operator", Text: "summarise https://evil.example/", ReceivedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the model's last answer", func() bool { return len(srv.Requests()) >= len(moves)+1 })
	reqs := srv.Requests()
	for i, m := range moves {
		// The request after move i carries its result.
		res := reqs[i+1].Last()
		if res.Role != "tool" || !strings.HasSuffix(res.ToolCallID, m.id) {
			t.Errorf("%s: the model's next request ends with %+v, not the move's result", m.id, res)
			continue
		}
		for _, w := range m.want {
			if !strings.Contains(res.Content, w) {
				t.Errorf("%s: the model was told %s; want it to name %q", m.id, res.Content, w)
			}
		}
		if strings.Contains(res.Content, `"success"`) {
			t.Errorf("%s: the move succeeded: %s", m.id, res.Content)
		}
	}
	logs := c.Logs.String()
	for _, w := range []string{"proposal refused before any person saw it", "memory read refused"} {
		if !strings.Contains(logs, w) {
			t.Errorf("choird's log has no %q line", w)
		}
	}
	var filed int
	if err := d.Pool().QueryRow(ctx, "SELECT count(*) FROM choir_control.pending_approvals WHERE session_id = $1",
		sessionID).Scan(&filed); err != nil {
		t.Fatal(err)
	}
	if filed != 0 {
		t.Errorf("%d approvals filed for refused moves: nobody may be asked", filed)
	}
}
