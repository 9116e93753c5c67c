package tool_test

import (
	"errors"
	"os"
	"path/filepath"
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

func wantPathEscape(t *testing.T, err error) {
	t.Helper()
	var pe *tool.PathError
	if !errors.As(err, &pe) || !errors.Is(err, tool.ErrPathEscape) {
		t.Fatalf("got %v (%T), want a *tool.PathError wrapping ErrPathEscape", err, err)
	}
}
