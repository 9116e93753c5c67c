package external_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testBundle is a workspace, a registry and an environment for one test.
type testBundle struct {
	ws  string
	reg *tool.Registry
	env tool.Env
}

// setup builds a registry of the built-ins plus cfg's directories and
// tools, with a fresh workspace.
func setup(t *testing.T, cfg builtin.Config) *testBundle {
	t.Helper()
	reg, err := builtin.Build(cfg)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	ws := t.TempDir()
	return &testBundle{ws: ws, reg: reg, env: tool.Env{Workspace: ws}}
}

// call runs a tool as the arbiter does: validate, resolve locks, execute.
func (b *testBundle) call(t *testing.T, name, input string) (tool.Result, error) {
	t.Helper()
	d, err := b.reg.Get(name)
	if err != nil {
		return tool.Result{}, err
	}
	if err := d.Validate(json.RawMessage(input)); err != nil {
		return tool.Result{}, err
	}
	if _, err := d.Locks(b.ws, json.RawMessage(input)); err != nil {
		return tool.Result{}, err
	}
	return d.Execute(context.Background(), b.env, json.RawMessage(input))
}

// mustCall is call that fails the test on an error return.
func (b *testBundle) mustCall(t *testing.T, name, input string) tool.Result {
	t.Helper()
	r, err := b.call(t, name, input)
	if err != nil {
		t.Fatalf("%s %s: %v", name, input, err)
	}
	return r
}

// output decodes a result's output into v.
func output[T any](t *testing.T, r tool.Result) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(r.Output, &v); err != nil {
		t.Fatalf("decode output %s: %v", r.Output, err)
	}
	return v
}

// writeFile creates a file with its directories.
func writeFile(t *testing.T, path, content string, perm os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), perm); err != nil {
		t.Fatal(err)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// manifest renders an external tool manifest.
func manifest(name, extraRuntime string) string {
	rt := `"timeout_ms": 5000, "side_effect": "read", "version": "1.0"`
	if extraRuntime != "" {
		rt += ", " + extraRuntime
	}
	return `{
  "llm": {"name": "` + name + `", "description": "A test tool.",
          "parameters": {"type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer"}}, "additionalProperties": false}},
  "runtime": {` + rt + `}
}`
}

// addTool writes a manifest <stem>.json and an executable script <stem>.
func addTool(t *testing.T, dir, stem, manifestJSON, script string) {
	t.Helper()
	writeFile(t, filepath.Join(dir, stem+".json"), manifestJSON, 0o644)
	if script != "" {
		writeFile(t, filepath.Join(dir, stem), "#!/bin/sh\n"+script, 0o755)
	}
}

func wantErrContains(t *testing.T, err error, subs ...string) {
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
