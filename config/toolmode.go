package config

import "github.com/choirhq/choir/strictjson"

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
