// Package logjson is the one shape of Choir's log lines (spec 22.2): JSON,
// one object per line, with durations in whole milliseconds under a key
// ending in _ms. choird and choir-agent both make their handlers here, so
// that choirctl logs and jq see the same fields from either. On a stream a
// person may read (choird's and choirctl's stderr) the lines are text at a
// terminal and JSON elsewhere, unless --log-format says which (text.go);
// log files are always JSON.
package logjson

import (
	"io"
	"log/slog"
	"strings"
)

// NewHandler returns a JSON handler on w at level, with [ReplaceAttr].
func NewHandler(w io.Writer, level slog.Leveler) slog.Handler {
	return slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: ReplaceAttr})
}

// ReplaceAttr logs every time.Duration (slog.Duration, or slog.Any of a
// duration) as an integer number of milliseconds under <key>_ms: a line
// says "grace_ms":30000, never "grace":30000000000. It is applied to
// attributes inside groups too.
func ReplaceAttr(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() != slog.KindDuration {
		return a
	}
	key := a.Key
	if !strings.HasSuffix(key, "_ms") {
		key += "_ms"
	}
	return slog.Int64(key, a.Value.Duration().Milliseconds())
}
