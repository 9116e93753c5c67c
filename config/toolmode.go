package config

import (
	"slices"

	"github.com/choirhq/choir/strictjson"
)

// ToolModes are the values of agents.<id>.tool_mode. Without one, an
// agent's lanes are offered tools in direct mode when the full schemas fit
// in 20% of the model's context_window, in compact mode (names and one-line
// descriptions) when those fit, and in discovery mode (choir.tools.search,
// describe, categories, load) otherwise.
var ToolModes = []string{"direct", "compact", "discovery"}

// toolMode checks agents.<id>.tool_mode.
func (v *validator) toolMode(p, mode string) {
	if mode == "" {
		return
	}
	v.oneOf(p, mode, ToolModes, "omitted (chosen from the model's context_window) or ")
}

// mcpSecrets checks agents.<id>.mcp_secrets: each names a secret of
// secrets.json, e.g. "mcp_secrets": ["github_mcp_token"].
func (v *validator) mcpSecrets(p string, names []string) {
	for i, n := range names {
		v.secret(strictjson.PathIndex(p, i), n, true)
	}
}

// MCPServer is an MCP server over HTTP as choird's egress gateway reaches
// it for the agent (issue 34): at URL, with Secret, one of the agent's
// mcp_secrets, as its bearer token. The agent's calls go to the
// gateway's route /svc/mcp/<name>/, never to a URL of its own choosing,
// and the secret never enters it.
type MCPServer struct {
	URL    string `json:"url"`
	Secret string `json:"secret"`
}

// mcpServers checks agents.<id>.mcp_servers.
func (v *validator) mcpServers(p string, servers map[string]MCPServer, mcpSecrets []string) {
	for name, s := range servers {
		sp := sub(p, name)
		v.name(sp, "MCP server", name)
		v.endpoint(sub(sp, "url"), s.URL)
		if v.required(sub(sp, "secret"), s.Secret) && !slices.Contains(mcpSecrets, s.Secret) {
			v.add(sub(sp, "secret"), "secret %q is not one of the agent's mcp_secrets: add it there", s.Secret)
		}
	}
}

// memoryReaders checks agents.<id>.memory_readable_by: each names another
// configured agent, once.
func (v *validator) memoryReaders(p, self string, ids []string) {
	seen := map[string]bool{}
	for i, id := range ids {
		ip := strictjson.PathIndex(p, i)
		switch _, ok := v.c.Agents[id]; {
		case id == self:
			v.add(ip, "%q is this agent, which always reads its own memory: remove it", id)
		case !ok:
			v.add(ip, "agent %q is not in agents: name a configured agent", id)
		case seen[id]:
			v.add(ip, "agent %q is named twice", id)
		}
		seen[id] = true
	}
}
