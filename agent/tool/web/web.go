// Package web holds the agent's web tools (spec 8.7, 14.3): choir.web.fetch,
// a plain HTTP GET behind the SSRF guard of internal/netguard that returns
// a page's readable text or saves a binary under .choirtmp/downloads, and
// choir.web.search, the Brave Search API with the search provider's key
// (and no other secret; none at all through choird's egress gateway,
// which adds it), structured results and structured quota and auth
// errors, cached briefly so that a retried step does not spend quota twice.
// It also declares choir.web.browse, which choird's browser worker runs.
package web

import (
	"context"
	"log/slog"
	"net"
	"time"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
	"github.com/choirhq/choir/config"
)

// Tool names.
const (
	NameFetch  = "choir.web.fetch"
	NameSearch = "choir.web.search"
	NameBrowse = "choir.web.browse"
)

// Provider is the search provider a call uses: its name in config.json,
// the API base URL and the key.
type Provider struct {
	Name     string
	Endpoint string
	Key      string
	// Gateway says Endpoint is the provider's service route on choird's
	// egress gateway, which adds the key (the tool has none then) and
	// meters each query under the spend key the tool sends.
	Gateway bool
	// PricePer1KQueries is the configured price of its queries
	// (search.<name>.price_per_1k_queries); zero when unpriced.
	PricePer1KQueries float64
}

// Config wires the tools to the session.
type Config struct {
	// SettingsFunc returns the current web limits and allowlist (the
	// session's dynamic configuration); nil means the defaults.
	SettingsFunc func() config.Web
	// ProviderFunc returns the search provider and its key. It is the
	// search tool's only way to a secret: the tool sees that key and no
	// other. An error says what to configure and is shown to the model.
	ProviderFunc func() (Provider, error)
	// MeterFunc, if set, is called once before every search query that
	// goes to the provider (never for a cached answer): the point where
	// usage is counted, and where a cap can refuse the query by
	// returning an error, which the model sees.
	MeterFunc func(ctx context.Context, provider string) error
	// NowFunc is the clock of the search cache; nil means time.Now.
	NowFunc func() time.Time
	// CacheTTL is how long a search answer is reused (default 5 minutes).
	CacheTTL time.Duration
	// DialFunc, when set, opens choir.web.fetch's connections: the agent's
	// way out through choird's egress gateway, which checks the resolved
	// address against netguard and web.allow_hosts itself. Nil dials
	// directly through the guard.
	DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives a line for every refused URL and failed call.
	Logger *slog.Logger
}

func (c Config) settings() config.Web {
	if c.SettingsFunc == nil {
		return config.Web{}.WithDefaults()
	}
	return c.SettingsFunc().WithDefaults()
}

func (c Config) logger() *slog.Logger {
	if c.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return c.Logger
}

// Tools returns choir.web.fetch, choir.web.search and the declaration of
// choir.web.browse.
func Tools(cfg Config) []tool.Tool {
	// A page, a search's results and a browsed page are strangers' words
	// (issue 30): the lane that reads them holds their source.
	return []tool.Tool{tool.WithSources(&fetchTool{cfg: cfg}, catalog.WebSources), newSearchTool(cfg),
		tool.WithSources(tool.Declare(browseSpec), catalog.WebSources)}
}

// errorResult is a failed call with a structured output: kind (a stable
// word a model or a test can match), the message, and what to do.
func errorResult(kind, msg, fix string, extra map[string]any) tool.Result {
	out := map[string]any{"error": kind, "message": msg}
	if fix != "" {
		out["fix"] = fix
	}
	for k, v := range extra {
		out[k] = v
	}
	b, _ := tool.MarshalNoEscape(out)
	return tool.Result{Status: tool.StatusError, Summary: msg, Output: b}
}
