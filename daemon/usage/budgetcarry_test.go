package usage_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/meter"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/sql/seam"
)

// TestSessionBudgetSurvivesCyclingSessions plays an agent that spends
// most of its session budget, ends its own session and is started again
// by choird on its own (as its start_agent schedule does), twice, hoping
// for a fresh budget each time: each such session continues the budget of
// the one before, so its meter refuses the call that would pass the
// session cap. A person's start gives a fresh budget.
func TestSessionBudgetSurvivesCyclingSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(cfg *config.Config, _ config.Secrets) {
		a := cfg.Agents["assistant"]
		a.Budgets.TotalSessionTokens = 6000
		a.Budgets.PerDayTokens = 1_000_000
		cfg.Agents["assistant"] = a
	}})
	q := seam.Queries(d.Pool())
	start := func(by session.Origin) (uuid.UUID, *client.Client) {
		t.Helper()
		s, err := session.CreateSessionAs(ctx, d.Pool(), d.Snapshot().Config, "assistant", admin.StartOverrides{},
			d.ConfigVersion(), "process", by)
		if err != nil {
			t.Fatal(err)
		}
		cl, err := client.New(client.Options{Socket: d.Socket(), SessionID: s.Session.ID.String(), LeaseToken: s.LeaseToken})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cl.Close() })
		if _, err := cl.InitHello(ctx, choirdtest.HelloRequest(s)); err != nil {
			t.Fatal(err)
		}
		return s.Session.ID, cl
	}
	// spend logs a model call of tokens in session id, as its agent's
	// replicated log would, and ends the session as the agent ending it.
	spend := func(id uuid.UUID, tokens int) {
		t.Helper()
		var base []byte
		var rev int64
		if err := d.Pool().QueryRow(ctx, `SELECT base_hash, base_rev FROM choir_control.sessions WHERE session_id = $1`, id).
			Scan(&base, &rev); err != nil {
			t.Fatal(err)
		}
		h := sha256.Sum256([]byte(id.String()))
		if _, err := q.EventsAppend(ctx, []db.EventsAppendParams{{SessionID: id, CreatedAt: time.Now(), Rev: rev + 1,
			EventType: "llm_call_committed", Lane: "edge", HashPrev: base, Hash: h[:],
			Payload: json.RawMessage(fmt.Sprintf(`{"model":"local","lane":"edge","prompt_tokens":%d,"completion_tokens":0}`, tokens))}}); err != nil {
			t.Fatal(err)
		}
		if _, err := session.EndSession(ctx, d.Pool(), nil, id, "ended", "terminated by the agent"); err != nil {
			t.Fatal(err)
		}
	}
	sessionBaseline := func(cl *client.Client) (*rpc.DynamicConfig, int64) {
		t.Helper()
		resp, err := cl.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var dc rpc.DynamicConfig
		if err := json.Unmarshal(resp.Config, &dc); err != nil || dc.Usage == nil {
			t.Fatalf("dynamic config %s: %v", resp.Config, err)
		}
		return &dc, dc.Usage.Session.Tokens
	}

	first, _ := start(session.ByPerson)
	spend(first, 4000)
	second, cl := start(session.ByChoird)
	if _, got := sessionBaseline(cl); got != 4000 {
		t.Fatalf("session started by choird after the agent ended its own: session baseline %d tokens, want the 4000 spent before", got)
	}
	spend(second, 1900)
	third, cl := start(session.ByChoird)
	dc, got := sessionBaseline(cl)
	if got != 5900 {
		t.Fatalf("third session: session baseline %d tokens, want 5900 (4000 + 1900)", got)
	}
	// The agent's meter, from that configuration, has 100 tokens of its
	// session left: less than a call needs, so nothing is sent.
	srv := llmtest.NewServer(t)
	m := meter.New(meter.Config{AgentID: "assistant"})
	m.SetBaseline(*dc.Usage)
	m.SetCaps(dc.Budgets)
	_, err := (&llm.Client{Gate: m}).Complete(ctx, llm.Request{Model: srv.Model(), Messages: []llm.Message{llm.UserMessage("hi")}})
	var ce *meter.CapError
	if !errors.As(err, &ce) || ce.Field != "total_session_tokens" || len(srv.Requests()) != 0 {
		t.Errorf("err = %v with %d requests, want the session token cap and none sent", err, len(srv.Requests()))
	}
	var from *uuid.UUID
	if err := d.Pool().QueryRow(ctx, `SELECT budget_from FROM choir_control.sessions WHERE session_id = $1`, third).Scan(&from); err != nil ||
		from == nil || *from != second {
		t.Errorf("third session's budget_from = %v (%v), want the second session %s", from, err, second)
	}

	// A person's start: a fresh session budget.
	if _, err := session.EndSession(ctx, d.Pool(), nil, third, "ended", "terminated by the agent"); err != nil {
		t.Fatal(err)
	}
	_, cl = start(session.ByPerson)
	if _, got := sessionBaseline(cl); got != 0 {
		t.Errorf("session a person started: session baseline %d tokens, want 0", got)
	}
}
