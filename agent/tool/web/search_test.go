package web_test

import (
	"context"
	"errors"
	"github.com/choirhq/choir/rpc/usage"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/meter"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"github.com/choirhq/choir/agent/tool/web"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc/egress"
)

// braveOK is a Brave web search answer, trimmed from a real one.
const braveOK = `{
  "query": {"original": "choir agents", "show_strict_warning": false, "is_navigational": false,
            "local_decision": "drop", "local_locations_idx": 0, "is_news_breaking": false, "spellcheck_off": true,
            "country": "us", "bad_results": false, "should_fallback": false, "postal_code": "", "city": "",
            "header_country": "", "more_results_available": true, "state": ""},
  "mixed": {"type": "mixed", "main": [{"type": "web", "index": 0, "all": false}], "top": [], "side": []},
  "type": "search",
  "web": {"type": "search", "results": [
    {"title": "Choir &amp; <strong>agents</strong>", "url": "https://example.com/choir",
     "is_source_local": false, "is_source_both": false,
     "description": "Self-hosted <strong>personal</strong> agents.", "page_age": "2026-11-20T10:00:00",
     "profile": {"name": "Example", "url": "https://example.com/choir", "long_name": "example.com", "img": "https://imgs.search.brave.com/x"},
     "language": "en", "family_friendly": true, "type": "search_result", "subtype": "generic", "is_live": false,
     "meta_url": {"scheme": "https", "netloc": "example.com", "hostname": "example.com", "favicon": "https://imgs.search.brave.com/f", "path": "› choir"},
     "age": "November 20, 2026"},
    {"title": "Second", "url": "https://other.example/b", "description": "Another result.",
     "profile": {"name": "", "url": "", "long_name": "", "img": ""},
     "meta_url": {"scheme": "https", "netloc": "other.example", "hostname": "other.example", "favicon": "", "path": ""},
     "type": "search_result", "subtype": "generic"}
  ], "family_friendly": true}
}`

const braveRateLimited = `{"type": "ErrorResponse", "error": {"id": "2ec4d9d1-ecfd-4f2b-a7a3-0a0000000000", "status": 429,
  "code": "RATE_LIMITED", "detail": "Request rate limit exceeded for plan.",
  "meta": {"plan": "Free", "rate_limit": 1, "rate_current": 2, "quota_limit": 2000, "quota_current": 17, "component": "rate_limiter"}},
  "time": 1763980000}`

const braveBadToken = `{"type": "ErrorResponse", "error": {"id": "5a1f0000-0000-4000-8000-000000000000", "status": 422,
  "code": "SUBSCRIPTION_TOKEN_INVALID", "detail": "The provided subscription token is invalid.",
  "meta": {"component": "authentication"}}, "time": 1763980000}`

// braveFake speaks the Brave Search API: GET /web/search with
// X-Subscription-Token.
type braveFake struct {
	srv   *httptest.Server
	hits  atomic.Int64
	mu    sync.Mutex
	query map[string]string
}

func newBraveFake(t *testing.T) *braveFake {
	f := &braveFake{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/res/v1/web/search" || r.Header.Get("Accept") != "application/json" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		f.mu.Lock()
		f.query = map[string]string{}
		for k := range r.URL.Query() {
			f.query[k] = r.URL.Query().Get(k)
		}
		f.mu.Unlock()
		switch r.Header.Get("X-Subscription-Token") {
		case "good-key":
			w.Header().Set("X-RateLimit-Limit", "1, 2000")
			w.Header().Set("X-RateLimit-Remaining", "0, 1983")
			w.Header().Set("X-RateLimit-Reset", "1, 1419704")
			w.Write([]byte(braveOK))
		case "spent-key":
			w.Header().Set("X-RateLimit-Limit", "1, 2000")
			w.Header().Set("X-RateLimit-Policy", "1;w=1, 2000;w=2592000")
			w.Header().Set("X-RateLimit-Remaining", "0, 0")
			w.Header().Set("X-RateLimit-Reset", "7, 1419704")
			w.WriteHeader(http.StatusTooManyRequests)
			w.Write([]byte(braveRateLimited))
		default:
			w.WriteHeader(http.StatusUnprocessableEntity)
			w.Write([]byte(braveBadToken))
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

type searchOut struct {
	Results []web.SearchResult `json:"results"`
	Cached  bool               `json:"cached"`
	More    bool               `json:"more_available"`
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) Add(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func setupSearch(t *testing.T, f *braveFake, key string, meter func(context.Context, string) error) (*tooltest.Bundle, *clock) {
	t.Helper()
	c := &clock{now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	cfg := web.Config{NowFunc: c.Now, MeterFunc: meter,
		ProviderFunc: func() (web.Provider, error) {
			return web.Provider{Name: "brave", Endpoint: f.srv.URL + "/res/v1", Key: key}, nil
		}}
	return tooltest.Setup(t, builtin.Config{Tools: web.Tools(cfg)}), c
}

func TestSearch(t *testing.T) {
	t.Parallel()
	f := newBraveFake(t)
	var metered atomic.Int64
	b, clk := setupSearch(t, f, "good-key", func(context.Context, string) error { metered.Add(1); return nil })

	in := `{"query": "choir agents", "count": 5, "offset": 1, "freshness": "pw", "country": "de", "safesearch": "strict"}`
	r := b.MustCall(t, web.NameSearch, in)
	out := tooltest.Output[searchOut](t, r)
	if r.Status != tool.StatusSuccess || len(out.Results) != 2 || !out.More {
		t.Fatalf("result %+v", r)
	}
	if len(r.Usage) != 1 || r.Usage[0].Kind != usage.KindSearch || r.Usage[0].Units != 1 || r.Usage[0].Service != "brave" {
		t.Errorf("usage %+v, want one search query on brave", r.Usage)
	}
	want := web.SearchResult{Title: "Choir & agents", URL: "https://example.com/choir", Snippet: "Self-hosted personal agents.",
		Age: "November 20, 2026", Source: "Example"}
	if out.Results[0] != want {
		t.Errorf("first result %+v, want %+v", out.Results[0], want)
	}
	if out.Results[1].Source != "other.example" {
		t.Errorf("second result's source %q, want the host name", out.Results[1].Source)
	}
	f.mu.Lock()
	q := f.query
	f.mu.Unlock()
	for k, v := range map[string]string{"q": "choir agents", "count": "5", "offset": "1", "freshness": "pw", "country": "DE", "safesearch": "strict"} {
		if q[k] != v {
			t.Errorf("query parameter %s = %q, want %q", k, q[k], v)
		}
	}

	// A retried step reuses the answer: no second query, no second count.
	r = b.MustCall(t, web.NameSearch, in)
	if out := tooltest.Output[searchOut](t, r); !out.Cached || f.hits.Load() != 1 || metered.Load() != 1 {
		t.Fatalf("retry: cached %v, hits %d, metered %d", out.Cached, f.hits.Load(), metered.Load())
	}
	if len(r.Usage) != 0 {
		t.Errorf("a cached answer counts usage %+v", r.Usage)
	}
	clk.Add(web.DefaultCacheTTL)
	r = b.MustCall(t, web.NameSearch, in)
	if out := tooltest.Output[searchOut](t, r); out.Cached || f.hits.Load() != 2 || metered.Load() != 2 {
		t.Fatalf("after the TTL: cached %v, hits %d, metered %d", out.Cached, f.hits.Load(), metered.Load())
	}
}

func TestSearchErrors(t *testing.T) {
	t.Parallel()
	f := newBraveFake(t)

	t.Run("RateLimitedIsRetryableQuotaError", func(t *testing.T) {
		b, _ := setupSearch(t, f, "spent-key", nil)
		r := b.MustCall(t, web.NameSearch, `{"query": "x"}`)
		e := tooltest.Output[errOut](t, r)
		if r.Status != tool.StatusError || e.Error != "quota" || e.Code != "RATE_LIMITED" || e.Retry != 7 ||
			e.Rate["remaining"] != "0, 0" || e.Fix == "" {
			t.Fatalf("result %s", r.JSON())
		}
	})
	t.Run("InvalidKeyIsAuthError", func(t *testing.T) {
		b, _ := setupSearch(t, f, "wrong-key", nil)
		r := b.MustCall(t, web.NameSearch, `{"query": "x"}`)
		e := tooltest.Output[errOut](t, r)
		if e.Error != "auth" || e.Code != "SUBSCRIPTION_TOKEN_INVALID" || e.Fix == "" {
			t.Fatalf("result %s", r.JSON())
		}
		if strings.Contains(string(r.JSON()), "wrong-key") {
			t.Fatal("the key leaked into the result")
		}
	})
	t.Run("MissingKeyNeverCallsTheProvider", func(t *testing.T) {
		before := f.hits.Load()
		b, _ := setupSearch(t, f, "", nil)
		r := b.MustCall(t, web.NameSearch, `{"query": "x"}`)
		if e := tooltest.Output[errOut](t, r); e.Error != "auth" || f.hits.Load() != before {
			t.Fatalf("result %s, hits %d", r.JSON(), f.hits.Load()-before)
		}
	})
	t.Run("MeterRefusal", func(t *testing.T) {
		before := f.hits.Load()
		b, _ := setupSearch(t, f, "good-key", func(context.Context, string) error { return errors.New("search cap reached") })
		r := b.MustCall(t, web.NameSearch, `{"query": "x"}`)
		if e := tooltest.Output[errOut](t, r); e.Error != "quota" || f.hits.Load() != before {
			t.Fatalf("result %s", r.JSON())
		}
	})
	t.Run("BadOptionsRejectedBySchema", func(t *testing.T) {
		b, _ := setupSearch(t, f, "good-key", nil)
		for _, in := range []string{`{"query": ""}`, `{"query": "x", "count": 50}`, `{"query": "x", "freshness": "yesterday"}`,
			`{"query": "x", "safesearch": "none"}`, `{"query": "x", "country": "USA"}`} {
			var ie *tool.InputError
			if _, err := b.Call(t, web.NameSearch, in); !errors.As(err, &ie) {
				t.Errorf("%s: %v, want an input error", in, err)
			}
		}
	})
}

// TestSearchRealBrave talks to the real Brave API when CHOIR_TEST_BRAVE_API_KEY
// is set.
func TestSearchRealBrave(t *testing.T) {
	key := os.Getenv("CHOIR_TEST_BRAVE_API_KEY")
	if key == "" {
		t.Skip("CHOIR_TEST_BRAVE_API_KEY is not set: the real Brave Search API was not called")
	}
	cfg := web.Config{ProviderFunc: func() (web.Provider, error) { return web.Provider{Name: "brave", Key: key}, nil }}
	b := tooltest.Setup(t, builtin.Config{Tools: web.Tools(cfg)})
	r := b.MustCall(t, web.NameSearch, `{"query": "golang chromedp", "count": 3}`)
	if out := tooltest.Output[searchOut](t, r); r.Status != tool.StatusSuccess || len(out.Results) == 0 || out.Results[0].URL == "" {
		t.Fatalf("result %s", r.JSON())
	}
}

// TestPricedSearchIsCountedAgainstTheCaps: with a price configured for
// the provider (search.<name>.price_per_1k_queries), a query is recorded
// with its cost, and a meter that counts it refuses the next model call
// once the day's cost cap is spent.
func TestPricedSearchIsCountedAgainstTheCaps(t *testing.T) {
	t.Parallel()
	f := newBraveFake(t)
	c := &clock{now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	b := tooltest.Setup(t, builtin.Config{Tools: web.Tools(web.Config{NowFunc: c.Now,
		ProviderFunc: func() (web.Provider, error) {
			return web.Provider{Name: "brave", Endpoint: f.srv.URL + "/res/v1", Key: "good-key", PricePer1KQueries: 5}, nil
		}})})
	r := b.MustCall(t, web.NameSearch, `{"query": "choir agents"}`)
	if r.Status != tool.StatusSuccess || len(r.Usage) != 1 {
		t.Fatalf("search: %s %s, usage %+v", r.Status, r.Summary, r.Usage)
	}
	if u := r.Usage[0]; u.Units != 1 || u.CostUSD != 0.005 || u.CostSource != usage.CostPrices {
		t.Fatalf("usage %+v, want one query costing $0.005 at the configured price", u)
	}
	m := meter.New(meter.Config{AgentID: "assistant"})
	m.SetCaps(config.Budgets{Caps: config.Caps{PerDayCostUSD: 0.005}})
	m.Record("edge", r.Usage)
	srv := llmtest.NewServer(t)
	_, err := (&llm.Client{Gate: m}).Complete(context.Background(), llm.Request{Model: srv.Model(), Messages: []llm.Message{llm.UserMessage("hi")}})
	var ce *meter.CapError
	if !errors.As(err, &ce) || ce.Field != "per_day_cost_usd" || len(srv.Requests()) != 0 {
		t.Errorf("after $0.005 of search under a $0.005 day cap: err = %v, %d requests; want the day cost cap, none sent", err, len(srv.Requests()))
	}
}

// TestSearchThroughTheGatewaySendsNoKey: a provider behind choird's egress
// gateway's service route needs no key in the agent: the tool sends none,
// labels the query with a spend key, its lane and its name, and its usage
// record carries that spend key, so that the usage views count the query
// once beside the gateway's own record of it.
func TestSearchThroughTheGatewaySendsNoKey(t *testing.T) {
	t.Parallel()
	got := make(chan http.Header, 1)
	route := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/svc/search/brave/web/search" {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		got <- r.Header.Clone()
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(braveOK))
	}))
	t.Cleanup(route.Close)
	cfg := web.Config{ProviderFunc: func() (web.Provider, error) {
		return web.Provider{Name: "brave", Endpoint: route.URL + "/svc/search/brave", Gateway: true}, nil
	}}
	b := tooltest.Setup(t, builtin.Config{Tools: web.Tools(cfg)})
	r := b.MustCall(t, web.NameSearch, `{"query": "choir agents"}`)
	if r.Status != tool.StatusSuccess {
		t.Fatalf("search through the gateway: %s %s", r.Summary, r.Output)
	}
	h := <-got
	if v := h.Get("X-Subscription-Token"); v != "" {
		t.Errorf("the tool sent a key %q", v)
	}
	key := h.Get(egress.HeaderSpendKey)
	if key == "" || h.Get(egress.HeaderPurpose) != web.NameSearch {
		t.Errorf("labels: spend key %q, purpose %q", key, h.Get(egress.HeaderPurpose))
	}
	if len(r.Usage) != 1 || r.Usage[0].SpendKey != key {
		t.Errorf("usage %+v, want one query under spend key %q", r.Usage, key)
	}
}
