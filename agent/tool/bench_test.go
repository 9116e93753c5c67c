package tool_test

import (
	"encoding/json"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"path/filepath"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

// BenchmarkArbiterChecks measures what the arbiter spends on a call before
// the tool runs: schema validation and lock resolution (which confines the
// path to the workspace).
func BenchmarkArbiterChecks(b *testing.B) {
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		b.Fatal(err)
	}
	ws := b.TempDir()
	tooltest.WriteFile(&testing.T{}, filepath.Join(ws, "src", "pkg", "a.go"), "package pkg\n", 0o644)
	for _, bc := range []struct {
		name, tool, input string
	}{
		{"FSRead", tool.NameFSRead, `{"path": "src/pkg/a.go", "start_line": 1, "end_line": 40}`},
		{"FSWrite", tool.NameFSWrite, `{"path": "src/pkg/a.go", "mode": "replace", "start_line": 1, "end_line": 1, "content": "package pkg // edited\n"}`},
		{"Exec", tool.NameExec, `{"command": "go test ./...", "timeout_ms": 60000}`},
	} {
		d, _ := reg.Lookup(bc.tool)
		input := json.RawMessage(bc.input)
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if err := d.Validate(input); err != nil {
					b.Fatal(err)
				}
				if _, err := d.Locks(ws, input); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
