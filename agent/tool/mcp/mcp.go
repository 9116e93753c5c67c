// Package mcp connects an agent to the MCP servers declared in its repo
// (mcp.json), with the official Go SDK, and registers each server's tools
// as external tools with a runtime view, so that they go through the
// arbiter like every tool: allowlists, locks, approvals. A stdio server is
// a process the agent starts inside its container, with the environment
// choir.exec's commands get; a streamable-HTTP server is reached through
// the SSRF guard, with its secret (one of the agent's mcp_secrets, never
// another) as a bearer token sent to the server's own origin only; through
// choird's egress gateway, a server with a secret is reached at the
// gateway's service route, which adds the secret (Config.Gateway).
package mcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/url"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/manifest"
	"github.com/choirhq/choir/agent/tool/proc"
	"github.com/choirhq/choir/internal/netguard"
	"github.com/choirhq/choir/rpc/egress"
)

// StartError names a server that failed to start.
type StartError struct {
	Server string
	Err    error
}

func (e *StartError) Error() string { return fmt.Sprintf("MCP server %q: %v", e.Server, e.Err) }

func (e *StartError) Unwrap() error { return e.Err }

// Config is what Start needs besides the manifest.
type Config struct {
	// Workspace is a stdio server's working directory.
	Workspace string
	// SecretFunc looks up an HTTP server's secret.
	SecretFunc func(name string) (string, bool)
	// MCPSecrets are the only secrets a server may receive: the agent's
	// agents.<id>.mcp_secrets, as choird bound them to the session. A
	// server declaring any other secret (the model's key, the git token)
	// does not start.
	MCPSecrets []string
	// AllowHosts opens addresses the SSRF guard refuses otherwise
	// (web.allow_hosts): an HTTP server on loopback or the local network
	// is reached only when listed there.
	AllowHosts []string
	// DialFunc, when set, opens an HTTP server's connections (the agent's
	// way out through choird's egress gateway, which applies the same
	// guard after its own DNS); nil dials directly through the guard.
	DialFunc func(ctx context.Context, network, addr string) (net.Conn, error)
	// Gateway says DialFunc is choird's egress gateway, whose service
	// route /svc/mcp/<server> reaches an HTTP server that declares a
	// secret (issue 34): choird sends the calls to the URL
	// agents.<id>.mcp_servers.<server> names and adds the secret there,
	// so the agent holds no token.
	Gateway bool
	// Logger receives refusals; nil: slog.Default().
	Logger *slog.Logger
	// NoticeFunc is told when a server's tools become unavailable; nil:
	// not told.
	NoticeFunc func(server string, err error)
}

// Set is the running servers of an agent.
type Set struct {
	servers []*server
}

// Start connects to every server of m and lists its tools. A server that
// fails to start fails Start with a [*StartError] naming it, unless it is
// optional (then it is left out and reported in skipped). A tool whose
// schema or name is invalid fails Start naming the server and the tool.
func Start(ctx context.Context, m manifest.MCP, cfg Config) (set *Set, layer tool.Layer, skipped []error, err error) {
	set = &Set{}
	names := make([]string, 0, len(m.Servers))
	for n := range m.Servers {
		names = append(names, n)
	}
	sort.Strings(names)
	var errs []error
	for _, n := range names {
		srv := &server{name: n, decl: m.Servers[n], cfg: cfg}
		if err := srv.connect(ctx); err != nil {
			se := &StartError{Server: n, Err: err}
			if srv.decl.Optional {
				skipped = append(skipped, se)
				continue
			}
			set.Close()
			return nil, tool.Layer{}, skipped, se
		}
		set.servers = append(set.servers, srv)
		defs, err := srv.defs(ctx)
		if err != nil {
			errs = append(errs, &StartError{Server: n, Err: err})
			continue
		}
		layer.Defs = append(layer.Defs, defs...)
	}
	if err := errors.Join(errs...); err != nil {
		set.Close()
		return nil, tool.Layer{}, skipped, err
	}
	return set, layer, skipped, nil
}

// Close stops every server.
func (s *Set) Close() {
	if s == nil {
		return
	}
	for _, srv := range s.servers {
		srv.close()
	}
}

// bearer adds a bearer token to every request sent to the server's own
// origin (scheme, host and port), and to no other: a redirect to another
// host never carries it.
type bearer struct {
	token  string
	origin *url.URL
	base   http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if strings.EqualFold(r.URL.Scheme, b.origin.Scheme) && strings.EqualFold(r.URL.Host, b.origin.Host) {
		r.Header.Set("Authorization", "Bearer "+b.token)
	} else {
		r.Header.Del("Authorization")
	}
	return b.base.RoundTrip(r)
}

// transport makes a new transport to the server.
func (s *server) transport() (sdk.Transport, error) {
	if s.decl.Command != "" {
		// The server is a tool child like choir.exec's commands: the pass
		// list and the workspace, never the agent's own environment (its
		// socket, its lease).
		cmd := exec.Command(s.decl.Command, s.decl.Args...)
		cmd.Dir = s.cfg.Workspace
		extra := make([]string, 0, len(s.decl.Env))
		for _, k := range slices.Sorted(maps.Keys(s.decl.Env)) {
			extra = append(extra, k+"="+s.decl.Env[k])
		}
		cmd.Env = proc.ChildEnv(s.cfg.Workspace, extra...)
		return &sdk.CommandTransport{Command: cmd}, nil
	}
	return s.httpTransport()
}

// httpTransport reaches a streamable-HTTP server through the SSRF guard
// (web.allow_hosts opens a local one), with its secret, which must be one
// of mcp_secrets, as a bearer token sent to its own origin only; or, when
// it declares a secret and the agent has choird's egress gateway, at its
// service route, where choird adds the secret.
func (s *server) httpTransport() (sdk.Transport, error) {
	if s.decl.Secret != "" && s.cfg.Gateway {
		return s.serviceTransport()
	}
	guard, err := netguard.New(s.cfg.AllowHosts)
	if err != nil {
		return nil, fmt.Errorf("web.allow_hosts: %w", err)
	}
	origin, err := guard.CheckURL(s.decl.URL)
	if err != nil {
		s.logger().Warn("MCP server refused", slog.String("server", s.name), slog.String("url", s.decl.URL),
			slog.String("error", err.Error()))
		return nil, fmt.Errorf("url: %w", err)
	}
	tr := &http.Transport{DialContext: guard.DialContext(15 * time.Second), TLSHandshakeTimeout: 15 * time.Second,
		ForceAttemptHTTP2: true}
	if s.cfg.DialFunc != nil {
		tr.DialContext = s.cfg.DialFunc
	}
	hc := &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		_, err := guard.CheckURL(req.URL.String())
		return err
	}}
	if s.decl.Secret != "" {
		tok, err := s.secret()
		if err != nil {
			return nil, err
		}
		hc.Transport = bearer{token: tok, origin: origin, base: tr}
	}
	return &sdk.StreamableClientTransport{Endpoint: s.decl.URL, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}, nil
}

// serviceTransport reaches the server at its route on choird's egress
// gateway, with no token: choird checks the secret against mcp_secrets
// again, adds it, and sends the calls to the URL of its own config.
// No redirect is followed: the gateway's answer is the server's.
func (s *server) serviceTransport() (sdk.Transport, error) {
	if err := s.checkSecret(); err != nil {
		return nil, err
	}
	tr := &http.Transport{DialContext: s.cfg.DialFunc}
	hc := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return &sdk.StreamableClientTransport{Endpoint: egress.ServiceURL("mcp", s.name), HTTPClient: hc, MaxRetries: -1,
		DisableStandaloneSSE: true}, nil
}

// checkSecret checks that the server's declared secret is one of
// mcp_secrets.
func (s *server) checkSecret() error {
	name := s.decl.Secret
	if !slices.Contains(s.cfg.MCPSecrets, name) {
		s.logger().Warn("MCP server refused a secret outside mcp_secrets", slog.String("server", s.name),
			slog.String("secret", name), slog.Any("mcp_secrets", s.cfg.MCPSecrets))
		return fmt.Errorf("secret %q is not one of this agent's mcp_secrets (%s): an MCP server may receive only "+
			"those; an admin can add it to agents.<id>.mcp_secrets in config.json", name, strings.Join(s.cfg.MCPSecrets, ", "))
	}
	return nil
}

// secret is the server's declared secret, when it is one of mcp_secrets.
func (s *server) secret() (string, error) {
	name := s.decl.Secret
	if err := s.checkSecret(); err != nil {
		return "", err
	}
	tok, ok := "", false
	if s.cfg.SecretFunc != nil {
		tok, ok = s.cfg.SecretFunc(name)
	}
	if !ok {
		return "", fmt.Errorf("secret %q is not available to this agent: bind it in its configuration", name)
	}
	return tok, nil
}

func (s *server) logger() *slog.Logger {
	if s.cfg.Logger != nil {
		return s.cfg.Logger
	}
	return slog.Default()
}
