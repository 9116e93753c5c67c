package usage_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/google/uuid"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/meter"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/embed/embedtest"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
)

// TestEmbeddingsCountAgainstTheDayCap: an agent that stores knowledge
// makes choird embed it with a priced provider; that request's cost is
// recorded for the agent (choir_audit.usage, kind embedding), so the next
// session's meter starts its day with it and refuses the model call that
// the day's cost cap no longer allows.
func TestEmbeddingsCountAgainstTheDayCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := embedtest.New(t, embedtest.Options{Dimensions: 64})
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(cfg *config.Config, _ config.Secrets) {
		// A dollar a token, so that five tokens pass a $3 day cap.
		cfg.Embedding = config.Embedding{Provider: "test", Model: "m", Dimensions: 64, Endpoint: srv.URL + "/v1",
			PricePerMTok: 1e6}
		a := cfg.Agents["assistant"]
		a.Budgets.PerDayCostUSD = 3
		cfg.Agents["assistant"] = a
	}})
	id, cl, _ := d.HelloSession(t, "assistant")
	resp, err := cl.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.memory.upsert", CallID: "k1",
		Input: json.RawMessage(`{"op":"insert","key":"sky","text":"the sky is blue today"}`)})
	if err != nil || resp.Status != rpc.ToolSuccess {
		t.Fatalf("upsert: %+v %v", resp, err)
	}
	var cost float64
	choirdtest.WaitFor(t, "the embedding's cost in choir_audit.usage", d.Logs, func() bool {
		d.Pool().QueryRow(ctx, `SELECT coalesce(sum(cost_usd), 0)::float8 FROM choir_audit.usage
			WHERE agent_id = 'assistant' AND kind = 'embedding'`).Scan(&cost)
		return cost > 0
	})
	if cost != 5 {
		t.Errorf("embedding cost %v, want $5 (5 tokens at $1 each)", cost)
	}
	if _, err := session.EndSession(ctx, d.Pool(), nil, uuid.MustParse(id), "ended", "terminated by the agent"); err != nil {
		t.Fatal(err)
	}
	_, cl, _ = d.HelloSession(t, "assistant")
	fetched, err := cl.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var dc rpc.DynamicConfig
	if err := json.Unmarshal(fetched.Config, &dc); err != nil || dc.Usage == nil {
		t.Fatalf("dynamic config %s: %v", fetched.Config, err)
	}
	if dc.Usage.Today.CostUSD != 5 {
		t.Fatalf("the new session's day starts at $%v, want the $5 of embeddings", dc.Usage.Today.CostUSD)
	}
	model := llmtest.NewServer(t)
	m := meter.New(meter.Config{AgentID: "assistant"})
	m.SetBaseline(*dc.Usage)
	m.SetCaps(dc.Budgets)
	_, err = (&llm.Client{Gate: m}).Complete(ctx, llm.Request{Model: model.Model(), Messages: []llm.Message{llm.UserMessage("hi")}})
	var ce *meter.CapError
	if !errors.As(err, &ce) || ce.Field != "per_day_cost_usd" || len(model.Requests()) != 0 {
		t.Errorf("err = %v with %d requests, want the day cost cap and none sent", err, len(model.Requests()))
	}
}
