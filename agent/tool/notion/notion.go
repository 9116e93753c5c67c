// Package notion is the choir.notion.query tool (spec 8.7): search the
// pages and databases shared with the session's Notion integration, read a
// page as text (its blocks flattened, children included), query a database
// with a filter and sorts, and append blocks to a page. It speaks the
// Notion REST API (Notion-Version 2022-06-28) with the leased integration's
// secret, which it obtains through the binding reference
// [tool.SecretNotion] and no other way (through choird's egress gateway,
// [Config.Gateway], it holds none: the gateway adds it); it waits out a 429 as Notion's
// Retry-After says, and every answer carries the page and database ids the
// model needs to follow up.
package notion

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/catalog"
)

// Name is the tool's name.
const Name = tool.NameNotionQuery

// Config configures the tool. Zero fields take their defaults.
type Config struct {
	// BaseURL is the API root, DefaultBaseURL by default; tests point it
	// at a local server that speaks the Notion protocol.
	BaseURL string
	// EndpointFunc, when set, returns the API root of the session's
	// integration at each call (its endpoint in config.json); "" keeps
	// BaseURL.
	EndpointFunc func() string
	// Gateway says the endpoint is the integration's service route on
	// choird's egress gateway, which adds the integration's secret: the
	// tool sends none and needs none.
	Gateway bool
	// HTTPClient makes the requests; http.DefaultClient by default.
	HTTPClient *http.Client
	// Logger receives a line per failed call; slog.Default() by default.
	Logger *slog.Logger
	// MaxRetries bounds how often one request is retried after a 429
	// (default 3); MaxWait is the longest Retry-After the tool waits out
	// (default 30 s): a longer one goes back to the model.
	MaxRetries int
	MaxWait    time.Duration
	// SleepFunc waits d or until ctx ends; a timer by default. Tests
	// replace it so that no test sleeps.
	SleepFunc func(ctx context.Context, d time.Duration) error
}

func (c Config) withDefaults() Config {
	if c.BaseURL == "" {
		c.BaseURL = DefaultBaseURL
	}
	c.BaseURL = strings.TrimRight(c.BaseURL, "/")
	if c.HTTPClient == nil {
		c.HTTPClient = http.DefaultClient
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.MaxRetries <= 0 {
		c.MaxRetries = defaultMaxRetries
	}
	if c.MaxWait <= 0 {
		c.MaxWait = defaultMaxWait
	}
	if c.SleepFunc == nil {
		c.SleepFunc = sleep
	}
	return c
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Tools returns choir.notion.query configured by cfg.
func Tools(cfg Config) []tool.Tool {
	return []tool.Tool{tool.WithSources(&query{cfg: cfg.withDefaults()}, catalog.NotionSources)}
}

type query struct{ cfg Config }

func (q *query) Spec() tool.Spec { return catalog.NotionQuery() }

// SideEffectOf says that only an append acts: the other actions read.
func (q *query) SideEffectOf(input json.RawMessage) tool.SideEffect {
	var in struct {
		Action string `json:"action"`
	}
	if json.Unmarshal(input, &in) == nil && in.Action != "append" {
		return tool.SideEffectRead
	}
	return tool.SideEffectExternal
}

// input is the tool's input.
type input struct {
	Action     string            `json:"action"`
	Query      string            `json:"query"`
	Object     string            `json:"object"`
	PageID     string            `json:"page_id"`
	DatabaseID string            `json:"database_id"`
	Filter     json.RawMessage   `json:"filter"`
	Sorts      []json.RawMessage `json:"sorts"`
	Text       string            `json:"text"`
	Blocks     []json.RawMessage `json:"blocks"`
	Limit      int               `json:"limit"`
	Cursor     string            `json:"cursor"`
}

// Execute runs one action. Every failure the model can act on is a result
// with status error naming what is wrong and what to do, and a log line.
func (q *query) Execute(ctx context.Context, env tool.Env, raw json.RawMessage) (tool.Result, error) {
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		return tool.ErrorResult("decode input: %v", err), nil
	}
	if in.Limit == 0 {
		in.Limit = 20
	}
	token, ok := env.Secret(tool.SecretNotion)
	if (!ok || token == "") && !q.cfg.Gateway {
		q.cfg.Logger.WarnContext(ctx, "notion call without an integration secret", slog.String("action", in.Action))
		return tool.ErrorResult("no Notion integration secret is available to this session: start the agent with a Notion " +
			"integration (defaults.notion in config.json, or --notion) whose secret is set (choirctl secret set <name>)"), nil
	}
	cfg := q.cfg
	if q.cfg.EndpointFunc != nil {
		if e := q.cfg.EndpointFunc(); e != "" {
			cfg.BaseURL = strings.TrimRight(e, "/")
		}
	}
	c := &client{cfg: cfg, token: token}
	var res tool.Result
	var err error
	switch in.Action {
	case "search":
		res, err = c.search(ctx, in)
	case "read_page":
		res, err = c.readPage(ctx, in)
	case "query_database":
		res, err = c.queryDatabase(ctx, in)
	case "append":
		res, err = c.appendBlocks(ctx, in)
	default:
		return tool.ErrorResult("action %q: want search, read_page, query_database or append", in.Action), nil
	}
	if err != nil {
		if ctx.Err() != nil {
			return tool.Result{}, ctx.Err()
		}
		q.cfg.Logger.WarnContext(ctx, "notion call failed", slog.String("action", in.Action), slog.String("error", err.Error()))
		return tool.ErrorResult("%s", explain(err)), nil
	}
	return res, nil
}

// explain turns an error into what the model should be told.
func explain(err error) string {
	var ae *APIError
	switch {
	case errors.As(err, &ae) && ae.Status == http.StatusUnauthorized:
		return "Notion refused the integration's secret (" + ae.Code + "): the secret of the bound Notion integration is wrong or revoked; ask the operator to set it again (choirctl secret set)"
	case errors.As(err, &ae) && ae.Status == http.StatusTooManyRequests:
		return fmt.Sprintf("Notion is rate limiting this integration (%s); try again in %s", ae.Message, max(ae.RetryAfter, time.Second).Round(time.Second))
	case errors.As(err, &ae) && ae.Status == http.StatusNotFound:
		return "Notion: " + ae.Message + " (the page or database does not exist, or is not shared with the integration: share it with the integration in Notion)"
	case errors.As(err, &ae) && (ae.Status == http.StatusForbidden):
		return "Notion: " + ae.Message + " (the integration lacks the capability for this: grant it in the integration's settings)"
	case errors.As(err, &ae) && ae.Status == http.StatusBadRequest:
		return "Notion rejected the request (" + ae.Code + "): " + ae.Message
	case errors.As(err, &ae):
		return fmt.Sprintf("Notion failed (%d %s): %s; try again later", ae.Status, ae.Code, ae.Message)
	case errors.Is(err, ErrUnreachable):
		return err.Error() + "; try again later"
	}
	return err.Error()
}

// IdempotencyOf says that the reading actions may run twice and append
// may not: Notion takes no idempotency key for it, and a second append
// would add the blocks again.
func (q *query) IdempotencyOf(raw json.RawMessage) tool.Idempotency {
	var in struct {
		Action string `json:"action"`
	}
	if json.Unmarshal(raw, &in) == nil && in.Action != "append" {
		return tool.IdempotencyIdempotent
	}
	return tool.IdempotencyUnsafe
}
