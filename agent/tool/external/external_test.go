package external_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

func TestExternalTool(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// echo: returns its stdin as output and its working directory.
	tooltest.AddTool(t, dir, "echo", tooltest.Manifest("x.echo", ""),
		`in=$(cat); printf '{"status":"success","summary":"echoed from %s","output":%s}' "$(pwd)" "$in"`)
	tooltest.AddTool(t, dir, "secrets", tooltest.Manifest("x.secrets", `"secret_resources": ["tok", "absent"]`),
		`fd=$CHOIR_SECRETS_FD; s=$(cat <&3); printf '{"status":"success","summary":"fd %s","output":%s}' "$fd" "$s"`)
	tooltest.AddTool(t, dir, "nosecrets", tooltest.Manifest("x.nosecrets", ""),
		`if [ -e /proc/self/fd/3 ]; then has=yes; else has=no; fi; printf '{"status":"success","summary":"%s %s"}' "$has" "$CHOIR_SECRETS_FD"`)
	tooltest.AddTool(t, dir, "env", tooltest.Manifest("x.env", ""),
		`printf '{"status":"success","summary":"env","output":"%s"}' "$(env | cut -d= -f1 | sort | tr '\n' ' ')"`)
	tooltest.AddTool(t, dir, "sleep", tooltest.Manifest("x.sleep", ""),
		`sleep 30 & sleep 30; echo '{"status":"success","summary":"woke"}'`)
	tooltest.AddTool(t, dir, "fail", tooltest.Manifest("x.fail", ""), `echo 'something broke' >&2; exit 3`)
	tooltest.AddTool(t, dir, "garbage", tooltest.Manifest("x.garbage", ""), `echo 'not json'`)
	tooltest.AddTool(t, dir, "badstatus", tooltest.Manifest("x.badstatus", ""), `echo '{"status":"ok","summary":"s"}'`)
	tooltest.AddTool(t, dir, "extra", tooltest.Manifest("x.extra", ""), `echo '{"status":"success","summary":"s","artifact_ref":"/etc/passwd"}'`)
	tooltest.AddTool(t, dir, "flood", tooltest.Manifest("x.flood", ""), `head -c 3000000 /dev/zero | tr '\0' 'a'`)
	tooltest.AddTool(t, dir, "big", tooltest.Manifest("x.big", ""),
		`printf '{"status":"success","summary":"big","output":"'; i=0; while [ $i -lt 2000 ]; do printf 'line %d of the big output\\n' $i; i=$((i+1)); done; printf '"}'`)
	tooltest.AddTool(t, dir, "errout", tooltest.Manifest("x.errout", ""), `echo '{"status":"error","summary":"no such thing","output":{"code":7}}'`)
	// Give x.sleep a short timeout.
	tooltest.WriteFile(t, filepath.Join(dir, "sleep.json"), strings.Replace(tooltest.Manifest("x.sleep", ""), `"timeout_ms": 5000`, `"timeout_ms": 300`, 1), 0o644)

	b := tooltest.Setup(t, builtin.Config{GlobalDir: dir})
	b.Env.SecretFunc = func(name string) (string, bool) {
		switch name {
		case "tok":
			return "s3cr3t", true
		case "other":
			return "not-yours", true
		}
		return "", false
	}

	t.Run("InputOnStdinResultOnStdout", func(t *testing.T) {
		t.Parallel()
		r := b.MustCall(t, "x.echo", `{"path": "a", "n": 2}`)
		if r.Status != tool.StatusSuccess || string(r.Output) != `{"path": "a", "n": 2}` {
			t.Errorf("got %+v", r)
		}
		if real, _ := filepath.EvalSymlinks(b.WS); !strings.HasSuffix(r.Summary, real) && !strings.HasSuffix(r.Summary, b.WS) {
			t.Errorf("ran in %q, want the workspace %s", r.Summary, b.WS)
		}
	})

	t.Run("OnlyDeclaredSecretsOnFD3", func(t *testing.T) {
		t.Parallel()
		r := b.MustCall(t, "x.secrets", `{}`)
		if r.Summary != "fd 3" || string(r.Output) != `{"tok":"s3cr3t"}` {
			t.Errorf("got %+v", r)
		}
		r = b.MustCall(t, "x.nosecrets", `{}`)
		if r.Summary != "no " {
			t.Errorf("a tool without secret_resources got fd 3: %+v", r)
		}
	})

	t.Run("MinimalEnvironment", func(t *testing.T) {
		t.Parallel()
		r := b.MustCall(t, "x.env", `{}`)
		var keys string
		if err := json.Unmarshal(r.Output, &keys); err != nil {
			t.Fatal(err)
		}
		allowed := map[string]bool{"PATH": true, "HOME": true, "LANG": true, "LC_ALL": true, "TZ": true, "USER": true,
			"SSH_AUTH_SOCK": true, "CHOIR_WORKSPACE": true, "CHOIR_TOOL": true, "PWD": true, "SHLVL": true, "_": true, "OLDPWD": true}
		for _, k := range strings.Fields(keys) {
			if !allowed[k] {
				t.Errorf("environment has %s", k)
			}
		}
	})

	t.Run("KeyedCallGetsItsKey", func(t *testing.T) {
		t.Parallel()
		d, err := b.Reg.Get("x.env")
		if err != nil {
			t.Fatal(err)
		}
		r, err := d.Execute(tool.WithCallKey(context.Background(), "ck-0123"), b.Env, json.RawMessage(`{}`))
		if err != nil || !strings.Contains(string(r.Output), "CHOIR_IDEMPOTENCY_KEY") {
			t.Errorf("a call with an idempotency key: %v, environment %s, want CHOIR_IDEMPOTENCY_KEY", err, r.Output)
		}
	})

	t.Run("TimeoutKillsProcessGroup", func(t *testing.T) {
		t.Parallel()
		start := time.Now()
		r := b.MustCall(t, "x.sleep", `{}`)
		if r.Status != tool.StatusError || !strings.Contains(r.Summary, "timed out after 300ms") {
			t.Errorf("got %+v", r)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("took %v: the background child kept the call alive", d)
		}
	})

	t.Run("NonZeroExitReportsStderr", func(t *testing.T) {
		t.Parallel()
		r := b.MustCall(t, "x.fail", `{}`)
		if r.Status != tool.StatusError || !strings.Contains(r.Summary, "exited with code 3: something broke") {
			t.Errorf("got %+v", r)
		}
	})

	t.Run("ToolErrorPassesThrough", func(t *testing.T) {
		t.Parallel()
		r := b.MustCall(t, "x.errout", `{}`)
		if r.Status != tool.StatusError || r.Summary != "no such thing" || string(r.Output) != `{"code":7}` {
			t.Errorf("got %+v", r)
		}
	})

	t.Run("InvalidResultsRefused", func(t *testing.T) {
		t.Parallel()
		for name, want := range map[string]string{
			"x.garbage":   "invalid result on stdout",
			"x.badstatus": `status "ok"`,
			"x.extra":     "artifact_ref: unknown field",
			"x.flood":     "more than 1048576 bytes on stdout",
		} {
			r := b.MustCall(t, name, `{}`)
			if r.Status != tool.StatusError || !strings.Contains(r.Summary, want) {
				t.Errorf("%s: got %+v, want an error with %q", name, r, want)
			}
		}
	})

	t.Run("LargeOutputSpillsToArtifact", func(t *testing.T) {
		t.Parallel()
		env := b.Env
		env.Limits.ResultBytes = 4096
		d, _ := b.Reg.Lookup("x.big")
		r, err := d.Execute(context.Background(), env, json.RawMessage(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if !r.Truncated || !strings.HasPrefix(r.ArtifactRef, ".choirtmp/artifacts/") || len(r.Output) > 4096 {
			t.Fatalf("got truncated=%v ref=%q output %d bytes", r.Truncated, r.ArtifactRef, len(r.Output))
		}
		var preview string
		if err := json.Unmarshal(r.Output, &preview); err != nil || !strings.HasPrefix(preview, "line 0 of the big output\n") {
			t.Errorf("preview %.80q: %v", preview, err)
		}
		full := tooltest.ReadFile(t, filepath.Join(b.WS, r.ArtifactRef))
		if !strings.HasSuffix(full, "line 1999 of the big output\n") || strings.Count(full, "\n") != 2000 {
			t.Errorf("artifact has %d lines", strings.Count(full, "\n"))
		}
		// The model reads the rest with choir.fs.read.
		rr := b.MustCall(t, tool.NameFSRead, `{"path": "`+r.ArtifactRef+`", "tail": 2}`)
		out := tooltest.Output[struct {
			Content    string `json:"content"`
			TotalLines int    `json:"total_lines"`
		}](t, rr)
		if out.Content != "line 1998 of the big output\nline 1999 of the big output\n" || out.TotalLines != 2000 {
			t.Errorf("read artifact: %+v", out)
		}
		// Content-addressed: the same output gives the same artifact.
		r2, _ := d.Execute(context.Background(), env, json.RawMessage(`{}`))
		if r2.ArtifactRef != r.ArtifactRef {
			t.Errorf("second run stored %s, want %s", r2.ArtifactRef, r.ArtifactRef)
		}
	})

	t.Run("InvalidInputNeverRuns", func(t *testing.T) {
		t.Parallel()
		d, _ := b.Reg.Lookup("x.echo")
		_, err := d.Execute(context.Background(), b.Env, json.RawMessage(`{"zzz": 1}`))
		var ie *tool.InputError
		if !errors.As(err, &ie) {
			t.Errorf("got %v, want *InputError", err)
		}
	})

	t.Run("CancelledCallerGetsContextError", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(100 * time.Millisecond); cancel() }()
		d, _ := b.Reg.Lookup("x.sleep")
		_, err := d.Execute(ctx, b.Env, json.RawMessage(`{}`))
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	})
}
