package logjson

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"golang.org/x/sys/unix"
)

// The formats of log lines on a stream a person may read (choird's and
// choirctl's standard error, --log-format). Log files are always JSON.
const (
	// FormatAuto is text on a terminal, JSON anywhere else.
	FormatAuto = "auto"
	FormatText = "text"
	FormatJSON = "json"
)

// ParseFormat checks a --log-format value; "" means FormatAuto.
func ParseFormat(s string) (string, error) {
	switch s {
	case "", FormatAuto:
		return FormatAuto, nil
	case FormatText, FormatJSON:
		return s, nil
	}
	return "", fmt.Errorf("log format %q: want auto, text or json", s)
}

// Resolve is the format of the lines written to w: format itself when it
// is text or json; for auto (or ""), text when isTerminal says w is a
// terminal, else JSON, so that a pipe, a file or journald gets lines a
// program can parse.
func Resolve(format string, w io.Writer, isTerminal func(io.Writer) bool) string {
	switch format {
	case FormatText, FormatJSON:
		return format
	}
	if isTerminal != nil && isTerminal(w) {
		return FormatText
	}
	return FormatJSON
}

// IsTerminal reports whether w is a file open on a terminal.
func IsTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// NewStreamHandler returns the handler for w at level in format, resolved
// against w with IsTerminal.
func NewStreamHandler(w io.Writer, level slog.Leveler, format string) slog.Handler {
	if Resolve(format, w, IsTerminal) == FormatText {
		return NewTextHandler(w, level)
	}
	return NewHandler(w, level)
}

// NewTextHandler returns a handler writing one line a person reads per
// record, in the style of systemd's journal and miniflux:
//
//	2026-11-28 17:31:22.123 INFO  choird ready config_version=3 gateways=1
//
// local time to the millisecond, the level, the message, then the
// attributes as key=value (quoted when they need it, groups dotted,
// durations as Go writes them: 45s, 1.5s).
func NewTextHandler(w io.Writer, level slog.Leveler) slog.Handler {
	t := &textHandler{out: w, mu: &sync.Mutex{}, buf: &bytes.Buffer{}}
	t.attrs = slog.NewTextHandler(t.buf, &slog.HandlerOptions{Level: level, ReplaceAttr: dropBuiltins})
	return t
}

// textHandler writes the line's head itself and lets a slog.TextHandler
// format the attributes into a buffer shared by every handler derived
// from it (WithAttrs, WithGroup), under one lock, so that a line is one
// write.
type textHandler struct {
	out   io.Writer
	mu    *sync.Mutex
	buf   *bytes.Buffer
	attrs slog.Handler
}

// dropBuiltins leaves only the attributes: the head is written apart.
func dropBuiltins(groups []string, a slog.Attr) slog.Attr {
	if len(groups) == 0 && (a.Key == slog.TimeKey || a.Key == slog.LevelKey || a.Key == slog.MessageKey) {
		return slog.Attr{}
	}
	return a
}

func (t *textHandler) Enabled(ctx context.Context, l slog.Level) bool { return t.attrs.Enabled(ctx, l) }

func (t *textHandler) WithAttrs(as []slog.Attr) slog.Handler {
	c := *t
	c.attrs = t.attrs.WithAttrs(as)
	return &c
}

func (t *textHandler) WithGroup(name string) slog.Handler {
	c := *t
	c.attrs = t.attrs.WithGroup(name)
	return &c
}

func (t *textHandler) Handle(ctx context.Context, r slog.Record) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf.Reset()
	// The record without its time, level and message: only the
	// attributes are formatted by the inner handler.
	rest := slog.NewRecord(r.Time, r.Level, "", r.PC)
	r.Attrs(func(a slog.Attr) bool { rest.AddAttrs(a); return true })
	if err := t.attrs.Handle(ctx, rest); err != nil {
		return err
	}
	attrs := bytes.TrimSpace(t.buf.Bytes())
	line := make([]byte, 0, 64+len(r.Message)+len(attrs))
	line = r.Time.AppendFormat(line, "2006-01-02 15:04:05.000")
	line = fmt.Appendf(line, " %-5s %s", r.Level.String(), r.Message)
	if len(attrs) > 0 {
		line = append(append(line, ' '), attrs...)
	}
	_, err := t.out.Write(append(line, '\n'))
	return err
}
