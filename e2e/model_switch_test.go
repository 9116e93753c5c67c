package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// TestModelSwitchCarriesTheProviderKey switches a running session to a
// model of another provider (/model llm, choirctl model set) and checks,
// at the model server, that the calls after the switch carry the new
// provider's API key, not the start-time provider's key and not none. The
// agent (a child process of choird) holds neither key: choird's egress
// gateway adds the key of the model each call names.
func TestModelSwitchCarriesTheProviderKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := llmtest.NewServer(t,
		llmtest.Text("Answered by the first provider."),
		llmtest.Text("Answered by the second provider."),
		summaryStep(),
	)
	d := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL(), FastHeartbeat: true, ReadyTimeout: 2 * time.Minute,
		Daemon: daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent")},
		Edit: func(c *config.Config, s config.Secrets) {
			local := c.Models["local"]
			local.Secret = "local-key"
			c.Models["local"] = local
			c.Models["other"] = config.Model{Provider: "other-provider", Model: "other-model", Endpoint: srv.BaseURL(),
				Secret: "other-key"}
			s["local-key"] = "sk-local-provider"
			s["other-key"] = "sk-other-provider"
		}})
	sc := control.Scope{Admin: true, Actor: "e2e"}
	if _, err := d.AgentStart(ctx, sc, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.AgentStop(context.Background(), sc, "assistant") }) //nolint:errcheck // stopped already, or the test failed
	sessionID := liveSession(t, d.Pool(), "assistant").String()
	pool := d.Pool()
	say := func(inboxID int64, text, wantReply string) {
		t.Helper()
		if _, err := d.Push(sessionID, rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: inboxID,
			Gateway: "console", ChatID: "operator", UserID: "operator", Text: text, ReceivedAt: time.Now()}}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "the reply "+wantReply, func() bool {
			var n int
			pool.QueryRow(ctx, "SELECT count(*) FROM choir_control.outbox WHERE session_id = $1 AND text = $2",
				sessionID, wantReply).Scan(&n)
			return n == 1
		})
	}

	say(1, "hello", "Answered by the first provider.")

	st, err := d.ModelSet(ctx, sc, "assistant", "other")
	if err != nil || st.LLM != "other" {
		t.Fatalf("model set: %+v, %v", st, err)
	}
	// The agent has the switch once it fetched the override (pushes are
	// handled in order, so the next message comes after it).
	waitFor(t, "the agent to fetch the override", func() bool {
		var fetched bool
		pool.QueryRow(ctx, "SELECT fetched_rev = rev FROM choir_control.session_overrides WHERE session_id = $1",
			sessionID).Scan(&fetched)
		return fetched
	})
	say(2, "and now?", "Answered by the second provider.")

	reqs := srv.Requests()
	if len(reqs) < 2 {
		t.Fatalf("%d model requests, want 2", len(reqs))
	}
	if r := reqs[0]; r.Model != "llama3.1" || r.APIKey != "sk-local-provider" {
		t.Errorf("before the switch: model %q with key %q, want llama3.1 with sk-local-provider", r.Model, r.APIKey)
	}
	if r := reqs[1]; r.Model != "other-model" || r.APIKey != "sk-other-provider" {
		t.Errorf("after the switch: model %q with key %q, want other-model with sk-other-provider", r.Model, r.APIKey)
	}
}
