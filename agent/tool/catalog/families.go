package catalog

import (
	"encoding/json"

	"github.com/choirhq/choir/agent/tool"
)

// The specs of the built-in tools the agent runs itself. Their families
// (proc, fs, notion, tts) return them from Spec and hold the code.

// execMaxTimeoutMS is the largest timeout_ms choir.exec takes.
const execMaxTimeoutMS = 600_000

// Exec is choir.exec's spec.
func Exec() tool.Spec { return execSpec.Clone() }

// FSRead is choir.fs.read's spec.
func FSRead() tool.Spec { return fsReadSpec.Clone() }

// FSWrite is choir.fs.write's spec.
func FSWrite() tool.Spec { return fsWriteSpec.Clone() }

// FSSearch is choir.fs.search's spec.
func FSSearch() tool.Spec { return fsSearchSpec.Clone() }

// NotionQuery is choir.notion.query's spec.
func NotionQuery() tool.Spec { return notionQuerySpec.Clone() }

// TTSSpeak is choir.tts.speak's spec.
func TTSSpeak() tool.Spec { return ttsSpeakSpec.Clone() }

var execSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameExec,
		Description: "Run a shell command with /bin/sh -c in the workspace root. Returns the exit code and the combined " +
			"stdout and stderr; long output is cut to its head and tail, with the whole in artifact_ref. " +
			"Blocks all other file access while it runs: prefer choir.fs.read, choir.fs.write and choir.fs.search for files.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "command": {"type": "string", "minLength": 1, "description": "The shell command."},
    "timeout_ms": {"type": "integer", "minimum": 1000, "maximum": 600000, "description": "Kill the command after this many milliseconds (default 120000)."}
  },
  "required": ["command"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{
		// Above the largest timeout_ms, so the command's own timer fires
		// first and the partial output is reported.
		TimeoutMS:  execMaxTimeoutMS + 10_000,
		Locks:      []tool.LockTemplate{{Resource: "workspace", Mode: tool.ModeExclusive}},
		SideEffect: tool.SideEffectWrite,
		Version:    "1.0",
	},
}

var fsReadSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameFSRead,
		Description: "Read a text file of the workspace, or part of it: the first lines (head), the last lines (tail), " +
			"or a line range (start_line, end_line; 1-based, inclusive). Without any of them, reads from the start as much as fits. " +
			"Returns total_lines, and next_line when more remains.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "File path, relative to the workspace root."},
    "head": {"type": "integer", "minimum": 1, "description": "Read the first N lines."},
    "tail": {"type": "integer", "minimum": 1, "description": "Read the last N lines."},
    "start_line": {"type": "integer", "minimum": 1, "description": "First line to read."},
    "end_line": {"type": "integer", "minimum": 1, "description": "Last line to read (default: as much as fits)."}
  },
  "required": ["path"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{
		TimeoutMS:  30_000,
		Locks:      []tool.LockTemplate{{Resource: "file:{path}", Mode: tool.ModeShared}},
		SideEffect: tool.SideEffectRead,
		Idempotent: true,
		Version:    "1.0",
	},
}

var fsWriteSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameFSWrite,
		Description: "Write to a file of the workspace, creating it and its parent directories if needed. " +
			"mode overwrite (default) replaces the whole file with content; append adds content at the end; " +
			"insert puts content before line `line` (total_lines+1 appends); replace swaps lines start_line..end_line " +
			"(inclusive) for content, and an empty content deletes them. Lines are 1-based.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "path": {"type": "string", "minLength": 1, "description": "File path, relative to the workspace root."},
    "mode": {"type": "string", "enum": ["overwrite", "append", "insert", "replace"]},
    "content": {"type": "string", "description": "The text to write."},
    "line": {"type": "integer", "minimum": 1, "description": "insert: the line to insert before."},
    "start_line": {"type": "integer", "minimum": 1, "description": "replace: the first line replaced."},
    "end_line": {"type": "integer", "minimum": 1, "description": "replace: the last line replaced."}
  },
  "required": ["path", "content"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{
		TimeoutMS:  30_000,
		Locks:      []tool.LockTemplate{{Resource: "file:{path}", Mode: tool.ModeExclusive}},
		SideEffect: tool.SideEffectWrite,
		Version:    "1.0",
	},
}

var fsSearchSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameFSSearch,
		Description: "Search the workspace, or one file or directory of it, for lines matching a regular expression (RE2 syntax). " +
			"Returns matching lines with their path and line number, in path order; many matches are cut to the first ones, " +
			"with all of them in artifact_ref.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "pattern": {"type": "string", "minLength": 1, "description": "Regular expression, or a literal with fixed_strings."},
    "path": {"type": "string", "description": "File or directory to search, relative to the workspace root (default: all of it)."},
    "glob": {"type": "string", "minLength": 1, "pattern": "^[^/{}\\\\]+$", "description": "Only search files whose name matches, e.g. *.go; supports * ? and [...]."},
    "ignore_case": {"type": "boolean"},
    "fixed_strings": {"type": "boolean", "description": "Match pattern literally."},
    "max_results": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "Most matches to return (default 100)."}
  },
  "required": ["pattern"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{
		TimeoutMS:  60_000,
		Locks:      []tool.LockTemplate{{Resource: "file:{path}", Mode: tool.ModeShared}},
		SideEffect: tool.SideEffectRead,
		Idempotent: true,
		Version:    "1.0",
	},
}

var notionQuerySpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameNotionQuery,
		Description: "Use the Notion workspace shared with your integration. action search: find pages and databases by title " +
			"(query; object page or database). action read_page: a page as text, its blocks flattened (page_id; child pages " +
			"and databases are listed with their ids). action query_database: rows of a database (database_id; filter and " +
			"sorts in Notion API JSON, e.g. {\"property\":\"Status\",\"status\":{\"equals\":\"Done\"}}). action append: add " +
			"text (paragraphs split on blank lines) or Notion block objects to the end of a page (page_id). Ids may be given " +
			"with or without dashes, or as the page URL. Results carry ids to follow up; pass next_cursor as cursor for more.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "action": {"type": "string", "enum": ["search", "read_page", "query_database", "append"]},
    "query": {"type": "string", "maxLength": 1000, "description": "Search text (search)."},
    "object": {"type": "string", "enum": ["page", "database"], "description": "Search only pages or only databases."},
    "page_id": {"type": "string", "minLength": 1, "maxLength": 300},
    "database_id": {"type": "string", "minLength": 1, "maxLength": 300},
    "filter": {"type": "object", "description": "Notion database filter object (query_database)."},
    "sorts": {"type": "array", "items": {"type": "object"}, "description": "Notion sort objects (query_database), e.g. [{\"property\":\"Due\",\"direction\":\"ascending\"}]."},
    "text": {"type": "string", "minLength": 1, "maxLength": 100000, "description": "Text to append as paragraphs (append)."},
    "blocks": {"type": "array", "minItems": 1, "maxItems": 1000, "items": {"type": "object"}, "description": "Notion block objects to append (append)."},
    "limit": {"type": "integer", "minimum": 1, "maximum": 100, "description": "Most results (default 20); for read_page the most blocks is 2000."},
    "cursor": {"type": "string", "maxLength": 500, "description": "next_cursor of an earlier answer, to continue."}
  },
  "required": ["action"],
  "additionalProperties": false,
  "allOf": [
    {"if": {"properties": {"action": {"const": "read_page"}}}, "then": {"required": ["page_id"]}},
    {"if": {"properties": {"action": {"const": "query_database"}}}, "then": {"required": ["database_id"]}},
    {"if": {"properties": {"action": {"const": "append"}}}, "then": {"required": ["page_id"], "oneOf": [{"required": ["text"]}, {"required": ["blocks"]}]}}
  ]
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 120_000, Network: true, SecretResources: []string{tool.SecretNotion},
		SideEffect: tool.SideEffectExternal, Version: "1.0"},
}

var ttsSpeakSpec = tool.Spec{
	LLM: tool.LLMView{
		Name: tool.NameTTSSpeak,
		Description: "Speak text aloud with your current voice profile: writes an OGG Opus voice message to .choirtmp/send/ " +
			"and returns its name. send true also sends it to the user as a voice message (else send it with " +
			"choir.send.file). Write the text as it should be spoken; long texts are split at sentences and joined.",
		Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "text": {"type": "string", "minLength": 1, "maxLength": 50000, "description": "What to say."},
    "send": {"type": "boolean", "description": "Also send the voice message to the user now."},
    "caption": {"type": "string", "maxLength": 1024, "description": "Caption of the sent voice message."},
    "name": {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$", "description": "File name without extension; default voice-<time>-<random>."}
  },
  "required": ["text"],
  "additionalProperties": false
}`),
	},
	Runtime: tool.Runtime{TimeoutMS: 300_000, Network: true, SecretResources: []string{tool.SecretTTS},
		Locks:      []tool.LockTemplate{{Resource: "choirtmp", Mode: tool.ModeExclusive}},
		SideEffect: tool.SideEffectExternal, Version: "1.0"},
}
