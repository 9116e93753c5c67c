package usage_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/meter"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/sql/seam"
)

// TestNewSessionKeepsTheDaysSpend: a session's configuration carries what
// the agent spent today in its DM's zone, from the replicated logs of its
// earlier sessions, so a new session (after a crash or a restart) starts
// its day caps where the last one left them.
func TestNewSessionKeepsTheDaysSpend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(cfg *config.Config, _ config.Secrets) {
		a := cfg.Agents["assistant"]
		a.Budgets.PerDayTokens = 5000
		cfg.Agents["assistant"] = a
		dm := cfg.DMs[a.Defaults.DM]
		dm.TimeZone = "Asia/Tokyo"
		cfg.DMs[a.Defaults.DM] = dm
	}})
	q := seam.Queries(d.Pool())
	tok := make([]byte, 32)
	rand.Read(tok)
	old, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: "assistant", LeaseTokenHash: tok, BaseHash: make([]byte, 32),
		ResourceBindings: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	h := sha256.Sum256([]byte("1"))
	if _, err := q.EventsAppend(ctx, []db.EventsAppendParams{{SessionID: old.SessionID, CreatedAt: time.Now(), Rev: 1,
		EventType: "llm_call_committed", Lane: "edge", HashPrev: make([]byte, 32), Hash: h[:],
		Payload: json.RawMessage(`{"model":"local","lane":"edge","prompt_tokens":4000,"completion_tokens":800,"latency_ms":3}`)}}); err != nil {
		t.Fatal(err)
	}
	if _, err := q.SessionEnd(ctx, db.SessionEndParams{SessionID: old.SessionID, EndReason: "crashed in a test"}); err != nil {
		t.Fatal(err)
	}

	_, cl, _ := d.HelloSession(t, "assistant")
	resp, err := cl.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var dc rpc.DynamicConfig
	if err := json.Unmarshal(resp.Config, &dc); err != nil {
		t.Fatal(err)
	}
	tokyo, _ := time.LoadLocation("Asia/Tokyo")
	u := dc.Usage
	if u == nil || u.TimeZone != "Asia/Tokyo" || u.Day != time.Now().In(tokyo).Format(time.DateOnly) || u.Today.Tokens != 4800 ||
		u.Session.Tokens != 0 || dc.Budgets.PerDayTokens != 5000 {
		t.Fatalf("usage baseline = %+v (budgets %+v), want 4800 tokens today in Tokyo and none in the session", u, dc.Budgets)
	}

	// The agent's meter, from that configuration, has 200 tokens left
	// today: less than a call needs, so nothing is sent.
	srv := llmtest.NewServer(t)
	m := meter.New(meter.Config{AgentID: "assistant"})
	m.SetBaseline(*u)
	m.SetCaps(dc.Budgets)
	_, err = (&llm.Client{Gate: m}).Complete(ctx, llm.Request{Model: srv.Model(), Messages: []llm.Message{llm.UserMessage("hi")}})
	var ce *meter.CapError
	if !errors.As(err, &ce) || ce.Field != "per_day_tokens" || len(srv.Requests()) != 0 {
		t.Errorf("err = %v with %d requests, want the day's token cap and none sent", err, len(srv.Requests()))
	}
}
