package proc_test

import (
	"context"
	"encoding/json"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

type execOut struct {
	ExitCode    int    `json:"exit_code"`
	Signal      string `json:"signal"`
	TimedOut    bool   `json:"timed_out"`
	Output      string `json:"output"`
	OutputBytes int64  `json:"output_bytes"`
}

func TestExec(t *testing.T) {
	t.Parallel()
	b := tooltest.Setup(t, builtin.Config{})
	b.Env.SecretFunc = func(string) (string, bool) { return "s3cr3t-value", true }

	t.Run("RunsInWorkspace", func(t *testing.T) {
		t.Parallel()
		r := b.MustCall(t, tool.NameExec, `{"command": "pwd; echo to-stderr >&2"}`)
		out := tooltest.Output[execOut](t, r)
		real, _ := filepath.EvalSymlinks(b.WS)
		if r.Status != tool.StatusSuccess || r.Summary != "exit code 0" || out.Output != real+"\nto-stderr\n" && out.Output != b.WS+"\nto-stderr\n" {
			t.Errorf("got %+v %+v", r, out)
		}
	})

	t.Run("ExitCodeReported", func(t *testing.T) {
		t.Parallel()
		r := b.MustCall(t, tool.NameExec, `{"command": "echo nope; exit 7"}`)
		out := tooltest.Output[execOut](t, r)
		if r.Status != tool.StatusError || r.Summary != "exit code 7" || out.ExitCode != 7 || out.Output != "nope\n" {
			t.Errorf("got %+v %+v", r, out)
		}
	})

	t.Run("NoSecretsInEnvironment", func(t *testing.T) {
		t.Parallel()
		r := b.MustCall(t, tool.NameExec, `{"command": "env; cat /proc/self/environ"}`)
		if strings.Contains(string(r.Output), "s3cr3t") {
			t.Errorf("secret in the environment: %s", r.Output)
		}
		if !strings.Contains(string(r.Output), "CHOIR_WORKSPACE=") {
			t.Errorf("CHOIR_WORKSPACE missing: %s", r.Output)
		}
	})

	t.Run("TimeoutKillsTheGroup", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		r := b.MustCall(t, tool.NameExec, `{"command": "echo started; sleep 30 & sleep 30", "timeout_ms": 1000}`)
		out := tooltest.Output[execOut](t, r)
		if r.Status != tool.StatusError || !out.TimedOut || out.Signal != "killed" || out.Output != "started\n" {
			t.Errorf("got %+v %+v", r, out)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Errorf("took %v", d)
		}
	})

	t.Run("LongOutputKeepsHeadAndTailWithArtifact", func(t *testing.T) {
		t.Parallel()
		d, _ := b.Reg.Lookup(tool.NameExec)
		env := b.Env
		env.Limits.ResultBytes = 4096
		r, err := d.Execute(context.Background(), env, json.RawMessage(`{"command": "seq 1 20000"}`))
		if err != nil {
			t.Fatal(err)
		}
		out := tooltest.Output[execOut](t, r)
		if !r.Truncated || r.ArtifactRef == "" || len(r.Output) > 4096 {
			t.Fatalf("truncated %v ref %q len %d", r.Truncated, r.ArtifactRef, len(r.Output))
		}
		if !strings.HasPrefix(out.Output, "1\n2\n3\n") || !strings.HasSuffix(out.Output, "19999\n20000\n") || !strings.Contains(out.Output, "read artifact_ref") {
			t.Errorf("preview %q", out.Output)
		}
		full := tooltest.ReadFile(t, filepath.Join(b.WS, r.ArtifactRef))
		if strings.Count(full, "\n") != 20000 || int64(len(full)) != out.OutputBytes {
			t.Errorf("artifact has %d lines, %d bytes; output_bytes %d", strings.Count(full, "\n"), len(full), out.OutputBytes)
		}
	})

	t.Run("CaptureCapKeepsHeadAndTail", func(t *testing.T) {
		t.Parallel()
		d, _ := b.Reg.Lookup(tool.NameExec)
		env := b.Env
		env.Limits = tool.Limits{ResultBytes: 2048, CaptureBytes: 64 << 10}
		r, err := d.Execute(context.Background(), env, json.RawMessage(`{"command": "echo FIRST; head -c 3000000 /dev/zero | tr '\\0' x; echo; echo LAST"}`))
		if err != nil {
			t.Fatal(err)
		}
		out := tooltest.Output[execOut](t, r)
		full := tooltest.ReadFile(t, filepath.Join(b.WS, r.ArtifactRef))
		if out.OutputBytes != 3000012 || len(full) > 70<<10 || !strings.HasPrefix(full, "FIRST\n") || !strings.HasSuffix(full, "\nLAST\n") || !strings.Contains(full, "bytes not kept") {
			t.Errorf("output_bytes %d, artifact %d bytes", out.OutputBytes, len(full))
		}
	})
}
