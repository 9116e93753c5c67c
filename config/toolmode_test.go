package config_test

import (
	"testing"

	"github.com/choirhq/choir/config"
)

// TestValidateToolModeAndMCPSecrets checks agents.<id>.tool_mode and
// mcp_secrets: a known mode and secrets of secrets.json pass; anything
// else is refused at its path, saying what to use.
func TestValidateToolModeAndMCPSecrets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		mode    string
		secrets []string
		want    []string
	}{
		{"", nil, nil},
		{"discovery", nil, nil},
		{"lazy", nil, []string{`$.agents["agent-1"].tool_mode: "lazy" is not allowed: must be omitted (chosen from the model's context_window) or one of direct, compact, discovery`}},
		{"", []string{"nope"}, []string{`$.agents["agent-1"].mcp_secrets[0]: secret "nope" is not in secrets.json; set it with: choirctl secret set nope`}},
	} {
		c, s := specConfig(t), specSecrets()
		a := c.Agents["agent-1"]
		a.ToolMode, a.MCPSecrets = tc.mode, tc.secrets
		c.Agents["agent-1"] = a
		err := c.Validate(s)
		if tc.want == nil {
			if err != nil {
				t.Errorf("tool_mode %q: %v", tc.mode, err)
			}
			continue
		}
		checkProblems(t, problems(t, err), tc.want)
	}
}

// TestValidateMemoryReadableBy checks agents.<id>.memory_readable_by:
// other configured agents pass; the agent itself, an unknown agent and a
// repeat are refused at their path.
func TestValidateMemoryReadableBy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		readers []string
		want    []string
	}{
		{nil, nil},
		{[]string{"agent-2"}, nil},
		{[]string{"agent-1"}, []string{`$.agents["agent-1"].memory_readable_by[0]: "agent-1" is this agent, which always reads its own memory: remove it`}},
		{[]string{"ghost"}, []string{`$.agents["agent-1"].memory_readable_by[0]: agent "ghost" is not in agents: name a configured agent`}},
		{[]string{"agent-2", "agent-2"}, []string{`$.agents["agent-1"].memory_readable_by[1]: agent "agent-2" is named twice`}},
	} {
		c, s := specConfig(t), specSecrets()
		if _, ok := c.Agents["agent-2"]; !ok {
			c.Agents["agent-2"] = c.Agents["agent-1"]
		}
		a := c.Agents["agent-1"]
		a.MemoryReadableBy = tc.readers
		c.Agents["agent-1"] = a
		err := c.Validate(s)
		if tc.want == nil {
			if err != nil {
				t.Errorf("memory_readable_by %v: %v", tc.readers, err)
			}
			continue
		}
		checkProblems(t, problems(t, err), tc.want)
	}
}

// TestValidateMCPServers checks agents.<id>.mcp_servers: a server with an
// http(s) URL and one of the agent's mcp_secrets passes; a secret outside
// mcp_secrets, a URL that is none and a bad name are refused at their
// path.
func TestValidateMCPServers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		server config.MCPServer
		want   []string
	}{
		{"pay", config.MCPServer{URL: "https://mcp.example/pay", Secret: "git-dev-token"}, nil},
		{"pay", config.MCPServer{URL: "https://mcp.example/pay", Secret: "brave-api-key"},
			[]string{`$.agents["agent-1"].mcp_servers.pay.secret: secret "brave-api-key" is not one of the agent's mcp_secrets: add it there`}},
		{"pay", config.MCPServer{URL: "ftp://mcp.example", Secret: "git-dev-token"},
			[]string{`$.agents["agent-1"].mcp_servers.pay.url: must be an http or https URL`}},
		{"Pay!", config.MCPServer{URL: "https://mcp.example/pay", Secret: "git-dev-token"},
			[]string{`$.agents["agent-1"].mcp_servers["Pay!"]: MCP server name must match ^[a-z][a-z0-9_-]{0,39}$`}},
	} {
		c, s := specConfig(t), specSecrets()
		a := c.Agents["agent-1"]
		a.MCPSecrets = []string{"git-dev-token"}
		a.MCPServers = map[string]config.MCPServer{tc.name: tc.server}
		c.Agents["agent-1"] = a
		err := c.Validate(s)
		if tc.want == nil {
			if err != nil {
				t.Errorf("mcp_servers %s %+v: %v", tc.name, tc.server, err)
			}
			continue
		}
		checkProblems(t, problems(t, err), tc.want)
	}
}
