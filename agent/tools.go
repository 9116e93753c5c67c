package agent

import (
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/manifest"
	"github.com/choirhq/choir/agent/tool/mcp"
	"github.com/choirhq/choir/agent/tool/web"
	"github.com/choirhq/choir/rpc"
)

// loadTools starts the agent's MCP servers (mcp.json in its .choir
// directory) and builds the tool registry and the skills over the
// built-ins, the external tools and the servers' tools. A server that
// fails to start fails the session's start, naming it, unless it is
// optional; so does an MCP tool with an invalid schema or a built-in's
// name.
func (s *session) loadTools(ctx context.Context) error {
	opts := s.opts
	m, err := manifest.LoadMCP(opts.ChoirDir)
	if err != nil {
		return fmt.Errorf("load MCP servers: %w", err)
	}
	var allow []string
	if d := s.dyn.Load(); d != nil {
		allow = d.Web.AllowHosts
	}
	set, layer, skipped, err := mcp.Start(ctx, m, mcp.Config{Workspace: opts.Workspace, SecretFunc: s.secrets.get,
		MCPSecrets: s.hello.ResourceBindings.MCPSecrets, AllowHosts: allow, DialFunc: s.builtinDial("mcp"), Gateway: s.egress != nil, Logger: s.logger,
		NoticeFunc: s.mcpUnavailable})
	if err != nil {
		return fmt.Errorf("start MCP servers: %w", err)
	}
	for _, e := range skipped {
		s.logger.Warn("optional MCP server not started", slog.String("error", e.Error()))
	}
	s.mcp = set
	bcfg := builtin.Config{GlobalDir: filepath.Join(opts.ChoirDir, "tools", "global"),
		AgentDir: filepath.Join(opts.ChoirDir, "tools", "agent"), Layers: []tool.Layer{layer}, Tools: append(web.Tools(s.webTools()), s.emailTools()...)}
	s.serviceTools(&bcfg)
	reg, err := builtin.Build(bcfg)
	if err != nil {
		return fmt.Errorf("load tools: %w", err)
	}
	skills, err := skill.Load(skill.Config{GlobalDir: filepath.Join(opts.ChoirDir, "skills", "global"),
		AgentDir: filepath.Join(opts.ChoirDir, "skills", "agent"), KnownTool: reg.Has})
	if err != nil {
		return fmt.Errorf("load skills: %w", err)
	}
	s.tools, s.skills = reg, skills
	return nil
}

// mcpUnavailable tells the user directly that a server's tools are gone
// (the notice is no answer of a turn, so it needs no log), and the edge
// lane, at its next safe point, so that the model stops reaching for them.
func (s *session) mcpUnavailable(server string, err error) {
	s.logger.Warn("MCP server unavailable", slog.String("server", server), slog.String("error", err.Error()))
	if s.out != nil {
		id := lane.MessageID("mcp-unavailable", rpc.Hash(sha256.Sum256([]byte(s.opts.SessionID+"\x00"+server))))
		text := fmt.Sprintf("The tools of MCP server %s are unavailable for the rest of this session: it stopped twice (%v). "+
			"Restart the agent to try it again.", server, err)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			s.out.warn(ctx, id, text)
		}()
	}
	if s.edge == nil {
		return
	}
	s.edge.Inject(lane.Injection{Text: fmt.Sprintf("MCP server %s stopped twice and its tools are unavailable "+ //nolint:errcheck // no inbox row
		"for the rest of this session (%v). The user has been told.", server, err)})
}
