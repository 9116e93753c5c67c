package lane_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/meter"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc"
)

// TestEdgeStoppedByDayCostCap: a call whose provider-reported cost
// crosses the day's cost cap is answered (it was allowed: its cost was not
// known before), the DM is told the cap is crossed, and the next message
// gets no model call, only what stopped and how to raise the cap. The
// call's cost is committed with it.
func TestEdgeStoppedByDayCostCap(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Text("expensive answer").WithUsage(100, 10).WithCost(0.6, 20))
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Env: tool.Env{Workspace: t.TempDir()}})
	out := newSink()
	var edge *lane.Edge
	m := meter.New(meter.Config{AgentID: "ada", NotifyFunc: func(text string) {
		if err := edge.Notify(context.Background(), "usage", text); err != nil {
			t.Errorf("notify: %v", err)
		}
	}})
	m.SetCaps(config.Budgets{Caps: config.Caps{PerDayCostUSD: 0.5}})
	edge = lane.NewEdge(lane.EdgeConfig{Arbiter: arb, Log: log, Tools: reg, LLM: &llm.Client{Gate: m},
		Model: srv.Model, Out: out, RateLimitDelay: 10 * time.Millisecond, Identity: lane.Identity{Instructions: "You are the edge lane."}})
	ctx, cancel := context.WithCancel(context.Background())
	arbDone, done := make(chan struct{}), make(chan error, 1)
	go func() { arb.Run(ctx); close(arbDone) }()
	go func() { done <- edge.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done; <-arbDone })

	if err := edge.Deliver(lane.UserMessage{Text: "first"}); err != nil {
		t.Fatal(err)
	}
	got := []string{out.next(t), out.next(t)}
	joined := strings.Join(got, "\n")
	if !strings.Contains(joined, "expensive answer") || !strings.Contains(joined, "120% of its day cap per_day_cost_usd") {
		t.Fatalf("messages = %q, want the answer and the 80%% notice", got)
	}
	if err := edge.Deliver(lane.UserMessage{Text: "second"}); err != nil {
		t.Fatal(err)
	}
	msg := out.next(t)
	for _, want := range []string{"I stopped", "day cap per_day_cost_usd of $0.5000 is reached ($0.6000 spent",
		"agents.ada.budgets.per_day_cost_usd", "choirctl usage cap set ada per_day_cost_usd <value>"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not say %q", msg, want)
		}
	}
	if n := len(srv.Requests()); n != 1 {
		t.Errorf("%d model calls, want 1", n)
	}
	head, _ := log.Head()
	evs, err := log.Range(1, head)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range evs {
		if e.Type == rpc.EventLLMCallCommitted {
			c, err := commitlog.Decode[commitlog.LLMCall](e)
			if err != nil || c.CostUSD != 0.6 || c.CostSource != "provider" || c.CachedTokens != 20 {
				t.Errorf("llm call committed as %+v (%v)", c, err)
			}
		}
	}
}
