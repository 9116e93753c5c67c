package manifest

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"

	"github.com/choirhq/choir/agent/tool"
)

// MCPFileName is the agent's MCP manifest, in its .choir directory.
const MCPFileName = "mcp.json"

// MCP declares an agent's MCP servers (mcp.json).
type MCP struct {
	Servers map[string]MCPServer `json:"servers"`
}

// MCPServer declares one MCP server: Command (stdio) or URL (streamable
// HTTP), never both.
type MCPServer struct {
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
	Tools map[string]MCPToolView `json:"tools,omitempty"`
}

// MCPToolView is the runtime view a manifest gives one MCP tool; unset fields
// keep the defaults: locks workspace:X for a stdio server and none for an
// HTTP one; side effect read for a tool its server annotates read-only,
// else write (stdio) or external (HTTP); no approval.
type MCPToolView struct {
	Locks      []tool.LockTemplate `json:"locks,omitempty"`
	SideEffect tool.SideEffect     `json:"side_effect,omitempty"`
	Approval   bool                `json:"approval,omitempty"`
}

// LoadMCP reads dir's mcp.json; a missing file declares no servers.
func LoadMCP(dir string) (MCP, error) {
	var m MCP
	b, err := os.ReadFile(dir + "/" + MCPFileName)
	if errors.Is(err, fs.ErrNotExist) {
		return m, nil
	}
	if err != nil {
		return m, fmt.Errorf("read %s: %w", MCPFileName, err)
	}
	dec := json.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return m, fmt.Errorf("%s: %w (want {\"servers\": {\"<name>\": {\"command\": \"...\"} or {\"url\": \"...\", \"secret\": \"...\"}}})", MCPFileName, err)
	}
	for name, s := range m.Servers {
		if !serverName.MatchString(name) {
			return m, fmt.Errorf("%s: servers.%s: want a lowercase name like files ([a-z][a-z0-9_]*)", MCPFileName, name)
		}
		if (s.Command == "") == (s.URL == "") {
			return m, fmt.Errorf("%s: servers.%s: give command (stdio) or url (streamable HTTP), not both or neither", MCPFileName, name)
		}
	}
	return m, nil
}

var serverName = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
