package mcp

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/manifest"
)

// server is one connected MCP server.
type server struct {
	name string
	decl manifest.MCPServer
	cfg  Config

	mu          sync.Mutex
	cs          *sdk.ClientSession
	restarted   bool
	unavailable error
}

// connect starts or reaches the server and initialises a session.
func (s *server) connect(ctx context.Context) error {
	t, err := s.transport()
	if err != nil {
		return err
	}
	c := sdk.NewClient(&sdk.Implementation{Name: "choir-agent", Version: "1"}, nil)
	cs, err := c.Connect(ctx, t, nil)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	s.mu.Lock()
	s.cs = cs
	s.mu.Unlock()
	return nil
}

func (s *server) close() {
	s.mu.Lock()
	cs := s.cs
	s.cs = nil
	s.mu.Unlock()
	if cs != nil {
		cs.Close() //nolint:errcheck // stopping
	}
}

var badChars = regexp.MustCompile(`[^a-z0-9_.]+`)

// toolName is the registry name of the server's MCP tool: the server's
// name, a dot, and the tool's name lowercased with other characters
// replaced by "_".
func (s *server) toolName(mcpName string) string {
	n := badChars.ReplaceAllString(strings.ToLower(mcpName), "_")
	for strings.Contains(n, "__") {
		n = strings.ReplaceAll(n, "__", "_")
	}
	return s.name + "." + strings.Trim(n, "_.")
}

// defs lists the server's tools as registry definitions.
func (s *server) defs(ctx context.Context) ([]*tool.Def, error) {
	s.mu.Lock()
	cs := s.cs
	s.mu.Unlock()
	var out []*tool.Def
	var errs []error
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		def, err := s.def(t)
		if err != nil {
			errs = append(errs, fmt.Errorf("tool %q: %w", t.Name, err))
			continue
		}
		out = append(out, def)
	}
	return out, errors.Join(errs...)
}

// def makes the registry definition of one MCP tool with its runtime view.
func (s *server) def(t *sdk.Tool) (*tool.Def, error) {
	params, err := json.Marshal(t.InputSchema)
	if err != nil {
		return nil, fmt.Errorf("input schema: %w", err)
	}
	view := s.decl.Tools[t.Name]
	rt := tool.Runtime{TimeoutMS: s.decl.TimeoutMS, Version: "mcp", Approval: s.decl.Approval || view.Approval,
		Locks: view.Locks, SideEffect: view.SideEffect, Network: s.decl.URL != "",
		// An MCP server's answers are its words, not the agent's (issue 30).
		Trust: tool.TrustUntrusted, Source: "mcp:" + s.name}
	if rt.TimeoutMS <= 0 {
		rt.TimeoutMS = 60_000
	}
	stdio := s.decl.Command != ""
	if rt.Locks == nil && stdio {
		rt.Locks = []tool.LockTemplate{{Resource: "workspace", Mode: tool.ModeExclusive}}
	}
	if rt.SideEffect == "" {
		switch {
		case t.Annotations != nil && t.Annotations.ReadOnlyHint:
			rt.SideEffect = tool.SideEffectRead
		case stdio:
			rt.SideEffect = tool.SideEffectWrite
		default:
			rt.SideEffect = tool.SideEffectExternal
		}
	}
	if t.Annotations != nil {
		rt.Idempotent = t.Annotations.IdempotentHint
	}
	keyed := false
	if stripped, ok := withoutKeyParam(params); ok {
		// The tool takes an idempotency key: the arbiter's key is given
		// for it, the same when the call runs again after a restart, and
		// the model never sees the parameter.
		params, keyed, rt.Idempotency = stripped, true, tool.IdempotencyKeyed
	}
	desc := t.Description
	if desc == "" {
		desc = t.Title
	}
	name := s.toolName(t.Name)
	spec := tool.Spec{LLM: tool.LLMView{Name: name, Description: desc, Parameters: params}, Runtime: rt}
	return tool.NewDef(spec, &executor{srv: s, mcpName: t.Name, spec: spec, keyed: keyed}, tool.OriginAgent, "mcp:"+s.name+"/"+t.Name)
}

// executor runs one MCP tool.
//
// keyed says the tool takes the call's idempotency key in its
// idempotency_key argument (keyParam).
type executor struct {
	srv     *server
	mcpName string
	spec    tool.Spec
	keyed   bool
}

func (e *executor) Spec() tool.Spec { return e.spec.Clone() }

// Available reports whether the tool's server is still usable; the
// registry stops offering the tools of a server that died twice.
func (e *executor) Available() bool {
	e.srv.mu.Lock()
	defer e.srv.mu.Unlock()
	return e.srv.unavailable == nil
}

// Execute calls the tool. A server that dies during the call is a
// structured error for the model and is restarted once; dying again
// makes its tools unavailable for the rest of the session, and the user
// is told.
func (e *executor) Execute(ctx context.Context, _ tool.Env, input json.RawMessage) (tool.Result, error) {
	s := e.srv
	s.mu.Lock()
	cs, gone := s.cs, s.unavailable
	s.mu.Unlock()
	if gone != nil {
		return unavailable(s.name, gone), nil
	}
	if e.keyed {
		input = withKey(input, tool.CallKey(ctx))
	}
	res, err := cs.CallTool(ctx, &sdk.CallToolParams{Name: e.mcpName, Arguments: input})
	if err == nil {
		return result(res), nil
	}
	if ctx.Err() != nil {
		return tool.Result{}, err
	}
	var wire *jsonrpc.Error
	if errors.As(err, &wire) {
		// The server answered: it is alive, the call failed.
		return tool.ErrorResult("MCP server %s: %s", s.name, wire.Message), nil
	}
	return s.died(ctx, err), nil
}

// died handles a server that stopped during a call.
func (s *server) died(ctx context.Context, cause error) tool.Result {
	s.mu.Lock()
	first := !s.restarted
	s.restarted = true
	s.mu.Unlock()
	if first {
		s.close()
		if err := s.connect(context.WithoutCancel(ctx)); err == nil {
			b, _ := json.Marshal(map[string]any{"error": "mcp_server_restarted", "server": s.name,
				"message": fmt.Sprintf("MCP server %s stopped during the call (%v) and was restarted; "+
					"the call may or may not have taken effect: check, then call again if needed", s.name, cause)})
			return tool.Result{Status: tool.StatusError, Summary: "MCP server " + s.name + " restarted", Output: b}
		} else {
			cause = fmt.Errorf("%v; restart failed: %w", cause, err)
		}
	}
	s.close()
	s.mu.Lock()
	s.unavailable = cause
	s.mu.Unlock()
	if s.cfg.NoticeFunc != nil {
		s.cfg.NoticeFunc(s.name, cause)
	}
	return unavailable(s.name, cause)
}

func unavailable(server string, cause error) tool.Result {
	b, _ := json.Marshal(map[string]any{"error": "mcp_server_unavailable", "server": server,
		"message": fmt.Sprintf("MCP server %s stopped again (%v); its tools are unavailable for the rest of this session. "+
			"Tell the user.", server, cause)})
	return tool.Result{Status: tool.StatusError, Summary: "MCP server " + server + " unavailable", Output: b}
}

// result turns an MCP result into a tool result: the text content, and
// the structured content when there is some.
func result(r *sdk.CallToolResult) tool.Result {
	var text []string
	for _, c := range r.Content {
		if t, ok := c.(*sdk.TextContent); ok {
			text = append(text, t.Text)
		}
	}
	out := map[string]any{"text": strings.Join(text, "\n")}
	if r.StructuredContent != nil {
		out["structured"] = r.StructuredContent
	}
	b, _ := json.Marshal(out)
	status, summary := tool.StatusSuccess, "ok"
	if r.IsError {
		status, summary = tool.StatusError, "the MCP tool reported an error"
	}
	if len(text) > 0 {
		summary = text[0]
		if len(summary) > 200 {
			summary = summary[:200]
		}
	}
	return tool.Result{Status: status, Summary: summary, Output: b}
}
