package logs

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// escapeControls escapes every character a terminal would act on rather
// than print: C0 controls (ESC starts CSI and OSC sequences, a newline
// forges a line), DEL, C1 controls (U+0080-U+009F, and the same bytes
// when they are not valid UTF-8: 0x9B is CSI to an 8-bit terminal), line
// and paragraph separators, and the bidi controls that reorder what is
// shown. In JSON mode they become \uXXXX (valid inside a JSON string);
// otherwise \xNN or \uXXXX. Invalid UTF-8 bytes become \xNN in both.
func escapeControls(s string, jsonStyle bool) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case isTerminalControl(r) && jsonStyle:
			fmt.Fprintf(&b, `\u%04x`, r)
		case isTerminalControl(r) && r < 0x100:
			fmt.Fprintf(&b, `\x%02x`, r)
		case isTerminalControl(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// needsEscape is the fast path: plain printable ASCII needs nothing.
func needsEscape(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			return true
		}
	}
	return false
}

// isTerminalControl reports whether r is a control a terminal obeys or a
// character that changes how the rest of the line is shown.
func isTerminalControl(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == 0x061c, r == 0x200e, r == 0x200f, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069:
		return true // bidi marks, embeddings, overrides and isolates
	case r == 0x2028, r == 0x2029:
		return true // line and paragraph separators
	}
	return false
}
