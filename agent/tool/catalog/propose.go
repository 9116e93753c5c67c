package catalog

import (
	"encoding/json"

	"github.com/choirhq/choir/agent/tool"
)

var proposeConfigSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameProposeConfig,
		Description: "Propose a change to choird's config.json for human approval, as a JSON merge patch (RFC 7386: objects merge, " +
			"null removes a key). The person sees every changed setting; once approved it is loaded and applied as choirctl config apply does.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "patch": {"type": "object", "minProperties": 1, "description": "Merge patch of config.json, e.g. {\"agents\": {\"assistant\": {\"budgets\": {\"max_steps\": 40}}}}."},
    "rationale": {"type": "string", "minLength": 1, "description": "Why the change is needed."}
  },
  "required": ["patch", "rationale"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 10_000, SideEffect: tool.SideEffectExternal, Idempotency: tool.IdempotencyKeyed, Version: "1.0", Meta: true},
}

var proposeRepoSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameProposeRepo,
		Description: "Submit a branch of your own repository for human approval. First clone your repository into the workspace, " +
			"commit on proposal/<session-id>/<slug> and push that branch; then call this with the branch. Once approved it is merged, " +
			"built and deployed; if rejected, the branch stays for inspection.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "branch": {"type": "string", "pattern": "^proposal/[^/]+/[a-z0-9][a-z0-9._-]{0,63}$", "description": "proposal/<session-id>/<slug>"},
    "rationale": {"type": "string", "minLength": 1, "description": "What the branch changes and why."}
  },
  "required": ["branch", "rationale"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 60_000, SideEffect: tool.SideEffectExternal, Idempotency: tool.IdempotencyKeyed, Version: "1.0", Meta: true},
}
