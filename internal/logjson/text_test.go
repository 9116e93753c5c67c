package logjson_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"regexp"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/choirhq/choir/internal/logjson"
)

func TestFormatChoice(t *testing.T) {
	t.Parallel()
	yes := func(io.Writer) bool { return true }
	no := func(io.Writer) bool { return false }
	for _, tc := range []struct {
		flag     string
		terminal func(io.Writer) bool
		want     string
	}{
		{"", yes, logjson.FormatText},
		{"auto", yes, logjson.FormatText},
		{"auto", no, logjson.FormatJSON},
		{"", no, logjson.FormatJSON},
		{"json", yes, logjson.FormatJSON},
		{"text", no, logjson.FormatText},
		{"text", yes, logjson.FormatText},
	} {
		f, err := logjson.ParseFormat(tc.flag)
		if err != nil {
			t.Fatalf("ParseFormat(%q): %v", tc.flag, err)
		}
		if got := logjson.Resolve(f, io.Discard, tc.terminal); got != tc.want {
			t.Errorf("--log-format=%q on a terminal %v: %s, want %s", tc.flag, tc.terminal(nil), got, tc.want)
		}
	}
	if _, err := logjson.ParseFormat("xml"); err == nil {
		t.Error("--log-format=xml accepted")
	}
}

// textLine is a text line: local time to the millisecond, the level
// padded to five, the message, the attributes.
var textLine = regexp.MustCompile(`^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} (INFO |WARN |ERROR|DEBUG) `)

func TestTextHandlerWritesOneLineAPersonReads(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	logger := slog.New(logjson.NewTextHandler(&buf, slog.LevelInfo)).With(slog.String("source", "choird"))
	logger.Info("choird ready", slog.Int64("config_version", 3), slog.Any("agents", []string{"assistant"}))
	logger.WithGroup("req").Warn("heartbeat failed; retrying", slog.Duration("backoff", 1500*time.Millisecond),
		slog.String("error", "dial unix /x/choird.sock: connect: no such file"))
	logger.Debug("not shown")
	logger.Error("bare")
	lines := bytes.Split(bytes.TrimSuffix(buf.Bytes(), []byte("\n")), []byte("\n"))
	want := []string{
		` choird ready source=choird config_version=3 agents=[assistant]`,
		` heartbeat failed; retrying source=choird req.backoff=1.5s req.error="dial unix /x/choird.sock: connect: no such file"`,
		` bare source=choird`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), buf.Bytes())
	}
	for i, l := range lines {
		head := textLine.Find(l)
		if head == nil {
			t.Errorf("line %d has no time and level: %q", i, l)
			continue
		}
		if got := string(l[len(head)-1:]); got != want[i] {
			t.Errorf("line %d:\n got %q\nwant %q", i, got, want[i])
		}
	}
}

// TestStreamHandlerOnATerminal writes through the handler choird and
// choirctl make for their stderr: on a real terminal (a pty) the line is
// text, on a pipe it is JSON, and --log-format json keeps JSON on the
// terminal.
func TestStreamHandlerOnATerminal(t *testing.T) {
	t.Parallel()
	ptmx, tty, err := pty.Open()
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	defer tty.Close()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if !logjson.IsTerminal(tty) || logjson.IsTerminal(w) || logjson.IsTerminal(&bytes.Buffer{}) {
		t.Fatalf("IsTerminal: pty %v, pipe %v, buffer %v", logjson.IsTerminal(tty), logjson.IsTerminal(w),
			logjson.IsTerminal(&bytes.Buffer{}))
	}
	onTTY := bufio.NewReader(ptmx)
	onPipe := bufio.NewReader(r)

	slog.New(logjson.NewStreamHandler(tty, slog.LevelInfo, "auto")).Info("ready", slog.Int("agents", 1))
	if l, _ := onTTY.ReadString('\n'); !textLine.MatchString(l) || !bytes.Contains([]byte(l), []byte("ready agents=1")) {
		t.Errorf("auto on a terminal wrote %q, want a text line", l)
	}
	slog.New(logjson.NewStreamHandler(tty, slog.LevelInfo, "json")).Info("ready", slog.Int("agents", 1))
	if l, _ := onTTY.ReadString('\n'); !json.Valid(bytes.TrimSpace([]byte(l))) {
		t.Errorf("json on a terminal wrote %q, want JSON", l)
	}
	slog.New(logjson.NewStreamHandler(w, slog.LevelInfo, "auto")).Info("ready", slog.Int("agents", 1))
	if l, _ := onPipe.ReadString('\n'); !json.Valid(bytes.TrimSpace([]byte(l))) {
		t.Errorf("auto on a pipe wrote %q, want JSON", l)
	}
}
