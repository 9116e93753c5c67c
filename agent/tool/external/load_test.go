package external_test

import (
	"errors"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"os"
	"path/filepath"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

func TestManifestErrors(t *testing.T) {
	t.Parallel()
	okScript := `echo '{"status":"success","summary":"ok"}'`
	tests := []struct {
		name     string
		files    func(t *testing.T, dir string)
		file     string // the file the error must name
		reason   string
		agentDir bool
	}{
		{
			name:   "InvalidJSON",
			files:  func(t *testing.T, dir string) { tooltest.AddTool(t, dir, "t", `{"llm": {`, okScript) },
			file:   "t.json",
			reason: "invalid manifest",
		},
		{
			name: "UnknownField",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"color": "blue"`), okScript)
			},
			file:   "t.json",
			reason: "$.runtime.color: unknown field",
		},
		{
			name: "InputSchemaInsteadOfParameters",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", `{"llm": {"name": "x.t", "description": "d", "input_schema": {"type": "object"}},
				  "runtime": {"timeout_ms": 1, "side_effect": "read", "trust": "own", "version": "1"}}`, okScript)
			},
			file:   "t.json",
			reason: "goes in llm.parameters",
		},
		{
			name: "SchemaDoesNotCompile",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", `{"llm": {"name": "x.t", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "strnig"}}}},
				  "runtime": {"timeout_ms": 1, "side_effect": "read", "trust": "own", "version": "1"}}`, okScript)
			},
			file:   "t.json",
			reason: "llm.parameters: compile schema",
		},
		{
			name: "SchemaReferencesAFile",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", `{"llm": {"name": "x.t", "description": "d", "parameters": {"type": "object", "properties": {"a": {"$ref": "file:///etc/passwd"}}}},
				  "runtime": {"timeout_ms": 1, "side_effect": "read", "trust": "own", "version": "1"}}`, okScript)
			},
			file:   "t.json",
			reason: "schemas must be self-contained",
		},
		{
			name: "ParametersNotAnObjectSchema",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", `{"llm": {"name": "x.t", "description": "d", "parameters": {"type": "string"}},
				  "runtime": {"timeout_ms": 1, "side_effect": "read", "trust": "own", "version": "1"}}`, okScript)
			},
			file:   "t.json",
			reason: `want "type": "object"`,
		},
		{
			name:   "MissingExecutable",
			files:  func(t *testing.T, dir string) { tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", ""), "") },
			file:   "t.json",
			reason: "missing",
		},
		{
			name: "ExecutableNotExecutable",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", ""), "")
				tooltest.WriteFile(t, filepath.Join(dir, "t"), "#!/bin/sh\n", 0o644)
			},
			file:   "t.json",
			reason: "not executable",
		},
		{
			name: "ExecutableIsADirectory",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", ""), "")
				if err := os.Mkdir(filepath.Join(dir, "t"), 0o755); err != nil {
					t.Fatal(err)
				}
			},
			file:   "t.json",
			reason: "not a regular file",
		},
		{
			name: "LockTemplateUnknownNamespace",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"locks": [{"resource": "disk:sda", "mode": "X"}]`), okScript)
			},
			file:   "t.json",
			reason: "runtime.locks[0]: resource \"disk:sda\": unknown namespace",
		},
		{
			name: "LockTemplatePlaceholderNotAProperty",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"locks": [{"resource": "file:{file}", "mode": "S"}]`), okScript)
			},
			file:   "t.json",
			reason: "placeholder {file} names no top-level string property",
		},
		{
			name: "LockTemplatePlaceholderNotAString",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"locks": [{"resource": "file:{n}", "mode": "S"}]`), okScript)
			},
			file:   "t.json",
			reason: "placeholder {n}",
		},
		{
			name: "LockTemplateBadMode",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"locks": [{"resource": "workspace", "mode": "W"}]`), okScript)
			},
			file:   "t.json",
			reason: `mode "W", want S or X`,
		},
		{
			name: "LockTemplateEscapingLiteral",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"locks": [{"resource": "file:../x", "mode": "S"}]`), okScript)
			},
			file:   "t.json",
			reason: "want a relative path inside the workspace",
		},
		{
			name: "LockTemplatePartialPlaceholder",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"locks": [{"resource": "file:src/{path}", "mode": "S"}]`), okScript)
			},
			file:   "t.json",
			reason: "placeholder must be the whole path",
		},
		{
			name: "DuplicateNameInOneDirectory",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "a", tooltest.Manifest("x.same", ""), okScript)
				tooltest.AddTool(t, dir, "b", tooltest.Manifest("x.same", ""), okScript)
			},
			file:   "b.json",
			reason: `tool "x.same" is already defined by`,
		},
		{
			name: "NameWithoutNamespace",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("greet", ""), okScript)
			},
			file:   "t.json",
			reason: "want lowercase dotted segments",
		},
		{
			name: "NameAmbiguousWhenSanitised",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.a__b", ""), okScript)
			},
			file:   "t.json",
			reason: "sanitised name ambiguous",
		},
		{
			name: "NameTakenByBuiltin",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("choir.fs.read", ""), okScript)
			},
			file:   "t.json",
			reason: "taken by a built-in tool",
		},
		{
			name: "NameUnderReservedPrefix",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("choir.skill.transition", ""), okScript)
			},
			file:     "t.json",
			reason:   "reserved prefix",
			agentDir: true,
		},
		{
			name: "HostFlag",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"host": true`), okScript)
			},
			file:   "t.json",
			reason: "runtime.host",
		},
		{
			name: "MetaFlag",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"meta": true`), okScript)
			},
			file:   "t.json",
			reason: "runtime.meta",
		},
		{
			name: "MissingTimeout",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", `{"llm": {"name": "x.t", "description": "d", "parameters": {"type": "object"}},
				  "runtime": {"side_effect": "read", "trust": "own", "version": "1"}}`, okScript)
			},
			file:   "t.json",
			reason: "runtime.timeout_ms: 0",
		},
		{
			name: "BadSideEffect",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", `{"llm": {"name": "x.t", "description": "d", "parameters": {"type": "object"}},
				  "runtime": {"timeout_ms": 1, "side_effect": "delete", "trust": "own", "version": "1"}}`, okScript)
			},
			file:   "t.json",
			reason: "runtime.side_effect",
		},
		{
			name: "MissingSideEffect",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", `{"llm": {"name": "x.t", "description": "d", "parameters": {"type": "object"}},
				  "runtime": {"timeout_ms": 1, "trust": "own", "version": "1"}}`, okScript)
			},
			file:   "t.json",
			reason: "runtime.side_effect",
		},
		{
			name: "MissingTrust",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", `{"llm": {"name": "x.t", "description": "d", "parameters": {"type": "object"}},
				  "runtime": {"timeout_ms": 1, "side_effect": "read", "version": "1"}}`, okScript)
			},
			file:   "t.json",
			reason: "runtime.trust: required",
		},
		{
			name: "BadTrust",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"source": "web"`), okScript)
			},
			file:   "t.json",
			reason: "runtime.source: only an untrusted tool",
		},
		{
			name: "BadExposure",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"exposure": "all"`), okScript)
			},
			file:   "t.json",
			reason: "runtime.exposure",
		},
		{
			name: "MissingDescription",
			files: func(t *testing.T, dir string) {
				tooltest.AddTool(t, dir, "t", `{"llm": {"name": "x.t", "description": " ", "parameters": {"type": "object"}},
				  "runtime": {"timeout_ms": 1, "side_effect": "read", "trust": "own", "version": "1"}}`, okScript)
			},
			file:   "t.json",
			reason: "llm.description: required",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			tt.files(t, dir)
			cfg := builtin.Config{GlobalDir: dir}
			if tt.agentDir {
				cfg = builtin.Config{AgentDir: dir}
			}
			_, err := builtin.Build(cfg)
			tooltest.WantErrContains(t, err, filepath.Join(dir, tt.file), tt.reason)
			var me *tool.ManifestError
			if !errors.As(err, &me) || me.File != filepath.Join(dir, tt.file) {
				t.Errorf("got %T, want a *tool.ManifestError for %s", err, tt.file)
			}
		})
	}

	t.Run("AllProblemsReportedAtOnce", func(t *testing.T) {
		t.Parallel()
		global, agent := t.TempDir(), t.TempDir()
		tooltest.AddTool(t, global, "a", `nope`, okScript)
		tooltest.AddTool(t, agent, "b", tooltest.Manifest("x.b", ""), "")
		_, err := builtin.Build(builtin.Config{GlobalDir: global, AgentDir: agent})
		tooltest.WantErrContains(t, err, filepath.Join(global, "a.json"), filepath.Join(agent, "b.json"))
	})

	t.Run("OtherFilesAreIgnored", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		tooltest.WriteFile(t, filepath.Join(dir, "README.md"), "hi", 0o644)
		tooltest.WriteFile(t, filepath.Join(dir, ".hidden.json"), "nope", 0o644)
		if err := os.Mkdir(filepath.Join(dir, "src.json"), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := builtin.Build(builtin.Config{GlobalDir: dir}); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ExecPathRelativeToManifest", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		tooltest.AddTool(t, dir, "t", tooltest.Manifest("x.t", `"exec_path": "bin/run"`), "")
		tooltest.WriteFile(t, filepath.Join(dir, "bin", "run"), "#!/bin/sh\necho '{\"status\":\"success\",\"summary\":\"ran\"}'\n", 0o755)
		b := tooltest.Setup(t, builtin.Config{GlobalDir: dir})
		d, _ := b.Reg.Lookup("x.t")
		if got := d.Runtime().ExecPath; got != filepath.Join(dir, "bin", "run") {
			t.Errorf("ExecPath = %s", got)
		}
		if r := b.MustCall(t, "x.t", `{}`); r.Summary != "ran" {
			t.Errorf("got %+v", r)
		}
	})
}
