package proc_test

import (
	"context"
	"encoding/json"
	"os"
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

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
