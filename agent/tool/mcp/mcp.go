// Package mcp connects an agent to the MCP servers declared in its repo
// (mcp.json), with the official Go SDK, and registers each server's tools
// as external tools with a runtime view, so that they go through the
// arbiter like every tool: allowlists, locks, approvals. A stdio server is
// a process the agent starts inside its container; a streamable-HTTP
// server is reached with its secret as a bearer token.
package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/choirhq/choir/agent/tool"
)

// FileName is the agent's MCP manifest, in its .choir directory.
const FileName = "mcp.json"

// Manifest declares an agent's MCP servers.
type Manifest struct {
	Servers map[string]Server `json:"servers"`
}

// Server declares one MCP server: Command (stdio) or URL (streamable
// HTTP), never both.
type Server struct {
	// Command and Args start a stdio server, in the workspace.
	Command string            `json:"command,omitempty"`
	Args    []string          `json:"args,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// URL is a streamable-HTTP server's endpoint; Secret names the secret
	// sent as its bearer token.
	URL    string `json:"url,omitempty"`
	Secret string `json:"secret,omitempty"`
	// Optional lets the agent start without the server if it fails to.
	Optional bool `json:"optional,omitempty"`
	// TimeoutMS bounds one call (default 60000).
	TimeoutMS int `json:"timeout_ms,omitempty"`
	// Approval requires a person's approval of every call of every tool.
	Approval bool `json:"approval,omitempty"`
	// Tools override the runtime view of single tools, by MCP name.
	Tools map[string]ToolView `json:"tools,omitempty"`
}

// ToolView is the runtime view a manifest gives one MCP tool; unset fields
// keep the defaults: locks workspace:X for a stdio server and none for an
// HTTP one; side effect read for a tool its server annotates read-only,
// else write (stdio) or external (HTTP); no approval.
type ToolView struct {
	Locks      []tool.LockTemplate `json:"locks,omitempty"`
	SideEffect tool.SideEffect     `json:"side_effect,omitempty"`
	Approval   bool                `json:"approval,omitempty"`
}

// StartError names a server that failed to start.
type StartError struct {
	Server string
	Err    error
}

func (e *StartError) Error() string { return fmt.Sprintf("MCP server %q: %v", e.Server, e.Err) }

func (e *StartError) Unwrap() error { return e.Err }

// Load reads dir's mcp.json; a missing file declares no servers.
func Load(dir string) (Manifest, error) {
	var m Manifest
	b, err := os.ReadFile(dir + "/" + FileName)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("read %s: %w", FileName, err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%s: %w (want {\"servers\": {\"<name>\": {\"command\": \"...\"} or {\"url\": \"...\", \"secret\": \"...\"}}})", FileName, err)
	}
	for name, s := range m.Servers {
		if !serverName.MatchString(name) {
			return m, fmt.Errorf("%s: servers.%s: want a lowercase name like files ([a-z][a-z0-9_]*)", FileName, name)
		}
		if (s.Command == "") == (s.URL == "") {
			return m, fmt.Errorf("%s: servers.%s: give command (stdio) or url (streamable HTTP), not both or neither", FileName, name)
		}
	}
	return m, nil
}

var serverName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// Config is what Start needs besides the manifest.
type Config struct {
	// Workspace is a stdio server's working directory.
	Workspace string
	// SecretFunc looks up an HTTP server's secret.
	SecretFunc func(name string) (string, bool)
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
func Start(ctx context.Context, m Manifest, cfg Config) (set *Set, layer tool.Layer, skipped []error, err error) {
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

// bearer adds a bearer token to every request.
type bearer struct {
	token string
	base  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.base.RoundTrip(r)
}

// transport makes a new transport to the server.
func (s *server) transport() (sdk.Transport, error) {
	if s.decl.Command != "" {
		cmd := exec.Command(s.decl.Command, s.decl.Args...)
		cmd.Dir = s.cfg.Workspace
		cmd.Env = os.Environ()
		for k, v := range s.decl.Env {
			cmd.Env = append(cmd.Env, k+"="+v)
		}
		return &sdk.CommandTransport{Command: cmd}, nil
	}
	hc := &http.Client{}
	if s.decl.Secret != "" {
		tok, ok := "", false
		if s.cfg.SecretFunc != nil {
			tok, ok = s.cfg.SecretFunc(s.decl.Secret)
		}
		if !ok {
			return nil, fmt.Errorf("secret %q is not available to this agent: bind it in its configuration", s.decl.Secret)
		}
		hc.Transport = bearer{token: tok, base: http.DefaultTransport}
	}
	return &sdk.StreamableClientTransport{Endpoint: s.decl.URL, HTTPClient: hc, MaxRetries: -1, DisableStandaloneSSE: true}, nil
}
