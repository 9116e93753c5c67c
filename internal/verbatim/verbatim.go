// Package verbatim renders text that others wrote (a model, a web page, a
// repo file) for a person to read in a chat, so that it shows whole and
// cannot pass for Choir's own words: every line of it is marked with a
// quote bar, and characters that would hide or reorder what is shown
// (control characters, bidi overrides, zero-width marks) are spelled out.
// Approval prompts are its main reader: what a person approves must be
// what they see, and nothing in it may forge the prompt's own lines.
package verbatim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// Bar starts every quoted line. Choir's own lines never start with it.
const Bar = "│ "

// Escape spells out the runes of s that a chat would not show as
// themselves: control characters (newlines included), bidi controls,
// zero-width marks and line separators become \u{XXXX}; invalid UTF-8
// becomes U+FFFD. Tabs stay.
func Escape(s string) string {
	if !needsEscape(s) {
		return s
	}
	var b strings.Builder
	for _, r := range strings.ToValidUTF8(s, "\uFFFD") {
		if hidden(r) {
			fmt.Fprintf(&b, `\u{%04X}`, r)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func needsEscape(s string) bool {
	if !utf8.ValidString(s) {
		return true
	}
	for _, r := range s {
		if hidden(r) {
			return true
		}
	}
	return false
}

// hidden reports a rune a reader would not see as itself.
func hidden(r rune) bool {
	switch {
	case r == '\t':
		return false
	case unicode.IsControl(r): // C0, DEL, C1
		return true
	case r == 0x061C, r == 0x200E, r == 0x200F, r >= 0x202A && r <= 0x202E, r >= 0x2066 && r <= 0x2069: // bidi
		return true
	case r >= 0x200B && r <= 0x200D, r == 0xFEFF, r == 0x2060, r == 0x180E: // zero width
		return true
	case r == 0x2028, r == 0x2029, r == 0x0085: // line and paragraph separators
		return true
	}
	return false
}

// MaxLine is the most bytes of text one quoted line holds: a longer line
// goes on over as many quoted lines as it needs. A chat cuts a long
// message at line ends, so no cut can leave a piece of quoted text
// without its bar.
const MaxLine = 1000

// Lines quotes text line by line: each line, escaped, after Bar, and
// wrapped at MaxLine bytes. A trailing newline does not add an empty
// line; empty text is one bare bar.
func Lines(text string) string {
	text = strings.TrimSuffix(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	var b strings.Builder
	for i, line := range strings.Split(text, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		wrap(&b, Escape(line))
	}
	return b.String()
}

// wrap writes one escaped line as quoted lines of at most MaxLine bytes,
// cut between runes.
func wrap(b *strings.Builder, line string) {
	for {
		b.WriteString(Bar)
		if len(line) <= MaxLine {
			b.WriteString(line)
			return
		}
		cut := MaxLine
		for cut > 0 && !utf8.RuneStart(line[cut]) {
			cut--
		}
		b.WriteString(line[:cut])
		b.WriteByte('\n')
		line = line[cut:]
	}
}

// Line quotes text as one line, its newlines spelled out too (wrapped
// at MaxLine bytes like Lines).
func Line(text string) string {
	var b strings.Builder
	wrap(&b, Escape(text))
	return b.String()
}

// Payload renders a JSON payload whole, one field after another in key
// order, each field's name on a line of its own that starts with "• ": a string's lines quoted as they are (a mail body reads as a
// mail body), a list of strings one quoted line per item (so no
// recipient hides among others), anything else as indented JSON, quoted.
// Nested objects name their fields by path (attachments.0.path). Nothing
// is cut. A payload that is not a JSON object is rendered as one value.
func Payload(raw json.RawMessage) string {
	var v any
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	if err := d.Decode(&v); err != nil {
		return "payload (not JSON):\n" + Lines(string(raw))
	}
	var b strings.Builder
	field(&b, "", v)
	return strings.TrimSuffix(b.String(), "\n")
}

func field(b *strings.Builder, path string, v any) {
	name := path
	if name == "" {
		name = "value"
	}
	switch x := v.(type) {
	case map[string]any:
		if len(x) == 0 {
			fmt.Fprintf(b, "• %s: (empty)\n", Escape(name))
			return
		}
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			sub := k
			if path != "" {
				sub = path + "." + k
			}
			field(b, sub, x[k])
		}
	case string:
		fmt.Fprintf(b, "• %s (%d bytes):\n%s\n", Escape(name), len(x), Lines(x))
	case nil:
		fmt.Fprintf(b, "• %s: (none)\n", Escape(name))
	case []any:
		listField(b, path, name, x)
	default:
		fmt.Fprintf(b, "• %s: %s\n", Escape(name), Escape(fmt.Sprint(x)))
	}
}

// listField renders a list: strings one quoted line each, objects by
// their index's path, other values as quoted JSON.
func listField(b *strings.Builder, path, name string, x []any) {
	if len(x) == 0 {
		fmt.Fprintf(b, "• %s: (none)\n", Escape(name))
		return
	}
	allStrings := true
	for _, e := range x {
		if s, ok := e.(string); !ok || strings.ContainsAny(s, "\n\r") {
			allStrings = false
		}
	}
	if allStrings {
		fmt.Fprintf(b, "• %s (%d):\n", Escape(name), len(x))
		for _, e := range x {
			b.WriteString(Line(e.(string)))
			b.WriteByte('\n')
		}
		return
	}
	for i, e := range x {
		field(b, fmt.Sprintf("%s.%d", path, i), e)
	}
}
