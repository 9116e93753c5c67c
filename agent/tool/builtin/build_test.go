package builtin_test

import (
	"context"
	"encoding/json"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"path/filepath"
	"slices"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/notion"
	"github.com/choirhq/choir/agent/tool/tts"
)

func TestBuild(t *testing.T) {
	t.Parallel()

	t.Run("BuiltinsHaveTheirKinds", func(t *testing.T) {
		t.Parallel()
		reg, err := builtin.Build(builtin.Config{})
		if err != nil {
			t.Fatal(err)
		}
		want := map[string]tool.Kind{
			tool.NameExec:           tool.KindBuiltin,
			tool.NameFSRead:         tool.KindBuiltin,
			tool.NameFSWrite:        tool.KindBuiltin,
			tool.NameFSSearch:       tool.KindBuiltin,
			tool.NameMemoryQuery:    tool.KindHost,
			tool.NameMemoryUpsert:   tool.KindHost,
			tool.NameMemoryCompact:  tool.KindRuntime,
			tool.NameProposeTool:    tool.KindMeta,
			tool.NameProposeSkill:   tool.KindMeta,
			tool.NameSendFile:       tool.KindHost,
			tool.NameSchedule:       tool.KindHost,
			tool.NameScheduleList:   tool.KindHost,
			tool.NameScheduleCancel: tool.KindHost,
			tool.NameRemind:         tool.KindHost,
			notion.Name:             tool.KindBuiltin,
			tts.Name:                tool.KindBuiltin,
			tool.NameProposeConfig:  tool.KindMeta,
			tool.NameProposeRepo:    tool.KindMeta,
		}
		for name, kind := range want {
			d, ok := reg.Lookup(name)
			if !ok {
				t.Errorf("%s missing", name)
				continue
			}
			if d.Kind() != kind || d.Origin() != tool.OriginBuiltin {
				t.Errorf("%s: kind %s origin %s, want %s builtin", name, d.Kind(), d.Origin(), kind)
			}
		}
		if got := reg.Names(); len(got) != len(want) || !slices.IsSorted(got) {
			t.Errorf("Names() = %v, want the %d built-ins sorted", got, len(want))
		}
	})

	t.Run("MissingDirectoriesHoldNoTools", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		reg, err := builtin.Build(builtin.Config{GlobalDir: filepath.Join(dir, "nope"), AgentDir: filepath.Join(dir, "nope2")})
		if err != nil {
			t.Fatal(err)
		}
		if len(reg.Names()) != len(builtin.Tools())+2 { // and choir.notion.query, choir.tts.speak
			t.Errorf("got %v", reg.Names())
		}
	})

	t.Run("AgentToolOverridesGlobalTool", func(t *testing.T) {
		t.Parallel()
		global, agent := t.TempDir(), t.TempDir()
		tooltest.AddTool(t, global, "greet", tooltest.Manifest("x.greet", `"idempotent": true`), `echo '{"status":"success","summary":"global"}'`)
		tooltest.AddTool(t, global, "other", tooltest.Manifest("x.other", ""), `echo '{"status":"success","summary":"other"}'`)
		tooltest.AddTool(t, agent, "greet", tooltest.Manifest("x.greet", ""), `echo '{"status":"success","summary":"agent"}'`)
		b := tooltest.Setup(t, builtin.Config{GlobalDir: global, AgentDir: agent})
		d, ok := b.Reg.Lookup("x.greet")
		if !ok || d.Origin() != tool.OriginAgent || d.File() != filepath.Join(agent, "greet.json") {
			t.Fatalf("x.greet: %v origin %s file %s, want the agent's", ok, d.Origin(), d.File())
		}
		if r := b.MustCall(t, "x.greet", `{}`); r.Summary != "agent" {
			t.Errorf("x.greet ran %q, want the agent version", r.Summary)
		}
		if d, ok := b.Reg.Lookup("x.other"); !ok || d.Origin() != tool.OriginGlobal || d.Kind() != tool.KindExternal {
			t.Errorf("x.other: %v, want the global tool kept", ok)
		}
	})

	t.Run("ExtraGoToolsAreBuiltins", func(t *testing.T) {
		t.Parallel()
		reg, err := builtin.Build(builtin.Config{Tools: []tool.Tool{panicTool{}}})
		if err != nil {
			t.Fatal(err)
		}
		if d, ok := reg.Lookup("test.panic"); !ok || d.Kind() != tool.KindBuiltin {
			t.Errorf("test.panic: %v", ok)
		}
	})
}

// panicTool is a Go tool that panics, to check the registry contains it.
type panicTool struct{}

func (panicTool) Spec() tool.Spec {
	return tool.Spec{
		LLM:     tool.LLMView{Name: "test.panic", Description: "Panics.", Parameters: json.RawMessage(`{"type": "object"}`)},
		Runtime: tool.Runtime{TimeoutMS: 1000, SideEffect: tool.SideEffectRead, Version: "1"},
	}
}

func (panicTool) Execute(context.Context, tool.Env, json.RawMessage) (tool.Result, error) {
	panic("boom")
}
