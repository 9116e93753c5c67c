// Package logs is choirctl logs: it prints, filters and follows the log
// of an agent or of choird, read from the files under --home's logs
// directory (choird need not run), across archive rotations.
package logs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/config"
)

// logsOptions are choirctl logs' flags.
type logsOptions struct {
	target  string
	follow  bool
	since   string
	level   string
	session string
	json    bool
	// poll is how often -f looks for new lines (default 200 ms).
	poll time.Duration
	now  func() time.Time
}

// Env is what the command needs of choirctl: the home (read when the
// command runs, after the flags), the output streams, and how to mark an
// error as bad input (exit code 2).
type Env struct {
	Home     func() string
	Stdout   io.Writer
	Stderr   io.Writer
	UsageErr func(error) error
}

// Command is choirctl logs.
func Command(env Env) *cobra.Command {
	o := &logsOptions{}
	cmd := &cobra.Command{
		Use:   "logs <agent-id|choird>",
		Short: "Print an agent's or choird's current log, and with -f follow it",
		Long: `Print the current log file of an agent (.choir.d/logs/<agent-id>.log) or of
choird (.choir.d/logs/choird.log), read directly from --home: choird need not
run. Lines print as readable text (time level source [agent/session/lane] msg
key=value...), or as the JSON they are stored as with --json. With -f the
command follows the file like tail -f, across archive rotations, until Ctrl-C.
Archived logs are in .choir.d/logs/archive/<source>/<ts>.log.gz (zcat them).

Exit codes: 0 success, 1 error, 2 bad input (an unknown agent, a bad flag).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			o.target = args[0]
			return run(cmd.Context(), env, o)
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&o.follow, "follow", "f", false, "keep printing new lines as they are written, until Ctrl-C")
	f.StringVar(&o.since, "since", "", "only lines from this long ago (10m, 2h) or since this RFC 3339 time")
	f.StringVar(&o.level, "level", "", "only lines at this level or above: debug, info, warn, error")
	f.StringVar(&o.session, "session", "", "only lines of this session id")
	f.BoolVar(&o.json, "json", false, "print the stored JSON lines unchanged")
	return cmd
}

// logFilter selects lines.
type logFilter struct {
	since   time.Time
	level   int
	leveled bool
	session string
}

func (o *logsOptions) filter(env Env) (logFilter, error) {
	var f logFilter
	now := time.Now
	if o.now != nil {
		now = o.now
	}
	if o.since != "" {
		if d, err := time.ParseDuration(o.since); err == nil {
			f.since = now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, o.since); err == nil {
			f.since = t
		} else {
			return f, env.UsageErr(fmt.Errorf("--since %q: want a duration (10m, 2h) or an RFC 3339 time (2025-03-01T12:00:00Z)", o.since))
		}
	}
	if o.level != "" {
		lv, ok := parseLevel(o.level)
		if !ok {
			return f, env.UsageErr(fmt.Errorf("--level %q: want debug, info, warn or error", o.level))
		}
		f.level, f.leveled = lv, true
	}
	f.session = o.session
	return f, nil
}

// parseLevel reads slog's level names (DEBUG, INFO, WARN, ERROR, and
// offsets such as INFO+2) as slog's numbers.
func parseLevel(s string) (int, bool) {
	s = strings.ToUpper(s)
	name, off, hasOff := strings.Cut(s, "+")
	if !hasOff {
		name, off, hasOff = strings.Cut(s, "-")
		off = "-" + off
	}
	base, ok := map[string]int{"DEBUG": -4, "INFO": 0, "WARN": 4, "WARNING": 4, "ERROR": 8}[name]
	if !ok {
		return 0, false
	}
	if hasOff {
		n, err := strconv.Atoi(off)
		if err != nil {
			return 0, false
		}
		base += n
	}
	return base, true
}

// keep reports whether the line passes the filter. Lines that are not
// JSON (a panic's stack trace, a tool's stray output) pass only when no
// filter is set.
func (f logFilter) keep(line logLine) bool {
	if line.fields == nil {
		return f.since.IsZero() && !f.leveled && f.session == ""
	}
	if !f.since.IsZero() && (line.time.IsZero() || line.time.Before(f.since)) {
		return false
	}
	if f.leveled {
		lv, ok := parseLevel(line.level)
		if !ok || lv < f.level {
			return false
		}
	}
	if f.session != "" && line.str("session_id") != f.session && line.str("session") != f.session {
		return false
	}
	return true
}

// knownSources are the agents of config.json, those with a log, and choird.
func knownSources(home string) []string {
	known := []string{"choird"}
	if raw, err := os.ReadFile(filepath.Join(home, "config.json")); err == nil {
		if cfg, err := config.Parse(raw); err == nil {
			for id := range cfg.Agents {
				known = append(known, id)
			}
		}
	}
	if logs, err := filepath.Glob(filepath.Join(home, "logs", "*.log")); err == nil {
		for _, l := range logs {
			known = append(known, strings.TrimSuffix(filepath.Base(l), ".log"))
		}
	}
	sort.Strings(known)
	return slices.Compact(known)
}

func run(ctx context.Context, env Env, o *logsOptions) error {
	home := env.Home()
	filter, err := o.filter(env)
	if err != nil {
		return err
	}
	if known := knownSources(home); !slices.Contains(known, o.target) {
		return env.UsageErr(fmt.Errorf("unknown agent %q: known are %s (the agents of %s, and choird)",
			o.target, strings.Join(known, ", "), filepath.Join(home, "config.json")))
	}
	path := filepath.Join(home, "logs", o.target+".log")
	print := func(raw []byte) error {
		line := parseLogLine(raw)
		if !filter.keep(line) {
			return nil
		}
		// Logged values carry model-written text: escape what a terminal
		// would obey (always, not only on a terminal: the output is piped
		// into less -R or a file later cat-ed just as often).
		var err error
		if o.json || line.fields == nil {
			_, err = fmt.Fprintf(env.Stdout, "%s\n", escapeControls(string(raw), true))
		} else {
			_, err = fmt.Fprintln(env.Stdout, escapeControls(line.text(), false))
		}
		return err
	}
	t := &tail{path: path}
	defer t.close()
	if err := t.open(); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	} else if err != nil && !o.follow {
		fmt.Fprintf(env.Stderr, "choirctl: no current log at %s (archived logs are in %s)\n", path,
			filepath.Join(home, "logs", "archive", o.target))
		return nil
	}
	if !o.follow {
		return t.drain(print, true)
	}
	poll := o.poll
	if poll == 0 {
		poll = 200 * time.Millisecond
	}
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		if err := t.follow(print); err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// tail reads a log file's lines as they are written, following it when
// it is replaced (archived and started anew) or truncated.
type tail struct {
	path    string
	f       *os.File
	offset  int64
	partial []byte
}

func (t *tail) open() error {
	f, err := os.Open(t.path)
	if err != nil {
		return err
	}
	t.f, t.offset, t.partial = f, 0, nil
	return nil
}

func (t *tail) close() {
	if t.f != nil {
		t.f.Close()
		t.f = nil
	}
}

// drain emits every whole line up to the end of the open file; at the
// end of a file that is done with (final), a last line without a newline
// is emitted too.
func (t *tail) drain(emit func([]byte) error, final bool) error {
	if t.f == nil {
		return nil
	}
	buf := make([]byte, 64<<10)
	for {
		n, err := t.f.Read(buf)
		t.offset += int64(n)
		data := append(t.partial, buf[:n]...)
		for {
			i := bytes.IndexByte(data, '\n')
			if i < 0 {
				break
			}
			if eerr := emit(data[:i]); eerr != nil {
				return eerr
			}
			data = data[i+1:]
		}
		t.partial = append([]byte(nil), data...)
		if errors.Is(err, io.EOF) || (err == nil && n == 0) {
			break
		}
		if err != nil {
			return fmt.Errorf("read %s: %w", t.path, err)
		}
	}
	if final && len(t.partial) > 0 {
		p := t.partial
		t.partial = nil
		return emit(p)
	}
	return nil
}

// follow emits the lines written since the last call. When the path now
// names another file (the log was archived), the old file is read to its
// end first, so no line written before the rotation is missed; a file
// cut shorter than what was read is read again from its start.
func (t *tail) follow(emit func([]byte) error) error {
	if err := t.drain(emit, false); err != nil {
		return err
	}
	st, err := os.Stat(t.path)
	if t.f != nil && err == nil {
		if cur, ferr := t.f.Stat(); ferr == nil && os.SameFile(cur, st) {
			if st.Size() < t.offset {
				t.f.Seek(0, io.SeekStart)
				t.offset, t.partial = 0, nil
			}
			return nil
		}
	}
	// Replaced, removed, or not there yet.
	if err := t.drain(emit, true); err != nil {
		return err
	}
	t.close()
	if err := t.open(); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	return t.drain(emit, false)
}

// logLine is one line of a log: its JSON fields in order, or nil for a
// line that is not a JSON object.
type logLine struct {
	raw    []byte
	fields []logField
	time   time.Time
	level  string
}

type logField struct {
	key   string
	value json.RawMessage
}

func parseLogLine(raw []byte) logLine {
	line := logLine{raw: raw}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return line
	}
	var fields []logField
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return line
		}
		key, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return line
		}
		fields = append(fields, logField{key: key, value: v})
	}
	line.fields = fields
	if t, err := time.Parse(time.RFC3339Nano, line.str("time")); err == nil {
		line.time = t
	}
	line.level = line.str("level")
	return line
}

// str is the string value of key, or "".
func (l logLine) str(key string) string {
	for _, f := range l.fields {
		if f.key == key {
			var s string
			if json.Unmarshal(f.value, &s) == nil {
				return s
			}
		}
	}
	return ""
}

// text renders the line as: time level source [agent/session/lane] msg
// key=value...
func (l logLine) text() string {
	var b strings.Builder
	if !l.time.IsZero() {
		b.WriteString(l.time.Local().Format("2006-01-02 15:04:05.000"))
	} else {
		b.WriteString(l.str("time"))
	}
	fmt.Fprintf(&b, " %-5s %s", l.level, l.str("source"))
	var ctxParts []string
	agent := l.str("agent_id")
	if agent == "" && l.str("source") != "choird" {
		agent = l.str("source")
	}
	for _, p := range []string{agent, l.str("session_id"), l.str("lane")} {
		if p != "" {
			ctxParts = append(ctxParts, p)
		}
	}
	if len(ctxParts) > 0 {
		if agent == "" {
			ctxParts = append([]string{"-"}, ctxParts...)
		}
		b.WriteString(" [" + strings.Join(ctxParts, "/") + "]")
	}
	b.WriteString(" " + l.str("msg"))
	for _, f := range l.fields {
		switch f.key {
		case "time", "level", "source", "msg", "agent_id", "session_id", "lane":
			continue
		}
		b.WriteString(" " + f.key + "=")
		var s string
		if json.Unmarshal(f.value, &s) == nil {
			if s == "" || strings.ContainsAny(s, " \t\"=") {
				s = strconv.Quote(s)
			}
			b.WriteString(s)
		} else {
			b.Write(f.value)
		}
	}
	return b.String()
}
