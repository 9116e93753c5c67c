package agentapi

import (
	"slices"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc"
)

// withoutMailSecret leaves the session's email account's secret out of
// names when choird's egress gateway carries the agents' mail (issue 34):
// choird sends and reads it with the password, which never enters the
// agent. A secret an MCP server of the agent is given (mcp_secrets) stays.
func (a *API) withoutMailSecret(cfg *config.Config, b rpc.ResourceBindings, names []string) []string {
	secret := cfg.EmailAccounts[b.Email].Secret
	if !a.mailViaGateway || b.Email == "" || secret == "" || slices.Contains(b.MCPSecrets, secret) {
		return names
	}
	return slices.DeleteFunc(names, func(n string) bool { return n == secret })
}
