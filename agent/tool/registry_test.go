package tool_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

func TestValidName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		ok   bool
	}{
		{"choir.fs.read", true},
		{"git.commit_all", true},
		{"a.b", true},
		{"a1.b_2.c3", true},
		{"read", false},
		{"Choir.fs", false},
		{"choir..fs", false},
		{"choir.fs.", false},
		{".choir.fs", false},
		{"choir.1fs", false},
		{"choir.fs-read", false},
		{"choir.fs__read", false},
		{"choir_.fs", false},
		{"a.b.c.d.e.f.g.h", true},
		{"a.b.c.d.e.f.g.h.i", false},
		{"abcdefghij.abcdefghij.abcdefghij.abcdefghij.abcdefghij.abcdefghij", false},
	}
	for _, tt := range tests {
		if err := tool.ValidName(tt.name); (err == nil) != tt.ok {
			t.Errorf("ValidName(%q) = %v, want ok %v", tt.name, err, tt.ok)
		}
	}
}

func TestLLMViews(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ok := `echo '{"status":"success","summary":"ok"}'`
	tooltest.AddTool(t, dir, "e", `{"llm": {"name": "x.edge_only", "description": "Edge only.", "parameters": {"type": "object", "properties": {"p": {"type": "string"}}}},
	  "runtime": {"timeout_ms": 4321, "side_effect": "external", "trust": "own", "version": "9.9.9-leakmarker", "exposure": "edge", "network": true,
	              "secret_resources": ["leak-marker-secret"], "locks": [{"resource": "file:{p}", "mode": "X"}], "prompt_mask": false}}`, ok)
	tooltest.AddTool(t, dir, "c", tooltest.Manifest("x.core_only", `"exposure": "core"`), ok)
	tooltest.AddTool(t, dir, "n", tooltest.Manifest("x.hidden", `"exposure": "none"`), ok)
	reg, err := builtin.Build(builtin.Config{GlobalDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	names := func(vs []tool.LLMView) []string {
		var out []string
		for _, v := range vs {
			out = append(out, v.Name)
		}
		return out
	}

	t.Run("OnlyTheLLMViewIsSerialised", func(t *testing.T) {
		t.Parallel()
		for _, v := range reg.LLMViews(tool.Filter{}) {
			b, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			keys := slices.Sorted(func(yield func(string) bool) {
				for k := range m {
					if !yield(k) {
						return
					}
				}
			})
			if !slices.Equal(keys, []string{"description", "name", "parameters"}) {
				t.Errorf("%s: keys %v", v.Name, keys)
			}
			for _, leak := range []string{"4321", "9.9.9-leakmarker", "leak-marker-secret", "file:{p}", dir, "exposure", "network", "external"} {
				if v.Name == "x.edge_only" && strings.Contains(string(b), leak) {
					t.Errorf("%s: LLM view leaks %s: %s", v.Name, leak, b)
				}
			}
		}
	})

	t.Run("LaneFilterHonoursExposure", func(t *testing.T) {
		t.Parallel()
		edge := names(reg.LLMViews(tool.Filter{Lane: tool.LaneEdge}))
		core := names(reg.LLMViews(tool.Filter{Lane: tool.LaneCore}))
		all := names(reg.LLMViews(tool.Filter{}))
		if !slices.Contains(edge, "x.edge_only") || slices.Contains(edge, "x.core_only") || slices.Contains(edge, "x.hidden") {
			t.Errorf("edge views %v", edge)
		}
		if slices.Contains(core, "x.edge_only") || !slices.Contains(core, "x.core_only") || slices.Contains(core, "x.hidden") {
			t.Errorf("core views %v", core)
		}
		if slices.Contains(all, "x.hidden") || !slices.Contains(all, tool.NameExec) || !slices.IsSorted(all) {
			t.Errorf("all views %v", all)
		}
	})

	t.Run("AllowListFilters", func(t *testing.T) {
		t.Parallel()
		got := names(reg.LLMViews(tool.Filter{Lane: tool.LaneCore, Allow: []string{tool.NameFSRead, "x.edge_only", "no.such"}}))
		if !slices.Equal(got, []string{tool.NameFSRead}) {
			t.Errorf("got %v", got)
		}
		if got := reg.LLMViews(tool.Filter{Allow: []string{}}); len(got) != 0 {
			t.Errorf("empty allow list gave %v", names(got))
		}
	})

	t.Run("ViewsAreCopies", func(t *testing.T) {
		t.Parallel()
		v := reg.LLMViews(tool.Filter{Allow: []string{tool.NameExec}})[0]
		v.Parameters[0] = 'X'
		d, _ := reg.Lookup(tool.NameExec)
		if d.LLM().Parameters[0] == 'X' {
			t.Error("mutating a view changed the registry")
		}
		rt := d.Runtime()
		rt.Locks[0].Mode = "S"
		if d.Runtime().Locks[0].Mode != "X" {
			t.Error("mutating a runtime view changed the registry")
		}
	})

	t.Run("ForModelHonoursExposureAndMask", func(t *testing.T) {
		t.Parallel()
		res := tool.Result{Status: tool.StatusSuccess, Summary: "s", Output: json.RawMessage(`{"secret":"x"}`), ArtifactRef: ".choirtmp/artifacts/a"}
		d, _ := reg.Lookup("x.edge_only")
		if _, ok := d.ForModel(tool.LaneCore, res); ok {
			t.Error("core sees an edge-only tool's result")
		}
		if v, ok := d.ForModel(tool.LaneEdge, res); !ok || string(v.Output) != `{"secret":"x"}` {
			t.Errorf("edge view %+v %v", v, ok)
		}
		masked, err := builtin.Build(builtin.Config{Tools: []tool.Tool{tool.Declare(tool.Spec{
			LLM:     tool.LLMView{Name: "x.masked", Description: "d", Parameters: json.RawMessage(`{"type":"object"}`)},
			Runtime: tool.Runtime{TimeoutMS: 1, SideEffect: tool.SideEffectRead, Version: "1", PromptMask: true},
		})}})
		if err != nil {
			t.Fatal(err)
		}
		md, _ := masked.Lookup("x.masked")
		v, ok := md.ForModel(tool.LaneCore, res)
		if !ok || !v.Masked || v.Output != nil || v.ArtifactRef != "" || v.Summary != "s" {
			t.Errorf("masked view %+v", v)
		}
	})
}

func TestValidate(t *testing.T) {
	t.Parallel()
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		tool  string
		input string
		paths []string // problem paths expected
	}{
		{"MissingRequired", tool.NameFSRead, `{}`, []string{""}},
		{"WrongType", tool.NameFSRead, `{"path": 3}`, []string{"/path"}},
		{"BelowMinimum", tool.NameFSRead, `{"path": "a", "head": 0}`, []string{"/head"}},
		{"UnknownProperty", tool.NameExec, `{"command": "ls", "cwd": "/"}`, []string{""}},
		{"SeveralProblems", tool.NameFSWrite, `{"path": 1, "mode": "truncate"}`, []string{"", "/path", "/mode"}},
		{"DuplicateKey", tool.NameFSRead, `{"path": "a", "path": "../b"}`, []string{"/path"}},
		{"NotAnObject", tool.NameExec, `["ls"]`, []string{""}},
		{"TrailingData", tool.NameExec, `{"command": "ls"} {}`, []string{""}},
		{"ConditionalSchema", tool.NameMemoryQuery, `{"store": "working", "mode": "semantic", "query": "q"}`, []string{"/mode"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, _ := reg.Lookup(tt.tool)
			err := d.Validate(json.RawMessage(tt.input))
			var ie *tool.InputError
			if !errors.As(err, &ie) {
				t.Fatalf("got %v, want *tool.InputError", err)
			}
			if ie.Name != tt.tool {
				t.Errorf("Name = %s", ie.Name)
			}
			var got []string
			for _, p := range ie.Problems {
				got = append(got, p.Path)
				if p.Message == "" {
					t.Errorf("problem at %q has no message", p.Path)
				}
			}
			for _, want := range tt.paths {
				if !slices.Contains(got, want) {
					t.Errorf("problems %+v lack path %q", ie.Problems, want)
				}
			}
			b, _ := json.Marshal(ie)
			if !strings.Contains(string(b), `"problems"`) {
				t.Errorf("InputError JSON %s", b)
			}
		})
	}

	t.Run("ValidInputPasses", func(t *testing.T) {
		t.Parallel()
		for name, input := range map[string]string{
			tool.NameExec:         `{"command": "ls", "timeout_ms": 5000}`,
			tool.NameFSRead:       `{"path": "a.go", "start_line": 3, "end_line": 9}`,
			tool.NameFSWrite:      `{"path": "a.go", "mode": "replace", "content": "", "start_line": 1, "end_line": 2}`,
			tool.NameFSSearch:     `{"pattern": "func", "glob": "*.go"}`,
			tool.NameMemoryQuery:  `{"store": "session", "mode": "session_detail", "session_id": "s1"}`,
			tool.NameMemoryUpsert: `{"op": "update", "key": "k", "text": "t", "expect_version": 3}`,
			tool.NameProposeSkill: `{"change": "add", "spec": {"name": "s", "description": "d", "initial_state": "a", "states": {"a": {}, "b": {}}, "max_steps": 3}, "rationale": "r"}`,
		} {
			d, _ := reg.Lookup(name)
			if err := d.Validate(json.RawMessage(input)); err != nil {
				t.Errorf("%s: %v", name, err)
			}
		}
	})
}

func TestLocks(t *testing.T) {
	t.Parallel()
	b := tooltest.Setup(t, builtin.Config{})
	tooltest.WriteFile(t, filepath.Join(b.WS, "src", "a.go"), "package a\n", 0o644)
	if err := os.Symlink("src/a.go", filepath.Join(b.WS, "alias.go")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src", filepath.Join(b.WS, "srclink")); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		tool  string
		input string
		want  []tool.Lock
	}{
		{"ExecTakesWorkspaceX", tool.NameExec, `{"command": "true"}`, []tool.Lock{{"workspace", "X"}}},
		{"ReadTakesFileS", tool.NameFSRead, `{"path": "src/a.go"}`, []tool.Lock{{"file:src/a.go", "S"}}},
		{"WriteTakesFileX", tool.NameFSWrite, `{"path": "new/b.go", "content": ""}`, []tool.Lock{{"file:new/b.go", "X"}}},
		{"SpellingsAreCanonical", tool.NameFSRead, `{"path": "./src//x/../a.go"}`, []tool.Lock{{"file:src/a.go", "S"}}},
		{"AbsolutePathInside", tool.NameFSRead, `{"path": "` + filepath.Join(b.WS, "src/a.go") + `"}`, []tool.Lock{{"file:src/a.go", "S"}}},
		{"SymlinkLocksItsTarget", tool.NameFSRead, `{"path": "alias.go"}`, []tool.Lock{{"file:src/a.go", "S"}}},
		{"SymlinkedParentLocksTarget", tool.NameFSWrite, `{"path": "srclink/c.go", "content": ""}`, []tool.Lock{{"file:src/c.go", "X"}}},
		{"SearchDirectory", tool.NameFSSearch, `{"pattern": "x", "path": "src"}`, []tool.Lock{{"file:src", "S"}}},
		{"SearchWholeWorkspace", tool.NameFSSearch, `{"pattern": "x"}`, []tool.Lock{{"workspace", "S"}}},
		{"SearchRootDot", tool.NameFSSearch, `{"pattern": "x", "path": "."}`, []tool.Lock{{"workspace", "S"}}},
		{"ChoirTmpIsIndependent", tool.NameFSWrite, `{"path": ".choirtmp/send/a.ogg", "content": ""}`, []tool.Lock{{"choirtmp", "X"}}},
		{"HostToolTakesNone", tool.NameMemoryQuery, `{"store": "knowledge", "mode": "text", "query": "q"}`, nil},
		{"MetaToolTakesNone", tool.NameProposeSkill, `{}`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			d, _ := b.Reg.Lookup(tt.tool)
			got, err := d.Locks(b.WS, json.RawMessage(tt.input))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("Locks = %v, want %v", got, tt.want)
			}
		})
	}

	t.Run("TemplatesMergeAndSort", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"locks": [
			{"resource": "net:brave", "mode": "S"},
			{"resource": "file:{path}", "mode": "S"},
			{"resource": "file:CHANGELOG.md", "mode": "X"},
			{"resource": "file:{path}", "mode": "X"},
			{"resource": "browser_tab", "mode": "X"}]`), `true`)
		reg, err := builtin.Build(builtin.Config{GlobalDir: dir})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := reg.Lookup("x.t")
		got, err := d.Locks(b.WS, json.RawMessage(`{"path": "CHANGELOG.md"}`))
		if err != nil {
			t.Fatal(err)
		}
		want := []tool.Lock{{"browser_tab", "X"}, {"file:CHANGELOG.md", "X"}, {"net:brave", "S"}}
		if !slices.Equal(got, want) {
			t.Errorf("Locks = %v, want %v", got, want)
		}
		if got[1].String() != "file:CHANGELOG.md:X" {
			t.Errorf("String() = %s", got[1])
		}
	})

	t.Run("EscapeRefusedBeforeLocking", func(t *testing.T) {
		t.Parallel()
		d, _ := b.Reg.Lookup(tool.NameFSRead)
		_, err := d.Locks(b.WS, json.RawMessage(`{"path": "../etc/passwd"}`))
		tooltest.WantPathEscape(t, err)
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
