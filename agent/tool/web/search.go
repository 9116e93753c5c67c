package web

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"github.com/choirhq/choir/rpc/usage"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/choirhq/choir/agent/tool"
)

// DefaultBraveEndpoint is the Brave Search API's base URL.
const DefaultBraveEndpoint = "https://api.search.brave.com/res/v1"

// DefaultCacheTTL is how long a search answer is reused.
const DefaultCacheTTL = 5 * time.Minute

// maxCacheEntries bounds the per-agent cache.
const maxCacheEntries = 256

type searchInput struct {
	Query      string `json:"query"`
	Count      int    `json:"count,omitempty"`
	Offset     int    `json:"offset,omitempty"`
	Freshness  string `json:"freshness,omitempty"`
	Country    string `json:"country,omitempty"`
	SafeSearch string `json:"safesearch,omitempty"`
}

// SearchResult is one web result.
type SearchResult struct {
	Title   string `json:"title"`
	URL     string `json:"url"`
	Snippet string `json:"snippet"`
	Age     string `json:"age,omitempty"`
	Source  string `json:"source,omitempty"`
}

// searchOutput is what the model gets.
type searchOutput struct {
	Query    string         `json:"query"`
	Results  []SearchResult `json:"results"`
	Provider string         `json:"provider"`
	Cached   bool           `json:"cached,omitempty"`
	// MoreAvailable is Brave's query.more_results_available.
	MoreAvailable bool `json:"more_available,omitempty"`
}

type cacheEntry struct {
	out     searchOutput
	expires time.Time
}

type searchTool struct {
	cfg    Config
	client *http.Client
	mu     sync.Mutex
	cache  map[string]cacheEntry
}

func newSearchTool(cfg Config) *searchTool {
	return &searchTool{cfg: cfg, client: &http.Client{Timeout: 30 * time.Second}, cache: map[string]cacheEntry{}}
}

func (*searchTool) Spec() tool.Spec {
	return tool.Spec{
		LLM: tool.LLMView{
			Name: NameSearch,
			Description: "Search the web (Brave Search). Returns results with title, url, snippet, age and source. " +
				"Page through with offset; narrow with freshness (pd: past day, pw: week, pm: month, py: year, or " +
				"YYYY-MM-DDtoYYYY-MM-DD), country (2-letter code) and safesearch. Read a result with choir.web.fetch or choir.web.browse.",
			Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "query": {"type": "string", "minLength": 1, "maxLength": 400, "description": "The search terms."},
    "count": {"type": "integer", "minimum": 1, "maximum": 20, "description": "Results per page (default 10)."},
    "offset": {"type": "integer", "minimum": 0, "maximum": 9, "description": "Page number, from 0."},
    "freshness": {"type": "string", "pattern": "^(pd|pw|pm|py|\\d{4}-\\d{2}-\\d{2}to\\d{4}-\\d{2}-\\d{2})$"},
    "country": {"type": "string", "pattern": "^[A-Za-z]{2}$", "description": "Country of the results, e.g. US, DE."},
    "safesearch": {"type": "string", "enum": ["off", "moderate", "strict"]}
  },
  "required": ["query"],
  "additionalProperties": false
}`),
		},
		// No locks (spec 9.6): a search reads nothing of the agent's.
		// Its snippets are strangers' words.
		Runtime: tool.Runtime{TimeoutMS: 45_000, SideEffect: tool.SideEffectRead, Idempotent: true, Version: "1.0", Network: true,
			Trust: tool.TrustUntrusted, Source: "web:search"},
	}
}

func (s *searchTool) Execute(ctx context.Context, _ tool.Env, input json.RawMessage) (tool.Result, error) {
	var in searchInput
	if err := json.Unmarshal(input, &in); err != nil {
		return errorResult("bad_input", "input: "+err.Error(), `pass {"query": "..."}`, nil), nil
	}
	if in.Count == 0 {
		in.Count = 10
	}
	in.Country = strings.ToUpper(in.Country)
	log := s.cfg.logger().With(slog.String("tool", NameSearch), slog.String("query", in.Query))
	if s.cfg.ProviderFunc == nil {
		return errorResult("not_configured", "no search provider is configured",
			`add "search": {"brave": {"secret": "brave-api-key"}} to config.json and the key to secrets.json`, nil), nil
	}
	p, err := s.cfg.ProviderFunc()
	if err != nil {
		log.Warn("search not configured", slog.String("error", err.Error()))
		return errorResult("not_configured", err.Error(), "configure a search provider in config.json and its key in secrets.json", nil), nil
	}
	if p.Key == "" && !p.Gateway {
		log.Warn("search key missing", slog.String("provider", p.Name))
		return errorResult("auth", fmt.Sprintf("search provider %s has no API key", p.Name),
			fmt.Sprintf("put the key named by search.%s.secret in secrets.json, then reload the configuration", p.Name), nil), nil
	}
	key := p.Name + "\x00" + cacheKey(in)
	if out, ok := s.cached(key); ok {
		out.Cached = true
		return tool.SuccessResult(fmt.Sprintf("%d results for %q (cached)", len(out.Results), in.Query), out), nil
	}
	if s.cfg.MeterFunc != nil {
		if err := s.cfg.MeterFunc(ctx, p.Name); err != nil {
			log.Warn("search refused by the meter", slog.String("error", err.Error()))
			return errorResult("quota", err.Error(), "wait, or ask the operator to raise the cap", nil), nil
		}
	}
	out, spendKey, res := s.query(ctx, p, in)
	if res != nil {
		log.Warn("search failed", slog.String("summary", res.Summary))
		return *res, nil
	}
	s.store(key, out)
	log.Info("search done", slog.Int("results", len(out.Results)))
	r := tool.SuccessResult(fmt.Sprintf("%d results for %q", len(out.Results), in.Query), out)
	// One query spent (a cached answer spends none), for the usage
	// accounting, at the configured price (none: unpriced, as Brave bills
	// by plan).
	rec := usage.Record{Kind: usage.KindSearch, Service: p.Name, Units: 1, Unit: usage.UnitQueries, SpendKey: spendKey}
	if p.PricePer1KQueries > 0 {
		rec.CostUSD, rec.CostSource = p.PricePer1KQueries/1000, usage.CostPrices
	}
	r.Usage = []usage.Record{rec}
	return r, nil
}

func cacheKey(in searchInput) string {
	b, _ := json.Marshal(in)
	return string(b)
}

func (s *searchTool) now() time.Time {
	if s.cfg.NowFunc != nil {
		return s.cfg.NowFunc()
	}
	return time.Now()
}

func (s *searchTool) cached(key string) (searchOutput, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.cache[key]
	if !ok || !s.now().Before(e.expires) {
		delete(s.cache, key)
		return searchOutput{}, false
	}
	return e.out, true
}

func (s *searchTool) store(key string, out searchOutput) {
	ttl := s.cfg.CacheTTL
	if ttl <= 0 {
		ttl = DefaultCacheTTL
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	if len(s.cache) >= maxCacheEntries {
		for k, e := range s.cache {
			if !now.Before(e.expires) || len(s.cache) >= maxCacheEntries {
				delete(s.cache, k)
			}
		}
	}
	s.cache[key] = cacheEntry{out: out, expires: now.Add(ttl)}
}

// braveResponse is the part of Brave's web search answer we read.
type braveResponse struct {
	Query struct {
		Original             string `json:"original"`
		MoreResultsAvailable bool   `json:"more_results_available"`
	} `json:"query"`
	Web struct {
		Results []struct {
			Title       string `json:"title"`
			URL         string `json:"url"`
			Description string `json:"description"`
			Age         string `json:"age"`
			PageAge     string `json:"page_age"`
			Profile     struct {
				Name string `json:"name"`
			} `json:"profile"`
			MetaURL struct {
				Hostname string `json:"hostname"`
			} `json:"meta_url"`
		} `json:"results"`
	} `json:"web"`
}

// braveError is Brave's error body.
type braveError struct {
	Type  string `json:"type"`
	Error struct {
		Status int    `json:"status"`
		Code   string `json:"code"`
		Detail string `json:"detail"`
		// Message is choird's egress gateway's word on a refusal.
		Message string         `json:"message"`
		Meta    map[string]any `json:"meta"`
	} `json:"error"`
}

// query calls the provider; a non-nil result is the model's error. Through
// the gateway, spendKey names the query in choird's spend ledger.
func (s *searchTool) query(ctx context.Context, p Provider, in searchInput) (out searchOutput, spendKey string, _ *tool.Result) {
	base := p.Endpoint
	if base == "" {
		base = DefaultBraveEndpoint
	}
	q := url.Values{"q": {in.Query}, "count": {strconv.Itoa(in.Count)}}
	if in.Offset > 0 {
		q.Set("offset", strconv.Itoa(in.Offset))
	}
	for k, v := range map[string]string{"freshness": in.Freshness, "country": in.Country, "safesearch": in.SafeSearch} {
		if v != "" {
			q.Set(k, v)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(base, "/")+"/web/search?"+q.Encode(), nil)
	if err != nil {
		r := errorResult("not_configured", "bad search endpoint: "+err.Error(), fmt.Sprintf("fix search.%s.endpoint in config.json", p.Name), nil)
		return searchOutput{}, spendKey, &r
	}
	req.Header.Set("Accept", "application/json")
	if p.Gateway {
		spendKey = tool.LabelServiceCall(ctx, req.Header, NameSearch)
	} else {
		req.Header.Set("X-Subscription-Token", p.Key)
	}
	resp, err := s.client.Do(req)
	if err != nil {
		r := errorResult("network", "search provider unreachable: "+redact(err.Error(), p.Key), "try again in a moment", map[string]any{"retryable": true})
		return searchOutput{}, spendKey, &r
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if resp.StatusCode != http.StatusOK {
		r := braveFailure(p, resp, body)
		return searchOutput{}, spendKey, &r
	}
	var br braveResponse
	if err := json.Unmarshal(body, &br); err != nil {
		r := errorResult("provider", "search provider sent an unreadable answer: "+err.Error(), "try again later", nil)
		return searchOutput{}, spendKey, &r
	}
	out = searchOutput{Query: in.Query, Provider: p.Name, Results: []SearchResult{}, MoreAvailable: br.Query.MoreResultsAvailable}
	for _, x := range br.Web.Results {
		age := x.Age
		if age == "" {
			age = x.PageAge
		}
		src := x.Profile.Name
		if src == "" {
			src = x.MetaURL.Hostname
		}
		out.Results = append(out.Results, SearchResult{Title: stripTags(x.Title), URL: x.URL,
			Snippet: stripTags(x.Description), Age: age, Source: src})
	}
	return out, spendKey, nil
}

// braveFailure turns an error answer into a structured error.
func braveFailure(p Provider, resp *http.Response, body []byte) tool.Result {
	var be braveError
	_ = json.Unmarshal(body, &be)
	detail := cmp.Or(be.Error.Detail, be.Error.Message)
	if detail == "" {
		detail = strings.TrimSpace(tool.TruncateUTF8(string(body), 300))
	}
	extra := map[string]any{"status": resp.StatusCode}
	if be.Error.Code != "" {
		extra["code"] = be.Error.Code
	}
	rate := map[string]string{}
	for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "X-RateLimit-Policy"} {
		if v := resp.Header.Get(h); v != "" {
			rate[strings.ToLower(strings.TrimPrefix(h, "X-RateLimit-"))] = v
		}
	}
	if len(rate) > 0 {
		extra["rate_limit"] = rate
	}
	code := be.Error.Code
	switch {
	case resp.StatusCode == http.StatusPaymentRequired:
		// choird's egress gateway refused the query: a usage cap.
		return errorResult("quota", "search refused: "+detail, "wait for the next day, or ask the operator to raise the cap", extra)
	case resp.StatusCode == http.StatusTooManyRequests || code == "RATE_LIMITED":
		retry := resetSeconds(resp.Header.Get("X-RateLimit-Reset"))
		extra["retryable"] = true
		if retry > 0 {
			extra["retry_after_seconds"] = retry
		}
		fix := "wait and retry"
		if retry > 0 {
			fix = fmt.Sprintf("wait %d s and retry; if the monthly quota is spent, upgrade the Brave plan", retry)
		}
		return errorResult("quota", "search rate limit or quota reached: "+detail, fix, extra)
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden ||
		strings.Contains(code, "TOKEN") || strings.Contains(code, "SUBSCRIPTION"):
		return errorResult("auth", fmt.Sprintf("search provider %s refused the API key: %s", p.Name, detail),
			fmt.Sprintf("check the key named by search.%s.secret in secrets.json (a Brave Search API subscription token)", p.Name), extra)
	case resp.StatusCode == http.StatusUnprocessableEntity || resp.StatusCode == http.StatusBadRequest:
		return errorResult("bad_input", "search provider refused the query: "+detail, "change the query or its options", extra)
	}
	extra["retryable"] = resp.StatusCode >= 500
	return errorResult("provider", fmt.Sprintf("search provider answered %s: %s", resp.Status, detail), "try again later", extra)
}

// resetSeconds reads the shortest window of X-RateLimit-Reset ("1, 1419704"):
// the seconds until a request is allowed again.
func resetSeconds(h string) int {
	first, _, _ := strings.Cut(h, ",")
	n, _ := strconv.Atoi(strings.TrimSpace(first))
	return n
}

// stripTags removes the <strong> highlighting Brave puts in titles and
// snippets.
func stripTags(s string) string {
	var b strings.Builder
	in := false
	for _, r := range s {
		switch {
		case r == '<':
			in = true
		case r == '>' && in:
			in = false
		case !in:
			b.WriteRune(r)
		}
	}
	return strings.NewReplacer("&amp;", "&", "&quot;", `"`, "&#39;", "'", "&lt;", "<", "&gt;", ">").Replace(b.String())
}

func redact(s, secret string) string {
	if secret == "" {
		return s
	}
	return strings.ReplaceAll(s, secret, "[secret]")
}
