package e2e

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/ctl"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestModelCallsGoThroughTheGateway: an agent that choird starts (the
// process runtime hands it the egress gateway) calls its model through
// the gateway's service route. The model endpoint gets choird's key and
// none of the agent's labels; each call is reserved and settled in the
// spend ledger; and choir_audit.usage counts each call once, though both
// the ledger and the agent's log record it.
func TestModelCallsGoThroughTheGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := llmtest.NewServer(t, llmtest.Text("Hello through the gateway."), summaryStep())
	c := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL(), FastHeartbeat: true, ReadyTimeout: 2 * time.Minute,
		Daemon: daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent")},
		Edit: func(cfg *config.Config, secrets config.Secrets) {
			m := cfg.Models["local"]
			m.Secret = "model-key"
			cfg.Models["local"] = m
			secrets["model-key"] = choirdtest.Canary
		}})
	sc := control.Scope{Admin: true, Actor: "test"}
	st, err := c.AgentStart(ctx, sc, "assistant", admin.StartOverrides{})
	if err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := ctl.Run(ctx, []string{"--home", c.Home, "chat", "assistant", "-m", "hello", "--quiet", "500ms"}, &out, &errb); code != 0 {
		t.Fatalf("choirctl chat exit %d: %s", code, errb.String())
	}
	if _, err := c.AgentStop(ctx, sc, "assistant"); err != nil {
		t.Fatal(err)
	}

	reqs := srv.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want the reply and the session summary", len(reqs))
	}
	for _, r := range reqs {
		if r.APIKey != choirdtest.Canary {
			t.Errorf("call %d reached the model with key %q, want choird's", r.Index, r.APIKey)
		}
		for _, h := range []string{"Choir-Spend-Key", "Choir-Lane", "Choir-Job"} {
			if v := r.Header.Get(h); v != "" {
				t.Errorf("call %d carried %s: %q to the provider", r.Index, h, v)
			}
		}
	}
	// A call is settled just after its answer went back, in a batch.
	var settled, reserved int
	waitFor(t, "both calls settled in the spend ledger", func() bool {
		if err := c.Pool().QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'settled' AND outcome = 'ok'),
			count(*) FILTER (WHERE state = 'reserved') FROM choir_control.spend WHERE session_id = $1`,
			st.SessionID).Scan(&settled, &reserved); err != nil {
			t.Fatal(err)
		}
		return settled+reserved == 2 && reserved == 0
	})
	if settled != 2 {
		t.Errorf("spend ledger: %d settled ok, want 2", settled)
	}
	want := srv.Usage()
	var calls, tokens int64
	if err := c.Pool().QueryRow(ctx, `SELECT count(*), coalesce(sum(units), 0) FROM choir_audit.usage
		WHERE session_id = $1 AND kind = 'llm'`, st.SessionID).Scan(&calls, &tokens); err != nil {
		t.Fatal(err)
	}
	if calls != 2 || tokens != want.PromptTokens+want.CompletionTokens {
		t.Errorf("choir_audit.usage: %d calls, %d tokens; want 2 calls and %d tokens, each counted once",
			calls, tokens, want.PromptTokens+want.CompletionTokens)
	}
}
