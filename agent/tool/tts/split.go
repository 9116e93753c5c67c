package tts

import (
	"strings"
	"unicode"
	"unicode/utf8"
)

// splitText cuts text into parts of at most limit characters, at sentence
// boundaries: a sentence ends after . ! ? … and their full-width forms
// (with any closing quotes or brackets) before white space, or at a line
// break. A sentence longer than limit is cut between words, and a word
// longer than limit between characters. Parts are trimmed; none is empty.
func splitText(text string, limit int) []string {
	var parts []string
	var cur strings.Builder
	curLen := 0
	flush := func() {
		if s := strings.TrimSpace(cur.String()); s != "" {
			parts = append(parts, s)
		}
		cur.Reset()
		curLen = 0
	}
	add := func(piece string) {
		n := utf8.RuneCountInString(piece)
		// Trailing white space is trimmed from a part: it does not count.
		if curLen+utf8.RuneCountInString(strings.TrimRightFunc(piece, unicode.IsSpace)) > limit {
			flush()
		}
		if utf8.RuneCountInString(strings.TrimSpace(piece)) > limit {
			for _, w := range splitLong(piece, limit) {
				parts = append(parts, w)
			}
			return
		}
		cur.WriteString(piece)
		curLen += n
	}
	for _, s := range sentences(text) {
		add(s)
	}
	flush()
	return parts
}

// sentences splits text after each sentence end, keeping every character.
func sentences(text string) []string {
	var out []string
	start := 0
	rs := []rune(text)
	pos := 0 // byte offset of rs[i]
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		size := utf8.RuneLen(r)
		end := -1
		switch {
		case r == '\n':
			end = pos + size
		case strings.ContainsRune(".!?…。！？", r):
			j, p := i+1, pos+size
			for j < len(rs) && strings.ContainsRune(`"'”’»)]`, rs[j]) {
				p += utf8.RuneLen(rs[j])
				j++
			}
			if j == len(rs) || unicode.IsSpace(rs[j]) || strings.ContainsRune("。！？", r) {
				for j < len(rs) && unicode.IsSpace(rs[j]) && rs[j] != '\n' {
					p += utf8.RuneLen(rs[j])
					j++
				}
				end = p
			}
			if end >= 0 {
				// Skip the runes consumed.
				for k := i + 1; k < j; k++ {
					size += utf8.RuneLen(rs[k])
				}
				i = j - 1
			}
		}
		pos += size
		if end >= 0 {
			out = append(out, text[start:end])
			start = end
		}
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// splitLong cuts one over-long sentence between words, and a word longer
// than limit between characters.
func splitLong(s string, limit int) []string {
	var out []string
	var cur strings.Builder
	curLen := 0
	flush := func() {
		if t := strings.TrimSpace(cur.String()); t != "" {
			out = append(out, t)
		}
		cur.Reset()
		curLen = 0
	}
	for _, w := range strings.SplitAfter(s, " ") {
		n := utf8.RuneCountInString(w)
		if curLen+utf8.RuneCountInString(strings.TrimRight(w, " ")) > limit {
			flush()
		}
		for n > limit {
			rs := []rune(w)
			out = append(out, string(rs[:limit]))
			w = string(rs[limit:])
			n -= limit
		}
		cur.WriteString(w)
		curLen += n
	}
	flush()
	return out
}
