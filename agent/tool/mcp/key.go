package mcp

import (
	"encoding/json"
	"slices"

	"github.com/choirhq/choir/agent/tool"
)

// keyParam is the argument in which an MCP tool that accepts an
// idempotency key takes it (issue 31): a tool whose input schema has a
// top-level string property of this name is keyed, and a second call with
// the same key must be a no-op on the server's side.
const keyParam = "idempotency_key"

// withoutKeyParam returns the schema without keyParam (and without it in
// required) when the schema has it as a string property.
func withoutKeyParam(schema json.RawMessage) (json.RawMessage, bool) {
	var s map[string]any
	if json.Unmarshal(schema, &s) != nil {
		return schema, false
	}
	props, _ := s["properties"].(map[string]any)
	p, _ := props[keyParam].(map[string]any)
	if p == nil || p["type"] != "string" {
		return schema, false
	}
	delete(props, keyParam)
	if req, ok := s["required"].([]any); ok {
		s["required"] = slices.DeleteFunc(req, func(v any) bool { return v == keyParam })
	}
	out, err := json.Marshal(s)
	if err != nil {
		return schema, false
	}
	return out, true
}

// withKey sets keyParam in the call's arguments to key, replacing whatever
// the model wrote there; a call run outside the arbiter (no key) gets a
// fresh one.
func withKey(input json.RawMessage, key string) json.RawMessage {
	if key == "" {
		key = tool.NewCallKey()
	}
	var args map[string]any
	if json.Unmarshal(input, &args) != nil || args == nil {
		args = map[string]any{}
	}
	args[keyParam] = key
	out, err := json.Marshal(args)
	if err != nil {
		return input
	}
	return out
}
