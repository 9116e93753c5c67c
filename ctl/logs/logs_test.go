package logs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// logsHome is a .choir.d with config.json naming agent alice, and logs.
func logsHome(t *testing.T, logs map[string]string) string {
	t.Helper()
	home := t.TempDir()
	cfg := `{"agents": {"alice": {}}}`
	if err := os.WriteFile(filepath.Join(home, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(filepath.Join(home, "logs"), 0o700)
	for name, content := range logs {
		if err := os.WriteFile(filepath.Join(home, "logs", name+".log"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

const sampleLog = `{"time":"2025-03-01T12:00:00Z","level":"INFO","msg":"choird starting","source":"choird","pid":7}
{"time":"2025-03-01T12:05:00Z","level":"WARN","msg":"agent instance died","source":"choird","agent_id":"alice","session_id":"s1","exit_code":137}
{"time":"2025-03-01T12:10:00Z","level":"DEBUG","msg":"noise","source":"choird"}
{"time":"2025-03-01T12:15:00Z","level":"ERROR","msg":"edge failed","source":"alice","session_id":"s2","lane":"edge","error":"model said no"}
`

func TestLogs(t *testing.T) {
	t.Parallel()
	home := logsHome(t, map[string]string{"choird": sampleLog})
	at := func(s string) string {
		tm, _ := time.Parse(time.RFC3339, s)
		return tm.Local().Format("2006-01-02 15:04:05.000")
	}

	t.Run("TextRendering", func(t *testing.T) {
		t.Parallel()
		code, out, errs := runCommand(home, "choird")
		want := at("2025-03-01T12:00:00Z") + " INFO  choird choird starting pid=7\n" +
			at("2025-03-01T12:05:00Z") + " WARN  choird [alice/s1] agent instance died exit_code=137\n" +
			at("2025-03-01T12:10:00Z") + " DEBUG choird noise\n" +
			at("2025-03-01T12:15:00Z") + ` ERROR alice [alice/s2/edge] edge failed error="model said no"` + "\n"
		if code != 0 || out != want {
			t.Errorf("exit %d, stderr %s\ngot:\n%s\nwant:\n%s", code, errs, out, want)
		}
	})
	t.Run("JSONPassesLinesThrough", func(t *testing.T) {
		t.Parallel()
		code, out, _ := runCommand(home, "choird", "--json")
		if code != 0 || out != sampleLog {
			t.Errorf("exit %d:\n%s", code, out)
		}
	})
	t.Run("LevelFilterKeepsThatLevelAndAbove", func(t *testing.T) {
		t.Parallel()
		_, out, _ := runCommand(home, "choird", "--json", "--level", "warn")
		if !strings.Contains(out, "agent instance died") || !strings.Contains(out, "edge failed") || strings.Count(out, "\n") != 2 {
			t.Errorf("--level warn:\n%s", out)
		}
	})
	t.Run("SessionFilter", func(t *testing.T) {
		t.Parallel()
		_, out, _ := runCommand(home, "choird", "--json", "--session", "s2")
		if strings.Count(out, "\n") != 1 || !strings.Contains(out, "edge failed") {
			t.Errorf("--session s2:\n%s", out)
		}
	})
	t.Run("SinceTimeAndDuration", func(t *testing.T) {
		t.Parallel()
		_, out, _ := runCommand(home, "choird", "--json", "--since", "2025-03-01T12:10:00Z")
		if strings.Count(out, "\n") != 2 || strings.Contains(out, "died") {
			t.Errorf("--since RFC 3339:\n%s", out)
		}
		var buf bytes.Buffer
		g := Env{Home: func() string { return home }, Stdout: &buf, Stderr: &buf, UsageErr: usage}
		now := func() time.Time { return time.Date(2025, 3, 1, 12, 20, 0, 0, time.UTC) }
		if err := run(t.Context(), g, &logsOptions{target: "choird", since: "6m", json: true, now: now}); err != nil {
			t.Fatal(err)
		}
		if strings.Count(buf.String(), "\n") != 1 || !strings.Contains(buf.String(), "edge failed") {
			t.Errorf("--since 6m:\n%s", buf.String())
		}
	})
	t.Run("BadFlagsAreUsageErrors", func(t *testing.T) {
		t.Parallel()
		for _, args := range [][]string{{"--since", "yesterday"}, {"--level", "loud"}} {
			code, _, errs := runCommand(home, append([]string{"choird"}, args...)...)
			if code != 2 || !strings.Contains(errs, args[0]) {
				t.Errorf("%v: exit %d: %s", args, code, errs)
			}
		}
	})
	t.Run("UnknownAgentListsTheKnownOnes", func(t *testing.T) {
		t.Parallel()
		code, out, errs := runCommand(home, "bob")
		if code != 2 || out != "" || !strings.Contains(errs, `unknown agent "bob"`) || !strings.Contains(errs, "alice, choird") {
			t.Errorf("exit %d: %s%s", code, out, errs)
		}
	})
	t.Run("KnownAgentWithoutALogSaysWhereTheArchivesAre", func(t *testing.T) {
		t.Parallel()
		code, out, errs := runCommand(home, "alice")
		if code != 0 || out != "" || !strings.Contains(errs, filepath.Join("archive", "alice")) {
			t.Errorf("exit %d: %s%s", code, out, errs)
		}
	})
}

// syncBuf is a bytes.Buffer safe for a writer and a reader.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

func TestLogsFollowAcrossRotation(t *testing.T) {
	t.Parallel()
	home := logsHome(t, map[string]string{"choird": ""})
	path := filepath.Join(home, "logs", "choird.log")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	line := func(f *os.File, i int) {
		fmt.Fprintf(f, `{"time":"2025-03-01T12:00:00Z","level":"INFO","msg":"line %d","source":"choird"}`+"\n", i)
	}
	line(f, 0)
	out := &syncBuf{}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, Env{Home: func() string { return home }, Stdout: out, Stderr: out, UsageErr: usage},
			&logsOptions{target: "choird", follow: true, json: true, poll: 5 * time.Millisecond})
	}()
	waitOutput := func(n int) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(out.String(), "\n") < n {
			if time.Now().After(deadline) {
				t.Fatalf("waited for %d lines; got:\n%s", n, out.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitOutput(1)
	for i := 1; i <= 3; i++ {
		line(f, i)
	}
	// Rotation as choird does it: the file is moved away with lines still
	// unread in it, and a new one starts at the path.
	os.MkdirAll(filepath.Join(home, "logs", "archive", "choird"), 0o700)
	if err := os.Rename(path, filepath.Join(home, "logs", "archive", "choird", "x.log")); err != nil {
		t.Fatal(err)
	}
	line(f, 4) // written by a writer that had not yet reopened
	f.Close()
	f, err = os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	for i := 5; i <= 7; i++ {
		line(f, i)
	}
	waitOutput(8)
	// A truncated file is read again from its start.
	f.Truncate(0)
	line(f, 8)
	f.Close()
	waitOutput(9)
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("logs -f ended with %v", err)
	}
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		got = append(got, parseLogLine([]byte(l)).str("msg"))
	}
	want := "line 0,line 1,line 2,line 3,line 4,line 5,line 6,line 7,line 8"
	if strings.Join(got, ",") != want {
		t.Errorf("followed lines:\n%s\nwant %s", strings.Join(got, ","), want)
	}
}

// usageError marks bad input, as choirctl's own does.
type usageError struct{ error }

func usage(err error) error { return usageError{err} }

// runCommand runs choirctl logs with args on home, as choirctl does, and
// returns its exit code (2 for bad input) and output.
func runCommand(home string, args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	cmd := Command(Env{Home: func() string { return home }, Stdout: &out, Stderr: &errb, UsageErr: usage})
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&errb)
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usage(err) })
	err := cmd.ExecuteContext(context.Background())
	if err == nil {
		return 0, out.String(), errb.String()
	}
	fmt.Fprintf(&errb, "choirctl: %v\n", err)
	var ue usageError
	if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "accepts ") {
		return 2, out.String(), errb.String()
	}
	return 1, out.String(), errb.String()
}

// TestLogsEscapeTerminalControls plants the escape sequences a model can
// put into a logged value (a tool argument, a page title): an OSC that
// sets the window title, a CSI that clears the screen, C1 controls, a
// newline that forges a log line, and bidi overrides. None reaches the
// terminal raw, in text or --json output.
func TestLogsEscapeTerminalControls(t *testing.T) {
	t.Parallel()
	// In the JSON file, \u001b and \u009b are the escaped forms slog writes;
	// the raw U+202E (bidi override) and U+009B are as slog leaves them.
	hostile := `{"time":"2025-03-01T12:00:00Z","level":"INFO","msg":"tool \u001b]0;pwned\u0007 ran","source":"alice",` +
		`"arg":"\u001b[2J\u001b[H","c1":"` + "\u009b" + `31m","bidi":"evil` + "\u202e" + `gpj.exe","nl":"a\nINFO forged line","k\u001b[1m":"v"}` + "\n" +
		"not json \x1b[31mred\x1b[0m \x9b2J\n"
	home := logsHome(t, map[string]string{"alice": hostile})
	for _, args := range [][]string{{"alice"}, {"alice", "--json"}} {
		code, out, errs := runCommand(home, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, errs)
		}
		for _, bad := range []string{"\x1b", "\x07", "\u009b", "\x9b", "\u202e"} {
			if strings.Contains(out, bad) {
				t.Errorf("%v: output carries %q raw:\n%q", args, bad, out)
			}
		}
		if n := strings.Count(out, "\n"); n != 2 {
			t.Errorf("%v: %d lines, want 2 (a value's newline forged a line):\n%s", args, n, out)
		}
		if !strings.Contains(out, `\x1b`) && !strings.Contains(out, `\u001b`) {
			t.Errorf("%v: the escape is not shown escaped:\n%s", args, out)
		}
	}
}
