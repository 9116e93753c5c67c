// Package svc is the egress gateway's service routes (issue 34): the
// agent calls /svc/<service>/<name>/<path> on the gateway instead of a
// provider, and choird forwards the call to the endpoint config.json
// names for that model, search provider, TTS provider, Notion
// integration or MCP server over HTTP (agents.<id>.mcp_servers), adding
// the key from secrets.json: the key never enters the container. Only the
// named resource's own endpoint is reachable (the path picks a resource by
// name, never a host), only the resources the caller's session is bound
// to, and only the API paths of each service (below an MCP server's URL,
// any path that does not climb out of it).
// The git route (/svc/git/, [GitPrefix]) is the same for git's
// smart-HTTP requests: the identity's token is added for the identity the
// session is bound to, its hosts and its repositories only.
//
// Metered calls (model calls, search queries, speech) are reserved at
// their worst case in the spend ledger (daemon/spend) before they are
// forwarded, refused with 402 and a message naming the cap when they do
// not fit, and settled from the provider's answer. Answers pass through
// unbuffered, an event stream flushed chunk by chunk, so that a streamed
// model call keeps its time to first token.
//
// The agent labels a metered call with request headers that never reach
// the provider (rpc/egress names them): Choir-Spend-Key (the key its own record of the call
// carries as spend_key, so the usage views count the call once),
// Choir-Lane, Choir-Job and Choir-Purpose (attribution in the reports).
package svc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/egress"
	"github.com/choirhq/choir/daemon/spend"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/sql/seam"
)

// Prefix is the path prefix of the service routes.
const Prefix = "/svc/"

// maxRequestBytes bounds a metered request's body, which is read whole
// to estimate its worst case.
const maxRequestBytes = 64 << 20

// Options configure a Handler.
type Options struct {
	// Pool reads the caller's session (its bindings and overrides).
	Pool *pgxpool.Pool
	// Config returns the running config.json and secrets.json.
	Config func() (*config.Config, config.Secrets)
	// Ledger reserves and settles metered calls; required.
	Ledger *spend.Ledger
	// Transport sends the forwarded requests; nil is a clone of
	// http.DefaultTransport without proxy settings from the environment.
	Transport http.RoundTripper
	Logger    *slog.Logger
}

// Handler serves the service routes. It is safe for concurrent use.
type Handler struct {
	pool   *pgxpool.Pool
	config func() (*config.Config, config.Secrets)
	ledger *spend.Ledger
	logger *slog.Logger
	proxy  *httputil.ReverseProxy
	// gitProxy forwards the git route's requests (git.go).
	gitProxy *httputil.ReverseProxy
	// settling counts settlements in flight (Wait).
	settling sync.WaitGroup
	settler  *settler

	mu       sync.Mutex
	bindings map[uuid.UUID]boundEntry
}

// New returns a Handler.
func New(o Options) *Handler {
	h := &Handler{pool: o.Pool, config: o.Config, ledger: o.Ledger, logger: o.Logger, bindings: map[uuid.UUID]boundEntry{}}
	if h.logger == nil {
		h.logger = slog.New(slog.DiscardHandler)
	}
	h.settler = &settler{ledger: h.ledger, logger: h.logger, doneFunc: func(n int) { h.settling.Add(-n) }}
	tr := o.Transport
	if tr == nil {
		t := http.DefaultTransport.(*http.Transport).Clone()
		t.Proxy = nil
		tr = t
	}
	h.proxy = &httputil.ReverseProxy{
		Rewrite:        rewrite,
		Transport:      tr,
		FlushInterval:  -1, // every write goes out at once: a stream keeps its time to first token
		ModifyResponse: h.meterResponse,
		ErrorHandler:   h.upstreamError,
		ErrorLog:       slog.NewLogLogger(h.logger.Handler(), slog.LevelWarn),
	}
	h.gitProxy = h.newGitProxy(tr)
	return h
}

// Wait waits for the settlements of the calls answered so far: a call is
// settled after its answer went to the agent, so that the ledger's write
// adds nothing to its latency.
func (h *Handler) Wait() { h.settling.Wait() }

// route is one forwarded call, carried in its request's context from
// ServeHTTP to the proxy's hooks.
type route struct {
	svc     *service
	cfg     *config.Config
	name    string
	session uuid.UUID
	target  *url.URL
	key     string
	// meter is nil for a call that is not metered.
	meter *metered
}

type routeKey struct{}

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	caller, ok := egress.CallerFrom(r.Context())
	if !ok {
		writeError(w, http.StatusForbidden, "no_caller", "the gateway knows no session for this connection")
		return
	}
	if strings.HasPrefix(r.URL.EscapedPath(), GitPrefix) {
		h.serveGit(w, r, caller)
		return
	}
	rt, status, code, err := h.resolve(r, caller)
	if err != nil {
		writeError(w, status, code, err.Error())
		return
	}
	if rt.svc.meter != nil {
		m, status, code, err := h.reserve(r, caller, rt)
		if err != nil {
			var capErr *spend.CapError
			if errors.As(err, &capErr) {
				writeCapError(w, capErr)
				return
			}
			writeError(w, status, code, err.Error())
			return
		}
		rt.meter = m
	}
	if rt.meter != nil {
		// Settled by the proxy's hooks; if the answer never reached them,
		// what was spent is unknown.
		defer rt.meter.settle(h, rt.meter.res.WorstCase())
	}
	ctx, cancel := context.WithTimeout(context.WithValue(r.Context(), routeKey{}, rt), h.ledger.CallTimeout())
	defer cancel()
	h.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// resolve finds the route of r: the service, the resource, whether the
// caller may use it, the path and the key.
func (h *Handler) resolve(r *http.Request, caller egress.Caller) (*route, int, string, error) {
	svcName, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.EscapedPath(), Prefix), "/")
	name, rest, _ := strings.Cut(rest, "/")
	s, ok := services[svcName]
	if !strings.HasPrefix(r.URL.EscapedPath(), Prefix) || !ok {
		return nil, http.StatusNotFound, "no_route", fmt.Errorf("no service route %s: the routes are %s<llm|search|tts|notion|mcp|git>/<name>/<path>",
			r.URL.Path, Prefix)
	}
	if err := s.checkPath(r.Method, rest); err != nil {
		return nil, http.StatusNotFound, "no_route", fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, err)
	}
	cfg, secrets := h.config()
	base, secret, ok := s.resource(cfg, caller.AgentID, name)
	if !ok {
		return nil, http.StatusNotFound, "unknown_resource", fmt.Errorf("no %s %q in config.json", s.noun, name)
	}
	sid, err := uuid.Parse(caller.SessionID)
	if err != nil {
		return nil, http.StatusForbidden, "no_caller", fmt.Errorf("caller session %q is no session id", caller.SessionID)
	}
	b, fresh, err := h.bound(r.Context(), cfg, sid, false)
	if err == nil && !fresh && !s.allowed(cfg, caller.AgentID, b, name) {
		// Bound a moment ago (a model override)? Read the session again
		// before refusing.
		b, _, err = h.bound(r.Context(), cfg, sid, true)
	}
	if err != nil {
		h.logger.WarnContext(r.Context(), "service route: session not read", slog.String("session_id", caller.SessionID),
			slog.String("error", err.Error()))
		return nil, http.StatusForbidden, "not_bound", fmt.Errorf("session %s: not found", caller.SessionID)
	}
	if !s.allowed(cfg, caller.AgentID, b, name) {
		return nil, http.StatusForbidden, "not_bound", fmt.Errorf("%s %q is not bound to agent %s's session", s.noun, name, caller.AgentID)
	}
	target, err := s.target(base, rest, r.URL.RawQuery)
	if err != nil {
		return nil, http.StatusBadGateway, "bad_endpoint", fmt.Errorf("%s %q: endpoint: %w", s.noun, name, err)
	}
	rt := &route{svc: s, cfg: cfg, name: name, session: sid, target: target}
	if secret != "" {
		key, ok := secrets[secret]
		if !ok {
			return nil, http.StatusServiceUnavailable, "no_secret", fmt.Errorf("%s %q: secret %s is not in secrets.json: "+
				"an admin sets it with choirctl secret set %s, then choirctl secret apply", s.noun, name, secret, secret)
		}
		rt.key = key
	}
	return rt, 0, "", nil
}

// binding is what the caller's session may use besides the search
// providers, which every agent may use.
type binding struct {
	models     []string
	tts        []string
	notion     string
	git        string
	mcpSecrets []string
}

// BindingMaxAge is how long a session's bindings are taken from memory:
// a resource unbound from a session (an override replaced) stays
// reachable that long at most. A resource not bound by what is in
// memory is looked up again at once.
const BindingMaxAge = 2 * time.Second

type boundEntry struct {
	b  binding
	at time.Time
}

// bound reads the caller's session: the resources bound at its start and
// its model and voice overrides, as GET_SECRETS judges them. It answers
// from memory what it read less than BindingMaxAge ago unless reread;
// fresh says it read the database.
func (h *Handler) bound(ctx context.Context, cfg *config.Config, sid uuid.UUID, reread bool) (b binding, fresh bool, err error) {
	now := time.Now()
	h.mu.Lock()
	e, ok := h.bindings[sid]
	h.mu.Unlock()
	if ok && !reread && now.Sub(e.at) < BindingMaxAge {
		return e.b, false, nil
	}
	b, err = h.readBinding(ctx, cfg, sid)
	if err != nil {
		return binding{}, true, err
	}
	h.mu.Lock()
	if len(h.bindings) > maxBindings {
		clear(h.bindings)
	}
	h.bindings[sid] = boundEntry{b: b, at: now}
	h.mu.Unlock()
	return b, true, nil
}

// maxBindings bounds the sessions whose bindings are kept in memory.
const maxBindings = 4096

func (h *Handler) readBinding(ctx context.Context, cfg *config.Config, sid uuid.UUID) (binding, error) {
	st, err := seam.Queries(h.pool).SessionDynamicState(ctx, sid)
	if err != nil {
		return binding{}, err
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(st.ResourceBindings, &b); err != nil {
		return binding{}, fmt.Errorf("session %s bindings: %w", sid, err)
	}
	out := binding{notion: b.Notion, git: b.GitIdentity, mcpSecrets: b.MCPSecrets}
	for _, m := range b.Models {
		out.models = append(out.models, m)
	}
	if st.LlmOverride != "" {
		out.models = append(out.models, st.LlmOverride)
	}
	for _, vp := range []string{b.VoiceProfile, st.VoiceProfileOverride} {
		if p, ok := cfg.VoiceProfiles[vp]; ok && vp != "" {
			out.tts = append(out.tts, p.TTS)
		}
	}
	return out, nil
}

// rewrite makes the forwarded request: the resource's endpoint, the
// caller's headers without its credentials and labels, and the key.
func rewrite(pr *httputil.ProxyRequest) {
	rt := pr.In.Context().Value(routeKey{}).(*route)
	pr.Out.URL = rt.target
	pr.Out.Host = ""
	for name := range pr.Out.Header {
		if strings.HasPrefix(name, "Choir-") {
			pr.Out.Header.Del(name)
		}
	}
	for _, name := range []string{"Authorization", "Proxy-Authorization", "Cookie", "X-Subscription-Token", "Xi-Api-Key",
		// The transport asks for gzip itself and unpacks the answer, so
		// that the meter reads usage from plain text.
		"Accept-Encoding"} {
		pr.Out.Header.Del(name)
	}
	rt.svc.credential(pr.Out.Header, rt.key)
}

// writeError answers as OpenAI-compatible APIs do, so that the agent's
// model client shows the message.
func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": "choir_gateway", "code": code}})
}

// writeCapError refuses a call over a cap with 402 (not 429, which the
// agent's client would retry): the message says which cap and how to
// raise it, and "cap" says it to a program.
func writeCapError(w http.ResponseWriter, e *spend.CapError) {
	scope := "agent"
	if e.Host {
		scope = "host"
	}
	writeJSON(w, http.StatusPaymentRequired, map[string]any{"error": map[string]any{
		"message": e.Error(), "type": "choir_gateway", "code": "usage_cap",
		"cap": map[string]any{"scope": scope, "field": e.Field, "config_key": e.ConfigKey(), "limit": e.Limit,
			"spent": e.Spent, "call": e.Want, "money": e.Money, "day": e.Day, "time_zone": e.TimeZone, "agent_id": e.AgentID},
	}})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v) //nolint:errcheck // the caller went away
}
