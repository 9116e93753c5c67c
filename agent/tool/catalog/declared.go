package catalog

import (
	"encoding/json"

	"github.com/choirhq/choir/agent/tool"
)

var memoryQuerySpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameMemoryQuery,
		Description: "Search memory. store working: this session's full event log (mode keyword, or hash of an event). " +
			"store session: your past sessions, mid-term chunks and long-term summaries (mode semantic, text, hash, range, " +
			"or session_detail with session_id to read one older session in full). " +
			"store knowledge: your knowledge base (mode semantic, text, hash or range). " +
			"target_agent reads another agent's session or knowledge memory, when that agent's memory_readable_by names you. Results cite session_id and chunk_index.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "store": {"type": "string", "enum": ["working", "session", "knowledge"]},
    "mode": {"type": "string", "enum": ["keyword", "hash", "semantic", "text", "range", "session_detail"]},
    "query": {"type": "string", "minLength": 1, "description": "What to search for: a question's words are ORed, best matches first; \"a phrase\" is required, -word excluded. Cut to 4096 bytes."},
    "hash": {"type": "string", "pattern": "^[0-9a-fA-F]{8,64}$", "description": "Event or content hash, or a prefix of at least 8 hex digits (hash mode)."},
    "session_id": {"type": "string", "minLength": 1, "description": "Session to search or drill into."},
    "tiers": {"type": "array", "items": {"type": "string", "enum": ["mid_term", "long_term_summary", "long_term_detail"]}, "uniqueItems": true},
    "from": {"type": "string", "description": "Start of the time range, RFC 3339 (range mode)."},
    "to": {"type": "string", "description": "End of the time range, RFC 3339 (range mode)."},
    "key_prefix": {"type": "string", "description": "Knowledge keys starting with this (range mode)."},
    "target_agent": {"type": "string", "minLength": 1, "description": "Agent whose memory to read; default yourself."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 100},
    "offset": {"type": "integer", "minimum": 0}
  },
  "required": ["store", "mode"],
  "additionalProperties": false,
  "allOf": [
    {"if": {"properties": {"store": {"const": "working"}}},
     "then": {"properties": {"mode": {"enum": ["keyword", "hash"]}}, "not": {"required": ["target_agent"]}}},
    {"if": {"properties": {"store": {"const": "session"}}},
     "then": {"properties": {"mode": {"enum": ["semantic", "text", "hash", "range", "session_detail"]}}}},
    {"if": {"properties": {"store": {"const": "knowledge"}}},
     "then": {"properties": {"mode": {"enum": ["semantic", "text", "hash", "range"]}}}},
    {"if": {"properties": {"mode": {"const": "session_detail"}}}, "then": {"required": ["session_id"]}},
    {"if": {"properties": {"mode": {"const": "hash"}}}, "then": {"required": ["hash"]}},
    {"if": {"properties": {"mode": {"enum": ["keyword", "semantic", "text"]}}}, "then": {"required": ["query"]}}
  ]
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 30_000, SideEffect: tool.SideEffectRead, Idempotent: true, Version: "1.0", Host: true},
}

var memoryUpsertSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameMemoryUpsert,
		Description: "Write to your knowledge base: insert a document (a dedup key that exists updates that document instead), " +
			"update the text or metadata of the document with a key or id, or delete it (its versions are kept). " +
			"To change a document you read, pass the version you read as expect_version: if someone changed it since, " +
			"nothing is written and the error names the current version to read again.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "op": {"type": "string", "enum": ["insert", "update", "delete"]},
    "key": {"type": "string", "minLength": 1, "maxLength": 200, "description": "Dedup key naming the document, e.g. user.preference.theme."},
    "id": {"type": "string", "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", "description": "Document id."},
    "text": {"type": "string", "minLength": 1, "maxLength": 16384, "description": "The document's text."},
    "metadata": {"type": "object", "description": "Free-form attributes stored with the document: tags, source, category."},
    "expect_version": {"type": "integer", "minimum": 0, "description": "Optional: the document's version when you read it (0: the key must be new). The write is refused if it changed since."}
  },
  "required": ["op"],
  "additionalProperties": false,
  "allOf": [
    {"if": {"properties": {"op": {"const": "insert"}}}, "then": {"required": ["text"], "not": {"required": ["id"]}}},
    {"if": {"properties": {"op": {"const": "update"}}},
     "then": {"anyOf": [{"required": ["key"]}, {"required": ["id"]}], "allOf": [{"anyOf": [{"required": ["text"]}, {"required": ["metadata"]}]}]}},
    {"if": {"properties": {"op": {"const": "delete"}}},
     "then": {"anyOf": [{"required": ["key"]}, {"required": ["id"]}], "not": {"anyOf": [{"required": ["text"]}, {"required": ["metadata"]}]}}}
  ]
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 30_000, SideEffect: tool.SideEffectWrite, Version: "1.0", Host: true},
}

var memoryCompactSpec = tool.Spec{
	LLM: tool.LLMView{
		Name:        tool.NameMemoryCompact,
		Description: "Fold the oldest events of your context window into your reference summary now, to free room.",
		Parameters:  json.RawMessage(`{"type": "object", "properties": {}, "additionalProperties": false}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 60_000, SideEffect: tool.SideEffectWrite, Idempotent: true, Version: "1.0"},
}

var proposeToolSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameProposeTool,
		Description: "Propose a new external tool, or a change to one, for human approval. Nothing is installed until a person " +
			"approves it; then it is merged into your repository, built and deployed. Describe the behaviour in prose. " +
			"An implementation (a script starting with #!) is optional: the person sees it in full before deciding; without one a person writes it.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "change": {"type": "string", "enum": ["add", "modify"]},
    "name": {"type": "string", "pattern": "^[a-z][a-z0-9_]*(\\.[a-z][a-z0-9_]*)+$", "description": "Dotted tool name, e.g. choir.repo.status."},
    "description": {"type": "string", "minLength": 1, "description": "What the model will be told the tool does."},
    "parameters": {"type": "object", "description": "JSON Schema of the tool's input (an object schema)."},
    "behavior": {"type": "string", "minLength": 1, "description": "What the tool should do and return, in prose."},
    "runtime": {
      "type": "object",
      "properties": {
        "side_effect": {"type": "string", "enum": ["read", "write", "external"]},
        "locks": {"type": "array", "items": {
          "type": "object",
          "properties": {"resource": {"type": "string", "minLength": 1}, "mode": {"type": "string", "enum": ["S", "X"]}},
          "required": ["resource", "mode"], "additionalProperties": false}},
        "secret_resources": {"type": "array", "items": {"type": "string", "minLength": 1}},
        "network": {"type": "boolean"},
        "timeout_ms": {"type": "integer", "minimum": 1, "maximum": 3600000},
        "idempotent": {"type": "boolean"},
        "trust": {"type": "string", "enum": ["own", "untrusted"], "description": "own: the tool's results are the agent's own data; untrusted: they carry text from outside (a web page, a mail, another service's answer)."},
        "source": {"type": "string", "pattern": "^[a-z][a-z0-9_-]*(:[^\\s]+)?$", "description": "untrusted only: the kind of source, e.g. web."}
      },
      "required": ["side_effect", "trust"],
      "additionalProperties": false
    },
    "implementation": {
      "type": "object",
      "description": "The tool's executable: reads the input JSON on stdin, writes {\"status\": \"success\"|\"error\", \"summary\": \"...\", \"output\": ...} on stdout.",
      "properties": {"content": {"type": "string", "minLength": 3, "maxLength": 32768}},
      "required": ["content"],
      "additionalProperties": false
    },
    "rationale": {"type": "string", "minLength": 1, "description": "Why the agent needs it."}
  },
  "required": ["change", "name", "description", "parameters", "behavior", "runtime", "rationale"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 10_000, SideEffect: tool.SideEffectExternal, Idempotency: tool.IdempotencyKeyed, Version: "1.0", Meta: true},
}

var proposeSkillSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameProposeSkill,
		Description: "Propose a new skill, or a change to one, for human approval. The spec is a SkillSpec state machine; " +
			"nothing is installed until a person approves it.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "change": {"type": "string", "enum": ["add", "modify"]},
    "spec": {
      "type": "object",
      "description": "The SkillSpec: name, description, initial_state, states (objective, allowed_tools, transitions [{on, to}], terminal), max_steps, interruptible, optional input_schema and output_schema.",
      "properties": {
        "name": {"type": "string", "minLength": 1},
        "description": {"type": "string", "minLength": 1},
        "initial_state": {"type": "string", "minLength": 1},
        "input_schema": {"type": "object"},
        "output_schema": {"type": "object"},
        "states": {"type": "object", "minProperties": 2},
        "max_steps": {"type": "integer", "minimum": 1},
        "interruptible": {"type": "boolean"}
      },
      "required": ["name", "description", "initial_state", "states", "max_steps"]
    },
    "rationale": {"type": "string", "minLength": 1, "description": "Why the agent needs it."}
  },
  "required": ["change", "spec", "rationale"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 10_000, SideEffect: tool.SideEffectExternal, Idempotency: tool.IdempotencyKeyed, Version: "1.0", Meta: true},
}

var sendFileSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameSendFile,
		Description: "Send a file to the user: first write it under .choirtmp/send/ in the workspace (choir.fs.write or " +
			"choir.exec), then call this with its name. Images go as photos, .ogg/.opus as voice messages, videos as " +
			"videos, anything else as a document (kind overrides). The file is deleted once delivered; at most 50 MB.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "File name inside .choirtmp/send, e.g. report.pdf."},
    "kind": {"type": "string", "enum": ["document", "photo", "voice", "video"]},
    "caption": {"type": "string", "maxLength": 1024}
  },
  "required": ["path"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 30_000, SideEffect: tool.SideEffectExternal, Idempotency: tool.IdempotencyKeyed, Version: "1.0", Host: true},
}
