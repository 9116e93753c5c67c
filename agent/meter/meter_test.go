package meter_test

import (
	"context"
	"errors"
	"math"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/meter"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc/usage"
)

// clock is an injectable clock.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time  { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

type notes struct {
	mu  sync.Mutex
	got []string
}

func (n *notes) add(s string) { n.mu.Lock(); n.got = append(n.got, s); n.mu.Unlock() }
func (n *notes) all() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.got...)
}

func call(t *testing.T, c *llm.Client, m llm.ModelSettings, jobID string) (*llm.Response, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return c.Complete(ctx, llm.Request{Model: m, Messages: []llm.Message{llm.UserMessage("hello")}, Lane: "edge", JobID: jobID})
}

// TestCostFromProviderAndFromPrices checks where a call's cost comes
// from: the provider's usage.cost (OpenRouter), which wins over prices,
// else the model's prices in config, else none; and that the meter
// counts it.
func TestCostFromProviderAndFromPrices(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t,
		llmtest.Text("a").WithUsage(1000, 200).WithCost(0.0123, 400),
		llmtest.Text("b").WithUsage(1_000_000, 100_000).WithCost(0, 0).WithUsage(1_000_000, 100_000),
		llmtest.Text("c").WithUsage(1_000_000, 100_000),
		llmtest.Text("d").WithUsage(1000, 10))
	m := meter.New(meter.Config{AgentID: "ada"})
	c := &llm.Client{Gate: m}
	priced := srv.Model()
	priced.Prices = &config.Prices{InputPerMTok: 3, OutputPerMTok: 15}

	res, err := call(t, c, priced, "")
	if err != nil {
		t.Fatal(err)
	}
	if u := res.Usage; u.CostUSD != 0.0123 || u.CostSource != usage.CostProvider || u.CachedTokens != 400 {
		t.Errorf("provider cost: usage = %+v, want 0.0123 from the provider with 400 cached tokens", u)
	}
	if res, err = call(t, c, priced, ""); err != nil {
		t.Fatal(err)
	}
	if u := res.Usage; u.CostUSD != 0 || u.CostSource != usage.CostProvider {
		t.Errorf("a provider cost of 0: usage = %+v, want 0 from the provider", u)
	}
	if res, err = call(t, c, priced, ""); err != nil {
		t.Fatal(err)
	}
	if u := res.Usage; math.Abs(u.CostUSD-4.5) > 1e-9 || u.CostSource != usage.CostPrices {
		t.Errorf("prices: usage = %+v, want 3 + 1.5 = 4.5 from prices", u)
	}
	if res, err = call(t, c, srv.Model(), ""); err != nil {
		t.Fatal(err)
	}
	if u := res.Usage; u.CostUSD != 0 || u.CostSource != "" {
		t.Errorf("unpriced: usage = %+v, want no cost", u)
	}
	session, today, _, _ := m.Spent("")
	if math.Abs(session.CostUSD-4.5123) > 1e-9 || session != today || session.Tokens != 2_202_210 {
		t.Errorf("spent: session %+v, today %+v", session, today)
	}
}

// TestCachedPrices checks that cached prompt tokens take the cached
// price, or the input price when none is set.
func TestCachedPrices(t *testing.T) {
	t.Parallel()
	p := config.Prices{InputPerMTok: 2, OutputPerMTok: 10, CachedInputPerMTok: 0.5}
	if got := p.Cost(1_000_000, 400_000, 100_000); math.Abs(got-(1.2+0.2+1)) > 1e-9 {
		t.Errorf("cost = %g, want 2.4", got)
	}
	p.CachedInputPerMTok = 0
	if got := p.Cost(1_000_000, 400_000, 0); math.Abs(got-2) > 1e-9 {
		t.Errorf("cost = %g, want 2", got)
	}
}

// TestDayCapResetsAtMidnightInTheDMsZone spends a day's cost cap in
// Asia/Tokyo and moves the clock: at 23:59 in Tokyo calls are still
// refused, at midnight in Tokyo (15:00 UTC, the same UTC day) they go
// again; choird's baseline of an earlier day does not count.
func TestDayCapResetsAtMidnightInTheDMsZone(t *testing.T) {
	t.Parallel()
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{t: time.Date(2026, 11, 24, 23, 0, 0, 0, tokyo)} // 14:00 UTC
	srv := llmtest.NewServer(t)
	srv.SetResponder(func(context.Context, *llmtest.Request) llmtest.Step {
		return llmtest.Text("ok").WithUsage(100, 10).WithCost(0.40, 0)
	})
	m := meter.New(meter.Config{AgentID: "ada", Now: clk.now})
	m.SetBaseline(usage.Baseline{TimeZone: "Asia/Tokyo", Day: "2026-11-24", Today: usage.Totals{Tokens: 5000, CostUSD: 0.3}})
	m.SetCaps(config.Budgets{Caps: config.Caps{PerDayCostUSD: 1}})
	c := &llm.Client{Gate: m}
	for i := range 2 {
		if _, err := call(t, c, srv.Model(), ""); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	_, err = call(t, c, srv.Model(), "")
	var ce *meter.CapError
	if !errors.As(err, &ce) || ce.Scope != "day" || ce.Field != "per_day_cost_usd" {
		t.Fatalf("third call: err = %v, want the day's cost cap", err)
	}
	for _, want := range []string{"2026-11-24, Asia/Tokyo", "$1.1000 spent", "agents.ada.budgets.per_day_cost_usd", "choirctl usage cap set ada per_day_cost_usd <value>"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	clk.set(time.Date(2026, 11, 24, 23, 59, 59, 0, tokyo))
	if _, err := call(t, c, srv.Model(), ""); !errors.As(err, &ce) {
		t.Fatalf("at 23:59:59 in Tokyo: err = %v, want still capped", err)
	}
	midnight := time.Date(2026, 11, 25, 0, 0, 0, 0, tokyo)
	if midnight.UTC().Day() != 24 {
		t.Fatalf("midnight in Tokyo is %s UTC, want the same UTC day", midnight.UTC())
	}
	clk.set(midnight)
	if _, err := call(t, c, srv.Model(), ""); err != nil {
		t.Fatalf("after midnight in Tokyo: %v", err)
	}
	if len(srv.Requests()) != 3 {
		t.Errorf("%d calls reached the server, want 3", len(srv.Requests()))
	}
	session, today, day, _ := m.Spent("")
	if day != "2026-11-25" || math.Abs(today.CostUSD-0.4) > 1e-9 || math.Abs(session.CostUSD-1.2) > 1e-9 {
		t.Errorf("day %s today %+v session %+v", day, today, session)
	}
}

// TestCapLoweredBelowSpend lowers a cap below what was spent: accepted,
// the DM is told once, and the next call is refused before it is sent.
// Crossing 80% on the way tells the DM once too.
func TestCapLoweredBelowSpend(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.SetResponder(func(context.Context, *llmtest.Request) llmtest.Step {
		return llmtest.Text("ok").WithUsage(100, 10).WithCost(0.30, 0)
	})
	var n notes
	m := meter.New(meter.Config{AgentID: "ada", NotifyFunc: n.add})
	m.SetCaps(config.Budgets{Caps: config.Caps{SessionCostUSD: 1}})
	c := &llm.Client{Gate: m}
	for i := range 3 { // 0.9: past 80% once
		if _, err := call(t, c, srv.Model(), ""); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	if got := n.all(); len(got) != 1 || !strings.Contains(got[0], "90% of its session cap session_cost_usd") {
		t.Fatalf("notices = %q, want one at 80%%", got)
	}
	m.SetCaps(config.Budgets{Caps: config.Caps{SessionCostUSD: 0.5}})
	m.SetCaps(config.Budgets{Caps: config.Caps{SessionCostUSD: 0.5}})
	got := n.all()
	if len(got) != 2 || !strings.Contains(got[1], "session_cost_usd of agent ada is now $0.5000, at or below the $0.9000 already spent") {
		t.Fatalf("notices = %q, want one saying the cap is below the spend", got)
	}
	var ce *meter.CapError
	if _, err := call(t, c, srv.Model(), ""); !errors.As(err, &ce) || ce.Scope != "session" {
		t.Fatalf("err = %v, want the session's cap", err)
	}
	if len(srv.Requests()) != 3 {
		t.Errorf("%d calls reached the server, want 3", len(srv.Requests()))
	}
}

// TestToolUsageCounts counts a tool's usage records (TTS characters,
// search queries) against the cost caps of its lane's job.
func TestToolUsageCounts(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t, llmtest.Text("ok").WithUsage(10, 1).WithCost(0.01, 0))
	m := meter.New(meter.Config{AgentID: "ada"})
	m.SetCaps(config.Budgets{Caps: config.Caps{PerJobCostUSD: 0.5}})
	c := &llm.Client{Gate: m}
	if _, err := c.Complete(context.Background(), llm.Request{Model: srv.Model(),
		Messages: []llm.Message{llm.UserMessage("x")}, Lane: "core:j", JobID: "job-1"}); err != nil {
		t.Fatal(err)
	}
	m.Record("core:j", []usage.Record{{Kind: usage.KindTTS, Service: "eleven", Units: 5000, Unit: usage.UnitCharacters, CostUSD: 0.49}})
	_, _, _, job := m.Spent("job-1")
	if math.Abs(job.CostUSD-0.5) > 1e-9 || job.Tokens != 11 {
		t.Errorf("job spent %+v, want $0.50 and 11 tokens", job)
	}
	_, err := c.Complete(context.Background(), llm.Request{Model: srv.Model(),
		Messages: []llm.Message{llm.UserMessage("x")}, Lane: "core:j", JobID: "job-1"})
	var ce *meter.CapError
	if !errors.As(err, &ce) || ce.Scope != "core job" {
		t.Errorf("err = %v, want the job's cost cap", err)
	}
}

// TestFailedCallsTheProviderBilledAreCounted: a call that fails after the
// provider billed it (its answer reports usage: a completion the client
// cannot use, an error with usage, a body that breaks after its usage)
// counts what was reported, at the model's prices, so that a model (or a
// provider) that makes every call fail cannot spend past the caps: the
// next call is refused.
func TestFailedCallsTheProviderBilledAreCounted(t *testing.T) {
	t.Parallel()
	const usageJSON = `"usage": {"prompt_tokens": 5000, "completion_tokens": 3000}`
	for _, tc := range []struct {
		name string
		step llmtest.Step
	}{
		{"UnusableCompletion", llmtest.Malformed(`{"model": "m", ` + usageJSON +
			`, "choices": [{"message": {"tool_calls": [{"id": "1", "type": "weird", "function": {"name": "x"}}]}}]}`)},
		{"ErrorWithUsage", llmtest.Raw(502, nil, `{"error": {"message": "upstream died", "code": 502}, `+usageJSON+`}`)},
		{"BodyBrokenAfterUsage", llmtest.Raw(200, http.Header{"Content-Length": {"4096"}}, `{"model": "m", `+usageJSON+
			`, "choices": [{"message": {"content": "half a ans`)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := llmtest.NewServer(t, tc.step)
			model := srv.Model()
			model.Prices = &config.Prices{InputPerMTok: 1, OutputPerMTok: 2}
			m := meter.New(meter.Config{AgentID: "a"})
			m.SetCaps(config.Budgets{TotalSessionTokens: 8200})
			c := &llm.Client{Gate: m}
			if _, err := c.Complete(context.Background(), llm.Request{Model: model, Messages: []llm.Message{llm.UserMessage("hi")}}); err == nil {
				t.Fatal("the scripted failure succeeded")
			}
			session, _, _, _ := m.Spent("")
			if session.Tokens != 8000 || math.Abs(session.CostUSD-0.011) > 1e-12 {
				t.Fatalf("after the billed failure the session spent %+v, want 8000 tokens and $0.011", session)
			}
			_, err := c.Complete(context.Background(), llm.Request{Model: model, Messages: []llm.Message{llm.UserMessage("hi")}})
			var ce *meter.CapError
			if !errors.As(err, &ce) || ce.Field != "total_session_tokens" || len(srv.Requests()) != 1 {
				t.Errorf("next call: %v with %d requests; want the session token cap, nothing sent", err, len(srv.Requests()))
			}
		})
	}
}
