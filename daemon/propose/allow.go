package propose

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrKeyNotAllowed reports a config change that touches a key an agent
// may not propose: anything but its own entry's allowed settings.
var ErrKeyNotAllowed = errors.New("a config change may touch only the proposing agent's own settings")

// The settings an agent may propose to change in its own entry,
// agents.<self>: its budgets (any of them), how its models are offered
// tools, and which configured models and voice it uses. Everything else
// (DMs, workspaces, gateways, web, secrets, MCP secrets, memory sharing,
// its repo, the resources it is bound to, whether its schedules need
// approval, and every other agent) is an operator's to change.
var (
	agentKeysAllowed    = []string{"budgets", "defaults", "tool_mode"}
	defaultsKeysAllowed = []string{"core_llm", "llm", "voice_profile"}
)

// AllowedConfigKeys is the list of what an agent may propose, as the
// refusal and the README name it.
func AllowedConfigKeys(agentID string) string {
	return fmt.Sprintf("agents.%[1]s.budgets, agents.%[1]s.tool_mode, agents.%[1]s.defaults.llm, agents.%[1]s.defaults.core_llm and agents.%[1]s.defaults.voice_profile", agentID)
}

// checkPatchKeys refuses a merge patch that reaches beyond the agent's
// allowed settings, naming the first key that does, before anyone is
// asked.
func checkPatchKeys(agentID string, patch json.RawMessage) error {
	refuse := func(path string) error {
		return fmt.Errorf("%w: %s is not one of them; an agent may change only %s. Ask an operator to change %s",
			ErrKeyNotAllowed, path, AllowedConfigKeys(agentID), path)
	}
	top, err := objectKeys(patch)
	if err != nil {
		return fmt.Errorf("patch: %w", err)
	}
	for k := range top {
		if k != "agents" {
			return refuse(k)
		}
	}
	agents, err := objectKeys(top["agents"])
	if err != nil {
		return refuse("agents")
	}
	for id := range agents {
		if id != agentID {
			return refuse("agents." + id)
		}
	}
	self, err := objectKeys(agents[agentID])
	if err != nil {
		return refuse("agents." + agentID)
	}
	for k, v := range self {
		path := "agents." + agentID + "." + k
		if !slices.Contains(agentKeysAllowed, k) {
			return refuse(path)
		}
		if k != "defaults" {
			continue
		}
		defaults, err := objectKeys(v)
		if err != nil {
			return refuse(path)
		}
		for d := range defaults {
			if !slices.Contains(defaultsKeysAllowed, d) {
				return refuse(path + "." + d)
			}
		}
	}
	return nil
}

// objectKeys decodes a JSON object's members; null, or anything but an
// object, is an error (a merge patch's null removes the whole entry).
func objectKeys(raw json.RawMessage) (map[string]json.RawMessage, error) {
	if strings.TrimSpace(string(raw)) == "null" {
		return nil, errors.New("null would remove it")
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil || m == nil {
		return nil, errors.New("must be a JSON object")
	}
	return m, nil
}
