// Package tooltest is the test bench the tool families share: a registry
// of the built-ins (plus a test's own directories and tools) over a fresh
// workspace, a call made as the arbiter makes it (validate, resolve locks,
// execute), and the small file and manifest helpers those tests use. It
// is for tests only.
package tooltest

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

// Bundle is a workspace, a registry and an environment for one test.
type Bundle struct {
	WS  string
	Reg *tool.Registry
	Env tool.Env
}

// Setup builds a registry of the built-ins plus cfg's directories and
// tools, with a fresh workspace.
func Setup(t testing.TB, cfg builtin.Config) *Bundle {
	t.Helper()
	reg, err := builtin.Build(cfg)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	ws := t.TempDir()
	return &Bundle{WS: ws, Reg: reg, Env: tool.Env{Workspace: ws}}
}

// Call runs a tool as the arbiter does: validate, resolve locks, execute.
func (b *Bundle) Call(t testing.TB, name, input string) (tool.Result, error) {
	t.Helper()
	d, err := b.Reg.Get(name)
	if err != nil {
		return tool.Result{}, err
	}
	if err := d.Validate(json.RawMessage(input)); err != nil {
		return tool.Result{}, err
	}
	if _, err := d.Locks(b.WS, json.RawMessage(input)); err != nil {
		return tool.Result{}, err
	}
	return d.Execute(context.Background(), b.Env, json.RawMessage(input))
}

// MustCall is Call that fails the test on an error return.
func (b *Bundle) MustCall(t testing.TB, name, input string) tool.Result {
	t.Helper()
	r, err := b.Call(t, name, input)
	if err != nil {
		t.Fatalf("%s %s: %v", name, input, err)
	}
	return r
}

// Output decodes a result's output into a T.
func Output[T any](t testing.TB, r tool.Result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Output, &v); err != nil {
		t.Fatalf("decode output %s: %v", r.Output, err)
	}
	return v
}

// WriteFile creates a file with its directories.
func WriteFile(t testing.TB, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
}

// ReadFile is a file's content.
func ReadFile(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Manifest renders an external tool manifest.
func Manifest(name, extraRuntime string) string {
	rt := `"timeout_ms": 5000, "side_effect": "read", "trust": "own", "version": "1.0"`
	if extraRuntime != "" {
		rt += ", " + extraRuntime
	}
	return `{
  "llm": {"name": "` + name + `", "description": "A test tool.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer"}}, "additionalProperties": false}},
  "runtime": {` + rt + `}
}`
}

// AddTool writes a manifest <stem>.json and an executable script <stem>.
func AddTool(t testing.TB, dir, stem, manifestJSON, script string) {
	t.Helper()
	WriteFile(t, filepath.Join(dir, stem+".json"), manifestJSON, 0o644)
	if script != "" {
		WriteFile(t, filepath.Join(dir, stem), "#!/bin/sh\n"+script, 0o755)
	}
}

// WantPathEscape fails the test unless err is a *tool.PathError wrapping
// tool.ErrPathEscape.
func WantPathEscape(t testing.TB, err error) {
	t.Helper()
	var pe *tool.PathError
	if !errors.As(err, &pe) || !errors.Is(err, tool.ErrPathEscape) {
		t.Fatalf("got %v (%T), want a *tool.PathError wrapping ErrPathEscape", err, err)
	}
}

// WantErrContains fails the test unless err holds every one of subs.
func WantErrContains(t testing.TB, err error, subs ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want one containing %q", subs)
	}
	for _, s := range subs {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not contain %q", err, s)
		}
	}
}
