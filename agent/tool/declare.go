package tool

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Names of the built-in tools. They live here, with the registry, because
// the lanes, the arbiter and the skill engine refer to them by name; the
// tools themselves are in the family packages.
const (
	NameExec           = "choir.exec"
	NameFSRead         = "choir.fs.read"
	NameFSWrite        = "choir.fs.write"
	NameFSSearch       = "choir.fs.search"
	NameMemoryQuery    = "choir.memory.query"
	NameMemoryUpsert   = "choir.memory.upsert"
	NameMemoryCompact  = "choir.memory.compact"
	NameProposeTool    = "choir.propose.tool"
	NameProposeSkill   = "choir.propose.skill"
	NameProposeConfig  = "choir.propose.config_change"
	NameProposeRepo    = "choir.propose.repo_change"
	NameSendFile       = "choir.send.file"
	NameSchedule       = "choir.schedule"
	NameScheduleList   = "choir.schedule.list"
	NameScheduleCancel = "choir.schedule.cancel"
	NameRemind         = "choir.remind"
	NameNotionQuery    = "choir.notion.query"
	NameTTSSpeak       = "choir.tts.speak"
)

// declaration is a tool the agent describes but does not execute.
type declaration struct {
	spec     Spec
	classify func(json.RawMessage) Idempotency
}

// Declare returns a tool that is described but not executed by the agent:
// a host tool (runtime.host), a meta tool (runtime.meta), or, with neither
// flag, a runtime tool the lane handles itself. Its [Def.Kind] says which.
func Declare(spec Spec) Tool { return declaration{spec: spec.Clone()} }

// DeclareWith is Declare for a tool whose idempotency depends on the call:
// classify gives it per input ("" for the runtime's class).
func DeclareWith(spec Spec, classify func(json.RawMessage) Idempotency) Tool {
	return declaration{spec: spec.Clone(), classify: classify}
}

func (d declaration) Spec() Spec { return d.spec.Clone() }

// IdempotencyOf is the declaration's classify, or "" without one.
func (d declaration) IdempotencyOf(input json.RawMessage) Idempotency {
	if d.classify == nil {
		return ""
	}
	return d.classify(input)
}

func (d declaration) Execute(context.Context, Env, json.RawMessage) (Result, error) {
	return Result{}, fmt.Errorf("execute %s: %w", d.spec.LLM.Name, ErrNotExecutable)
}

// sourced is a tool whose results' sources depend on the call.
type sourced struct {
	Tool
	f func(json.RawMessage, Result) []string
}

// WithSources returns t with per-call result sources (see [Def.Sources]):
// f gives the untrusted sources of one call's result, or none when the
// result is the agent's own (choir.fs.read of a workspace file, say, but
// not of a file received from outside).
func WithSources(t Tool, f func(input json.RawMessage, res Result) []string) Tool {
	return sourced{Tool: t, f: f}
}

// SourceKind is a source's kind: "web" of "web:https://example.com", "mcp"
// of "mcp:github".
func SourceKind(source string) string {
	kind, _, _ := strings.Cut(source, ":")
	return kind
}
