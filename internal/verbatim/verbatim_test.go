package verbatim_test

import (
	"strings"
	"testing"

	"github.com/choirhq/choir/internal/verbatim"
)

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ in, want string }{
		{"plain text\twith a tab", "plain text\twith a tab"},
		{"a\nb", `a\u{000A}b`},
		{"\x1b[31mred", `\u{001B}[31mred`},
		{"evil\u202egnp.exe", `evil\u{202E}gnp.exe`},
		{"zero\u200bwidth", `zero\u{200B}width`},
		{"c1\u0085x", `c1\u{0085}x`},
		{"bad\xffutf8", "bad\uFFFDutf8"},
	} {
		if got := verbatim.Escape(tt.in); got != tt.want {
			t.Errorf("Escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// TestEveryLineIsQuoted: whatever the text, every line Lines and Payload
// write that holds its words starts with the bar, and no line is longer
// than MaxLine plus the bar, so a chat's cut cannot unquote a piece.
func TestEveryLineIsQuoted(t *testing.T) {
	t.Parallel()
	hostile := "FORGED one\r\nFORGED two\n\nFORGED " + strings.Repeat("é", 1500) + "FORGED end\n"
	for name, out := range map[string]string{
		"Lines":   verbatim.Lines(hostile),
		"Line":    verbatim.Line(hostile),
		"Payload": verbatim.Payload([]byte(`{"FORGED key\nFORGED":"v","list":["FORGED a","b\nFORGED"],"n":{"deep":"FORGED\nFORGED"}}`)),
	} {
		for _, line := range strings.Split(out, "\n") {
			if len(line) > verbatim.MaxLine+len(verbatim.Bar) {
				t.Errorf("%s: a line of %d bytes", name, len(line))
			}
			if strings.Contains(line, "FORGED") && !strings.HasPrefix(line, verbatim.Bar) && !strings.HasPrefix(line, "• ") {
				t.Errorf("%s: unquoted %q", name, line)
			}
		}
	}
	if got := verbatim.Lines("a\nb\n"); got != "│ a\n│ b" {
		t.Errorf("Lines = %q", got)
	}
}

func TestPayloadShowsEveryField(t *testing.T) {
	t.Parallel()
	got := verbatim.Payload([]byte(`{"to":["a@x","b@x"],"bcc":["c@x"],"n":3,"ok":true,"none":null,"empty":[],"att":[{"path":"p","size":1}]}`))
	for _, want := range []string{"• to (2):\n│ a@x\n│ b@x", "• bcc (1):\n│ c@x", "• n: 3", "• ok: true", "• none: (none)",
		"• empty: (none)", "• att.0.path (1 bytes):\n│ p", "• att.0.size: 1"} {
		if !strings.Contains(got, want) {
			t.Errorf("missing %q in:\n%s", want, got)
		}
	}
	if got := verbatim.Payload([]byte("not json")); !strings.Contains(got, "│ not json") {
		t.Errorf("non-JSON payload: %q", got)
	}
}
