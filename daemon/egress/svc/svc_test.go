package svc_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/egress"
	"github.com/choirhq/choir/daemon/egress/svc"
	"github.com/choirhq/choir/daemon/spend"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	wire "github.com/choirhq/choir/rpc/egress"
	"github.com/choirhq/choir/sql/seam"
)

// The key choird holds for the model "fast", and one the agent must never
// get through.
const (
	modelKey = "sk-choird-held"
	agentKey = "sk-agent-tried"
)

type testBundle struct {
	pool   *pgxpool.Pool
	llm    *llmtest.Server
	cfg    *config.Config
	mu     sync.Mutex // guards cfg
	ledger *spend.Ledger
	h      *svc.Handler
	// sessions are the live sessions of the agents ada and bob.
	sessions map[string]uuid.UUID
}

func (b *testBundle) config() (*config.Config, config.Secrets) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.cfg, config.Secrets{"fast-key": modelKey, "brave-key": "brave-secret", "eleven-key": "eleven-secret",
		"notion-key": "notion-secret", "git-key": gitToken, "mcp-key": "mcp-secret"}
}

// setConfig changes the running configuration.
func (b *testBundle) setConfig(fn func(c *config.Config)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	c := *b.cfg
	c.Agents = map[string]config.Agent{}
	for k, v := range b.cfg.Agents {
		c.Agents[k] = v
	}
	fn(&c)
	b.cfg = &c
}

// setup starts a model fake whose every call answers "hello" and bills
// 1000 completion tokens at $1 per million (input free), two agents
// bound to the model "fast" (and ada to the git identity ada-git, bob to
// bob-git), and the handler.
func setup(t testing.TB) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.NewPool(t), sessions: map[string]uuid.UUID{}}
	b.llm = llmtest.NewServer(t)
	b.llm.SetResponder(func(context.Context, *llmtest.Request) llmtest.Step {
		return llmtest.Text("hello").WithUsage(40, 1000)
	})
	b.cfg = &config.Config{
		Models: map[string]config.Model{
			"fast": {Provider: "openai", Model: llmtest.DefaultModel, Endpoint: b.llm.BaseURL(), Secret: "fast-key",
				Prices: &config.Prices{InputPerMTok: 0, OutputPerMTok: 1}},
			"big": {Provider: "openai", Model: "big-model", Endpoint: b.llm.BaseURL(), Secret: "fast-key"},
		},
		Agents: map[string]config.Agent{"ada": {}, "bob": {}},
	}
	ctx := context.Background()
	q := seam.Queries(b.pool)
	for _, agent := range []string{"ada", "bob"} {
		if _, err := q.AgentUpsert(ctx, db.AgentUpsertParams{AgentID: agent, Config: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		tok := make([]byte, 32)
		rand.Read(tok)
		s, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: agent, LeaseTokenHash: tok, BaseHash: make([]byte, 32),
			ResourceBindings: json.RawMessage(`{"models":{"edge":"fast"},"notion":"notes","voice_profile":"calm","git_identity":"` +
				agent + `-git","mcp_secrets":["mcp-key"]}`)})
		if err != nil {
			t.Fatal(err)
		}
		b.sessions[agent] = s.SessionID
	}
	b.ledger = spend.New(spend.Options{Pool: b.pool, Config: func() *config.Config { c, _ := b.config(); return c }})
	b.h = svc.New(svc.Options{Pool: b.pool, Config: b.config, Ledger: b.ledger})
	return b
}

// gateway serves the handler to agent's session, as the egress gateway
// does once it has authenticated the connection's lease token.
func (b *testBundle) gateway(t testing.TB, agent string) *httptest.Server {
	t.Helper()
	caller := egress.Caller{AgentID: agent, SessionID: b.sessions[agent].String()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.h.ServeHTTP(w, r.WithContext(egress.WithCaller(r.Context(), caller)))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// model is the agent's model settings pointed at the gateway's route,
// with a key the agent should not have (it must not reach the provider).
func model(gw *httptest.Server, name string) llm.ModelSettings {
	return llm.ModelSettings{Name: name, Model: llmtest.DefaultModel, Endpoint: gw.URL + "/svc/llm/" + name, APIKey: agentKey}
}

func ask(ctx context.Context, gw *httptest.Server, maxTokens int64) (*llm.Response, error) {
	var c llm.Client
	return c.Complete(ctx, llm.Request{Model: model(gw, "fast"), Messages: []llm.Message{{Role: "user", Content: "hi"}},
		MaxTokens: maxTokens})
}

func rows(t testing.TB, b *testBundle) []db.ChoirControlSpend {
	t.Helper()
	b.h.Wait()
	r, err := b.pool.Query(context.Background(), `SELECT spend_id FROM choir_control.spend ORDER BY spend_id`)
	if err != nil {
		t.Fatal(err)
	}
	var ids []int64
	for r.Next() {
		var id int64
		if err := r.Scan(&id); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
	}
	var out []db.ChoirControlSpend
	for _, id := range ids {
		s, err := seam.Queries(b.pool).SpendGetByID(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, s)
	}
	return out
}

// TestKeyReachesTheModelAndTheCallerNeverSendsIt calls the model with the
// agent's own client through the gateway: the provider gets choird's key,
// not the one the agent sent, and none of the agent's labels.
func TestKeyReachesTheModelAndTheCallerNeverSendsIt(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gw := b.gateway(t, "ada")
	res, err := ask(context.Background(), gw, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != "hello" || res.Usage.CompletionTokens != 1000 {
		t.Errorf("answer = %q, usage %+v", res.Content, res.Usage)
	}
	reqs := b.llm.Requests()
	if len(reqs) != 1 {
		t.Fatalf("%d requests reached the model", len(reqs))
	}
	if reqs[0].APIKey != modelKey {
		t.Errorf("the model got key %q, want choird's", reqs[0].APIKey)
	}
	for name, vs := range reqs[0].Header {
		for _, v := range vs {
			if strings.Contains(v, agentKey) || strings.HasPrefix(name, "Choir-") {
				t.Errorf("header %s: %s reached the model", name, v)
			}
		}
	}
	got := rows(t, b)
	if len(got) != 1 || got[0].State != "settled" || got[0].CompletionTokens != 1000 || got[0].PromptTokens != 40 ||
		*got[0].Outcome != "ok" || got[0].CostUsd != 0.001 {
		t.Errorf("ledger = %+v", got)
	}
}

// TestRefusesWhatTheCallerMayNotReach refuses a connection with no caller,
// a model the session is not bound to, an unknown one, a body naming
// another model than the route, and paths outside the API.
func TestRefusesWhatTheCallerMayNotReach(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gw := b.gateway(t, "ada")
	bare := httptest.NewServer(b.h)
	t.Cleanup(bare.Close)
	body := `{"model":"` + llmtest.DefaultModel + `","messages":[{"role":"user","content":"hi"}]}`
	for _, tc := range []struct {
		name, url, method, body string
		status                  int
		code                    string
	}{
		{"NoCaller", bare.URL + "/svc/llm/fast/chat/completions", "POST", body, 403, "no_caller"},
		{"UnboundModel", gw.URL + "/svc/llm/big/chat/completions", "POST", strings.Replace(body, llmtest.DefaultModel, "big-model", 1), 403, "not_bound"},
		{"UnknownModel", gw.URL + "/svc/llm/nope/chat/completions", "POST", body, 404, "unknown_resource"},
		{"BodyNamesAnotherModel", gw.URL + "/svc/llm/fast/chat/completions", "POST", strings.Replace(body, llmtest.DefaultModel, "big-model", 1), 400, "bad_request"},
		{"DotSegments", gw.URL + "/svc/llm/fast/../../etc/chat/completions", "POST", body, 404, "no_route"},
		{"EncodedSlash", gw.URL + "/svc/llm/fast/chat%2F..%2Fcompletions", "POST", body, 404, "no_route"},
		{"OtherPath", gw.URL + "/svc/llm/fast/embeddings", "POST", body, 404, "no_route"},
		{"UnknownService", gw.URL + "/svc/ftp/fast/x", "GET", "", 404, "no_route"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, tc.url, strings.NewReader(tc.body))
			req.Header.Set("Content-Type", "application/json")
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			var e struct {
				Error struct{ Message, Code string }
			}
			json.NewDecoder(res.Body).Decode(&e)
			if res.StatusCode != tc.status || e.Error.Code != tc.code {
				t.Errorf("status %d code %q (%s), want %d %s", res.StatusCode, e.Error.Code, e.Error.Message, tc.status, tc.code)
			}
		})
	}
	if n := len(b.llm.Requests()); n != 0 {
		t.Errorf("%d refused requests reached the model", n)
	}
}

// streamBody is a streamed chat completion request asking for usage.
func streamBody() string {
	return `{"model":"` + llmtest.DefaultModel + `","stream":true,"stream_options":{"include_usage":true},"max_tokens":5000,` +
		`"messages":[{"role":"user","content":"hi"}]}`
}

// TestStreamPassesThroughAndSettlesItsUsage streams a completion through
// the gateway: the events arrive as the model sent them, the usage of the
// last chunk settles the call.
func TestStreamPassesThroughAndSettlesItsUsage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gw := b.gateway(t, "ada")
	res, err := http.Post(gw.URL+"/svc/llm/fast/chat/completions", "application/json", strings.NewReader(streamBody()))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Errorf("Content-Type %q", ct)
	}
	var text strings.Builder
	var done bool
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if data == "[DONE]" {
			done = true
			continue
		}
		var chunk struct {
			Choices []struct{ Delta struct{ Content string } }
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			t.Fatalf("chunk %s: %v", data, err)
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	if text.String() != "hello" || !done {
		t.Errorf("streamed %q, done %v", text.String(), done)
	}
	got := rows(t, b)
	if len(got) != 1 || got[0].State != "settled" || *got[0].Outcome != "ok" || got[0].CompletionTokens != 1000 ||
		got[0].Units != 1040 {
		t.Errorf("ledger = %+v", got)
	}
}

// TestStreamIsNotBuffered holds a provider's stream open after its first
// event: the agent reads that event through the gateway before the
// provider sends the rest.
func TestStreamIsNotBuffered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	release := make(chan struct{})
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"first"}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}`+"\n\ndata: [DONE]\n\n")
	}))
	t.Cleanup(provider.Close)
	b.setConfig(func(c *config.Config) {
		c.Models = map[string]config.Model{"fast": {Provider: "openai", Model: llmtest.DefaultModel, Endpoint: provider.URL}}
	})
	gw := b.gateway(t, "ada")
	res, err := http.Post(gw.URL+"/svc/llm/fast/chat/completions", "application/json", strings.NewReader(streamBody()))
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	r := bufio.NewReader(res.Body)
	first, err := r.ReadString('\n')
	if err != nil || !strings.Contains(first, `"first"`) {
		t.Fatalf("first line %q, %v", first, err)
	}
	close(release)
	io.Copy(io.Discard, r)
	got := rows(t, b)
	if len(got) != 1 || got[0].PromptTokens != 7 || got[0].CompletionTokens != 3 {
		t.Errorf("ledger = %+v", got)
	}
}

// TestReservationThenSettlement holds a call at the model: meanwhile its
// worst case is reserved (the prompt's estimate plus max_tokens, at the
// model's prices); once answered it is settled with the provider's usage.
func TestReservationThenSettlement(t *testing.T) {
	t.Parallel()
	b := setup(t)
	held := make(chan struct{})
	release := make(chan struct{})
	b.llm.SetResponder(func(ctx context.Context, _ *llmtest.Request) llmtest.Step {
		close(held)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return llmtest.Text("hello").WithUsage(40, 1000)
	})
	gw := b.gateway(t, "ada")
	errc := make(chan error, 1)
	go func() {
		_, err := ask(context.Background(), gw, 200000)
		errc <- err
	}()
	<-held
	r, err := b.pool.Query(context.Background(), `SELECT state, reserved_tokens, reserved_usd FROM choir_control.spend`)
	if err != nil {
		t.Fatal(err)
	}
	var state string
	var tokens int64
	var usd float64
	for r.Next() {
		if err := r.Scan(&state, &tokens, &usd); err != nil {
			t.Fatal(err)
		}
	}
	// 128000 is the default context window: it bounds the completion
	// below max_tokens.
	if state != "reserved" || tokens != 128000 || usd <= 0.127 || usd > 0.128 {
		t.Errorf("while in flight: %s %d tokens $%g, want reserved 128000 tokens about $0.128", state, tokens, usd)
	}
	close(release)
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	got := rows(t, b)
	if len(got) != 1 || got[0].State != "settled" || got[0].Units != 1040 || got[0].CostUsd != 0.001 || got[0].CostSource == nil ||
		*got[0].CostSource != "prices" {
		t.Errorf("settled = %+v", got)
	}
}

// TestHostCapStopsTwoAgentsTogether sends ten calls at once from each of
// two agents, each worth $0.001 worst case and settled: a host-wide cap
// of $0.0055 lets exactly five through, whoever sends them; the others are
// refused naming the host cap.
func TestHostCapStopsTwoAgentsTogether(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setConfig(func(c *config.Config) { c.Caps = config.HostCaps{HostPerDayUSD: 0.0055} })
	gws := map[string]*httptest.Server{"ada": b.gateway(t, "ada"), "bob": b.gateway(t, "bob")}
	var passed, refused atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for _, agent := range []string{"ada", "bob"} {
		for range 10 {
			wg.Go(func() {
				<-start
				_, err := ask(context.Background(), gws[agent], 1000)
				var pe *llm.ProviderError
				switch {
				case err == nil:
					passed.Add(1)
				case errors.As(err, &pe) && pe.Status == http.StatusPaymentRequired && strings.Contains(pe.Message, "caps.host_per_day_usd"):
					refused.Add(1)
				default:
					t.Errorf("%s: %v", agent, err)
				}
			})
		}
	}
	close(start)
	wg.Wait()
	if passed.Load() != 5 || refused.Load() != 15 {
		t.Errorf("%d passed, %d refused; want 5 and 15", passed.Load(), refused.Load())
	}
	if n := len(b.llm.Requests()); n != 5 {
		t.Errorf("%d calls reached the model, want 5", n)
	}
}

// TestRefusedCallNamesTheCap fills an agent's day cap: the next call is
// refused before it reaches the model, and the agent's client shows which
// cap and how to raise it.
func TestRefusedCallNamesTheCap(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.setConfig(func(c *config.Config) {
		c.Agents["ada"] = config.Agent{Budgets: config.Budgets{Caps: config.Caps{PerDayCostUSD: 0.0015}}}
	})
	gw := b.gateway(t, "ada")
	if _, err := ask(context.Background(), gw, 1000); err != nil {
		t.Fatal(err)
	}
	b.h.Wait()
	_, err := ask(context.Background(), gw, 1000)
	var pe *llm.ProviderError
	if !errors.As(err, &pe) || pe.Status != http.StatusPaymentRequired {
		t.Fatalf("err = %v, want a 402", err)
	}
	for _, want := range []string{"day cap per_day_cost_usd", "agent ada", "choirctl usage cap set ada per_day_cost_usd"} {
		if !strings.Contains(pe.Message, want) {
			t.Errorf("message %q lacks %q", pe.Message, want)
		}
	}
	if n := len(b.llm.Requests()); n != 1 {
		t.Errorf("%d calls reached the model, want 1", n)
	}
	// bob has no cap of his own.
	if _, err := ask(context.Background(), b.gateway(t, "bob"), 1000); err != nil {
		t.Errorf("bob: %v", err)
	}
}

// TestFailuresSettleWhatWasBilled settles a refused call that reported
// usage with that usage, one that reported none with nothing, and an
// answer that cannot be read with its worst case, never zero.
func TestFailuresSettleWhatWasBilled(t *testing.T) {
	t.Parallel()
	b := setup(t)
	steps := []llmtest.Step{
		llmtest.Raw(500, nil, `{"error":{"message":"overloaded"},"usage":{"prompt_tokens":30,"completion_tokens":200}}`),
		llmtest.ServerError(503, "try later"),
		llmtest.Raw(200, nil, `{"choices": [`),
	}
	var i atomic.Int64
	b.llm.SetResponder(func(context.Context, *llmtest.Request) llmtest.Step { return steps[i.Add(1)-1] })
	gw := b.gateway(t, "ada")
	for range steps {
		if _, err := ask(context.Background(), gw, 1000); err == nil {
			t.Error("a failed call succeeded")
		}
		b.h.Wait()
	}
	got := rows(t, b)
	if len(got) != 3 {
		t.Fatalf("ledger = %+v", got)
	}
	if *got[0].Outcome != "billed_failure" || got[0].CompletionTokens != 200 || got[0].CostUsd != 0.0002 {
		t.Errorf("billed failure = %+v", got[0])
	}
	if *got[1].Outcome != "not_billed" || got[1].Units != 0 || got[1].CostUsd != 0 {
		t.Errorf("not billed = %+v", got[1])
	}
	if *got[2].Outcome != "worst_case" || got[2].Units != got[2].ReservedTokens || got[2].CostUsd != got[2].ReservedUsd ||
		got[2].CostUsd == 0 {
		t.Errorf("unreadable = %+v", got[2])
	}
}

// TestUsageCountsAGatewayCallOnce replicates the agent's own record of a
// call the gateway settled (same spend key): choir_audit.usage lists the
// call once, from the gateway, with the agent's lane and job.
func TestUsageCountsAGatewayCallOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gw := b.gateway(t, "ada")
	req, _ := http.NewRequest("POST", gw.URL+"/svc/llm/fast/chat/completions", strings.NewReader(
		`{"model":"`+llmtest.DefaultModel+`","max_tokens":1000,"messages":[{"role":"user","content":"hi"}]}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(wire.HeaderSpendKey, "call-1")
	req.Header.Set(wire.HeaderLane, "core:j")
	req.Header.Set(wire.HeaderJob, "j1")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	b.h.Wait()
	q := seam.Queries(b.pool)
	h := make([]byte, 32)
	_, err = q.EventsAppend(context.Background(), []db.EventsAppendParams{{SessionID: b.sessions["ada"], Rev: 1,
		CreatedAt: time.Now(), EventType: "llm_call_committed", Lane: "core:j", HashPrev: make([]byte, 32), Hash: h,
		Payload: json.RawMessage(`{"model":"fast","lane":"core:j","prompt_tokens":40,"completion_tokens":1000,"latency_ms":1,"cost_usd":0.001,"job_id":"j1","spend_key":"call-1"}`)}})
	if err != nil {
		t.Fatal(err)
	}
	var n, units int64
	var lane, job string
	err = b.pool.QueryRow(context.Background(), `SELECT count(*), sum(units), max(lane), max(job_id) FROM choir_audit.usage WHERE agent_id = 'ada'`).
		Scan(&n, &units, &lane, &job)
	if err != nil {
		t.Fatal(err)
	}
	if n != 1 || units != 1040 || lane != "core:j" || job != "j1" {
		t.Errorf("usage rows %d, units %d, lane %s, job %s; want one row of 1040 tokens in core:j, job j1", n, units, lane, job)
	}
}

// TestOtherServicesGetTheirKeys forwards a search, a speech and a Notion
// call each to its configured endpoint with its own credential header,
// meters the search and the speech at their prices, and refuses a TTS
// provider the session's voice does not use.
func TestOtherServicesGetTheirKeys(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type seen struct {
		path   string
		header http.Header
	}
	got := make(chan seen, 10)
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.RequestURI(), r.Header.Clone()}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	}))
	t.Cleanup(provider.Close)
	b.setConfig(func(c *config.Config) {
		c.Search = map[string]config.SearchProvider{"brave": {Secret: "brave-key", Endpoint: provider.URL + "/res/v1", PricePer1KQueries: 5}}
		c.TTS = map[string]config.TTS{"eleven": {Provider: "elevenlabs", Endpoint: provider.URL + "/v1", Secret: "eleven-key",
			PricePer1KCharacters: 0.3}, "other": {Provider: "elevenlabs", Endpoint: provider.URL + "/v1", Secret: "eleven-key"}}
		c.VoiceProfiles = map[string]config.VoiceProfile{"calm": {TTS: "eleven", VoiceID: "v1"}}
		c.NotionIntegrations = map[string]config.NotionIntegration{"notes": {Secret: "notion-key", Endpoint: provider.URL + "/notion/v1"}}
	})
	gw := b.gateway(t, "ada")
	for _, tc := range []struct {
		name, method, path, body string
		wantPath, header, value  string
	}{
		{"Search", "GET", "/svc/search/brave/web/search?q=choir", "", "/res/v1/web/search?q=choir", "X-Subscription-Token", "brave-secret"},
		{"Speech", "POST", "/svc/tts/eleven/text-to-speech/v1?output_format=opus_48000_64", `{"text":"héllo"}`,
			"/v1/text-to-speech/v1?output_format=opus_48000_64", "Xi-Api-Key", "eleven-secret"},
		{"Notion", "POST", "/svc/notion/notes/databases/abc-123/query", `{}`, "/notion/v1/databases/abc-123/query", "Authorization",
			"Bearer notion-secret"},
	} {
		req, _ := http.NewRequest(tc.method, gw.URL+tc.path, strings.NewReader(tc.body))
		req.Header.Set(tc.header, "agent-tried")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Fatalf("%s: status %d", tc.name, res.StatusCode)
		}
		s := <-got
		if s.path != tc.wantPath || s.header.Get(tc.header) != tc.value {
			t.Errorf("%s: provider got %s with %s %q", tc.name, s.path, tc.header, s.header.Get(tc.header))
		}
		if tc.name == "Notion" && s.header.Get("Notion-Version") != svc.NotionVersion {
			t.Errorf("Notion-Version %q", s.header.Get("Notion-Version"))
		}
	}
	res, err := http.Post(gw.URL+"/svc/tts/other/text-to-speech/v1", "application/json", strings.NewReader(`{"text":"x"}`))
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden {
		t.Errorf("unbound TTS provider: status %d", res.StatusCode)
	}
	spent := rows(t, b)
	if len(spent) != 2 || spent[0].Kind != "search" || spent[0].Units != 1 || spent[0].CostUsd != 0.005 ||
		spent[1].Kind != "tts" || spent[1].Units != 5 || spent[1].Unit != "characters" {
		t.Errorf("ledger = %+v", spent)
	}
}

// TestCallerGoneMidStreamSettlesTheWorstCase drops the agent's connection
// after the first event of a stream that never reported usage: the call
// may have been billed in full, so it is settled at its worst case.
func TestCallerGoneMidStreamSettlesTheWorstCase(t *testing.T) {
	t.Parallel()
	b := setup(t)
	provider := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, `data: {"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":{"content":"first"}}]}`+"\n\n")
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	}))
	t.Cleanup(provider.Close)
	b.setConfig(func(c *config.Config) {
		c.Models = map[string]config.Model{"fast": {Provider: "openai", Model: llmtest.DefaultModel, Endpoint: provider.URL,
			Prices: &config.Prices{InputPerMTok: 1, OutputPerMTok: 2}}}
	})
	gw := b.gateway(t, "ada")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, "POST", gw.URL+"/svc/llm/fast/chat/completions", strings.NewReader(streamBody()))
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bufio.NewReader(res.Body).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	cancel()
	res.Body.Close()
	got := rows(t, b)
	if len(got) != 1 || *got[0].Outcome != "worst_case" || got[0].Units != got[0].ReservedTokens || got[0].CostUsd != got[0].ReservedUsd ||
		got[0].CostUsd == 0 {
		t.Errorf("ledger = %+v", got)
	}
}
