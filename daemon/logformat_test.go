package daemon_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/creack/pty"

	"github.com/choirhq/choir/internal/choirdtest"
)

// TestChoirdLogsTextOnATerminal runs the choird binary on a home without
// config.json, so that it logs its start and its failure and exits: with
// its stderr on a terminal (a pty) the lines are text a person reads; with
// --log-format json, or on a pipe, they are JSON; logs/choird.log is JSON
// every time.
func TestChoirdLogsTextOnATerminal(t *testing.T) {
	t.Parallel()
	bin := choirdtest.Binary(t, "cmd/choird")
	text := regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (INFO |ERROR) choird (starting|failed) `)
	run := func(t *testing.T, onTTY bool, args ...string) (stderr []string, file []byte) {
		t.Helper()
		home := t.TempDir()
		cmd := exec.Command(bin, append([]string{"--home", home}, args...)...)
		var out io.Reader
		if onTTY {
			ptmx, tty, err := pty.Open()
			if err != nil {
				t.Fatal(err)
			}
			defer ptmx.Close()
			defer tty.Close()
			cmd.Stderr, out = tty, ptmx
		} else {
			var buf bytes.Buffer
			cmd.Stderr, out = &buf, &buf
		}
		if err := cmd.Run(); err == nil {
			t.Fatal("choird ran without config.json")
		}
		// Two lines: starting, failed. A pty gives back what it holds
		// without an end of file, so read exactly those.
		rd := bufio.NewReader(out)
		for range 2 {
			l, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("stderr after %q: %v", stderr, err)
			}
			stderr = append(stderr, strings.TrimRight(l, "\r\n"))
		}
		file, err := os.ReadFile(filepath.Join(home, "logs", "choird.log"))
		if err != nil {
			t.Fatal(err)
		}
		return stderr, file
	}
	allJSON := func(t *testing.T, what string, b []byte) {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		for _, l := range lines {
			if !json.Valid([]byte(strings.TrimSpace(l))) {
				t.Errorf("%s: %q is not JSON", what, l)
			}
		}
	}

	t.Run("TextOnATerminal", func(t *testing.T) {
		stderr, file := run(t, true)
		for _, l := range stderr {
			if !text.MatchString(l) {
				t.Errorf("on a terminal choird wrote %q, want a text line", l)
			}
		}
		if !strings.Contains(stderr[1], "config.json") {
			t.Errorf("the failure does not say what failed: %q", stderr[1])
		}
		allJSON(t, "logs/choird.log", file)
	})
	t.Run("JSONWhenAsked", func(t *testing.T) {
		stderr, file := run(t, true, "--log-format", "json")
		allJSON(t, "stderr on a terminal with --log-format json", []byte(strings.Join(stderr, "\n")))
		allJSON(t, "logs/choird.log", file)
	})
	t.Run("JSONOnAPipe", func(t *testing.T) {
		stderr, _ := run(t, false)
		allJSON(t, "stderr on a pipe", []byte(strings.Join(stderr, "\n")))
	})
	t.Run("TextWhenAsked", func(t *testing.T) {
		stderr, file := run(t, false, "--log-format=text")
		for _, l := range stderr {
			if !text.MatchString(l) {
				t.Errorf("--log-format text wrote %q, want a text line", l)
			}
		}
		allJSON(t, "logs/choird.log", file)
	})
}
