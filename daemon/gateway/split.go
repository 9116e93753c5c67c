package gateway

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// utf16Len is the length of s in UTF-16 code units, the unit of Telegram's
// message limits: a character outside the Basic Multilingual Plane (most
// emoji) counts twice.
func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n++
		if r >= 0x10000 {
			n++
		}
	}
	return n
}

// prefixWithin returns the byte length of the longest prefix of s that is at
// most limit UTF-16 code units, ending on a character boundary.
func prefixWithin(s string, limit int) int {
	n := 0
	for i, r := range s {
		w := 1
		if r >= 0x10000 {
			w = 2
		}
		if n+w > limit {
			return i
		}
		n += w
	}
	return len(s)
}

// SplitText cuts text into messages of at most limit UTF-16 code units
// (MaxMessageLength for Telegram). It cuts at the last line break that
// fits, else at the last blank, preferring one in the second half of the
// message so that messages stay full; only a run of limit characters with
// neither is cut inside a word, and never inside a character. The line
// break or blank at a cut is dropped, as is white space ending a message
// (Telegram drops it anyway); leading white space, indentation, is kept.
// Messages of nothing but white space, which Telegram refuses, are left
// out. The result is the same for the same input, which the delivery
// worker relies on to resume after a crash.
func SplitText(text string, limit int) []string {
	var out []string
	add := func(s string) {
		if s = strings.TrimRightFunc(s, unicode.IsSpace); s != "" && strings.TrimSpace(s) != "" {
			out = append(out, s)
		}
	}
	for text != "" {
		if utf16Len(text) <= limit {
			add(text)
			break
		}
		end := prefixWithin(text, limit)
		if end == 0 {
			// A limit below one character: send the character alone
			// rather than loop.
			_, end = utf8.DecodeRuneInString(text)
		}
		// The separator of a cut is not part of the message, so it may
		// be the character just past the window.
		_, next := utf8.DecodeRuneInString(text[end:])
		cut, skip := cutPoint(text[:end+next], end/2)
		if cut <= 0 {
			cut, skip = end, 0
		}
		add(text[:cut])
		text = text[cut+skip:]
	}
	return out
}

// cutPoint finds where to cut window, returning the byte index of the
// separator and its length, or 0, 0 when window has none. Separators at or
// after half are preferred.
func cutPoint(window string, half int) (int, int) {
	nl := strings.LastIndexByte(window, '\n')
	sp, spSize := lastSpace(window)
	switch {
	case nl >= half && nl > 0:
		return nl, 1
	case sp >= half && sp > 0:
		return sp, spSize
	case nl > 0:
		return nl, 1
	case sp > 0:
		return sp, spSize
	}
	return 0, 0
}

// lastSpace returns the byte index and size of the last white-space
// character of s, or -1, 0.
func lastSpace(s string) (int, int) {
	for i := len(s); i > 0; {
		r, size := utf8.DecodeLastRuneInString(s[:i])
		i -= size
		if unicode.IsSpace(r) {
			return i, size
		}
	}
	return -1, 0
}
