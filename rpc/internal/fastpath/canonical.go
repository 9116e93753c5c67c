package fastpath

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"unicode/utf8"
)

// Canonicalize returns raw in the form rpc.CanonicalJSON produces, and true,
// when raw is that form already but for escapes of <, > and & (which Go's
// json.Marshal writes and the canonical form does not): then hashing an
// event need not decode and re-encode its payload. The agent seals events
// with canonical payloads, and json.Marshal writes them to choird the same
// but for those escapes, so this is the common case. Anything else
// (whitespace, unsorted or duplicate keys, other escapes that
// encoding/json would write differently, invalid UTF-8, very deep
// nesting) reports false, for CanonicalJSON's slow path, whose output is
// the reference. A false negative costs only time; a wrong result would
// change hashes, which FuzzCanonicalJSON guards against. The result
// aliases raw unless escapes were undone.
func Canonicalize(raw []byte) ([]byte, bool) {
	s := canonScanner{data: raw}
	if !s.value(0) || s.pos != len(raw) {
		return nil, false
	}
	if len(s.html) == 0 {
		return raw, true
	}
	out := make([]byte, 0, len(raw))
	start := 0
	for _, at := range s.html {
		out = append(out, raw[start:at]...)
		out = append(out, unhex(raw[at+4])<<4|unhex(raw[at+5]))
		start = at + 6
	}
	return append(out, raw[start:]...), true
}

// IsCanonical reports whether raw is exactly in canonical form.
func IsCanonical(raw []byte) bool {
	s := canonScanner{data: raw}
	return s.value(0) && s.pos == len(raw) && len(s.html) == 0
}

// IsCompactCanonical reports whether raw is canonical but for escapes of
// <, > and &: what json.Marshal makes of it then is raw with those three
// characters escaped.
func IsCompactCanonical(raw []byte) bool {
	s := canonScanner{data: raw}
	return s.value(0) && s.pos == len(raw)
}

// CanonMaxDepth bounds the scanner's recursion; deeper documents take the
// slow path (which refuses them beyond encoding/json's own limit).
const CanonMaxDepth = 512

type canonScanner struct {
	data []byte
	pos  int
	// html holds the offsets of the escapes of <, > and & seen.
	html []int
}

func (s *canonScanner) value(depth int) bool {
	if s.pos >= len(s.data) || depth > CanonMaxDepth {
		return false
	}
	switch c := s.data[s.pos]; c {
	case '{':
		return s.object(depth + 1)
	case '[':
		return s.array(depth + 1)
	case '"':
		_, _, ok := s.str()
		return ok
	case 't':
		return s.literal("true")
	case 'f':
		return s.literal("false")
	case 'n':
		return s.literal("null")
	default:
		if c == '-' || (c >= '0' && c <= '9') {
			return s.number()
		}
	}
	return false
}

func (s *canonScanner) literal(word string) bool {
	if !bytes.HasPrefix(s.data[s.pos:], []byte(word)) {
		return false
	}
	s.pos += len(word)
	return true
}

// object requires members with keys in strictly increasing byte order,
// which encoding/json's map encoding produces and which also rules out
// duplicates (decoding keeps only the last of those).
func (s *canonScanner) object(depth int) bool {
	s.pos++ // '{'
	if s.pos < len(s.data) && s.data[s.pos] == '}' {
		s.pos++
		return true
	}
	var prev []byte
	for first := true; ; first = false {
		key, escaped, ok := s.str()
		if !ok {
			return false
		}
		if escaped { // rare: compare the key's value, not its text
			var k string
			if json.Unmarshal(s.data[s.pos-len(key)-2:s.pos], &k) != nil {
				return false
			}
			key = []byte(k)
		}
		if !first && bytes.Compare(prev, key) >= 0 {
			return false
		}
		prev = key
		if s.pos >= len(s.data) || s.data[s.pos] != ':' {
			return false
		}
		s.pos++
		if !s.value(depth) {
			return false
		}
		if s.pos >= len(s.data) {
			return false
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case '}':
			s.pos++
			return true
		default:
			return false
		}
	}
}

func (s *canonScanner) array(depth int) bool {
	s.pos++ // '['
	if s.pos < len(s.data) && s.data[s.pos] == ']' {
		s.pos++
		return true
	}
	for {
		if !s.value(depth) {
			return false
		}
		if s.pos >= len(s.data) {
			return false
		}
		switch s.data[s.pos] {
		case ',':
			s.pos++
		case ']':
			s.pos++
			return true
		default:
			return false
		}
	}
}

// str accepts a string exactly as encoding/json writes it without HTML
// escaping: raw bytes from 0x20 up except '"' and '\\', valid UTF-8 but
// for U+2028 and U+2029, and only the escapes it writes: \" \\ \b \f \n
// \r \t, \u00xx (lowercase) for the other control characters, and \u2028
// and \u2029. It returns the text between the quotes, and whether it has
// escapes.
func (s *canonScanner) str() (text []byte, escaped, ok bool) {
	d := s.data
	if s.pos >= len(d) || d[s.pos] != '"' {
		return nil, false, false
	}
	start := s.pos + 1
	i := start
	for {
		i = plainRun(d, i)
		if i >= len(d) {
			return nil, false, false
		}
		switch c := d[i]; {
		case c == '"':
			s.pos = i + 1
			return d[start:i], escaped, true
		case c < 0x20:
			return nil, false, false
		case c == '\\':
			if isHTMLEscape(d[i:]) {
				s.html = append(s.html, i)
			} else if !canonicalEscape(d[i:]) {
				return nil, false, false
			}
			escaped = true
			if d[i+1] == 'u' {
				i += 6
			} else {
				i += 2
			}
		default:
			r, size := utf8.DecodeRune(d[i:])
			if (r == utf8.RuneError && size == 1) || r == '\u2028' || r == '\u2029' {
				return nil, false, false
			}
			i += size
		}
	}
}

// plainRun returns the index of the first byte of d at or after i that is
// not plain ASCII inside a string (0x20 to 0x7f but '"' and '\\'), or
// len(d), testing eight bytes at a time. strictjson's lexer has its twin.
func plainRun(d []byte, i int) int {
	const ones, highs = 0x0101010101010101, 0x8080808080808080
	for ; i+8 <= len(d); i += 8 {
		x := binary.LittleEndian.Uint64(d[i:])
		q := x ^ (ones * '"')
		b := x ^ (ones * '\\')
		// A byte below 0x20, a zero byte of q or b, or a byte with its high
		// bit set leaves a high bit here; only a byte that is one of those
		// can set a bit, so a zero means eight plain bytes.
		if ((x-ones*0x20)&^x|(q-ones)&^q|(b-ones)&^b|x)&highs != 0 {
			break
		}
	}
	for ; i < len(d); i++ {
		if c := d[i]; c < 0x20 || c == '"' || c == '\\' || c >= utf8.RuneSelf {
			return i
		}
	}
	return i
}

// isHTMLEscape reports whether b starts with an escape of <, > or & as
// json.Marshal writes them.
func isHTMLEscape(b []byte) bool {
	if len(b) < 6 {
		return false
	}
	switch string(b[:6]) {
	case `\u003c`, `\u003e`, `\u0026`:
		return true
	}
	return false
}

// canonicalEscape reports whether the escape at the start of b is one
// encoding/json writes.
func canonicalEscape(b []byte) bool {
	if len(b) < 2 {
		return false
	}
	switch b[1] {
	case '"', '\\', 'b', 'f', 'n', 'r', 't':
		return true
	case 'u':
	default:
		return false
	}
	if len(b) < 6 {
		return false
	}
	switch string(b[2:6]) {
	case "2028", "2029":
		return true
	}
	if b[2] != '0' || b[3] != '0' || (b[4] != '0' && b[4] != '1') || !isLowerHex(b[5]) {
		return false
	}
	switch c := b[4]&0xf<<4 | unhex(b[5]); c {
	case '\b', '\f', '\n', '\r', '\t':
		return false // written as \b, \f, \n, \r, \t
	}
	return true
}

func isLowerHex(c byte) bool { return ('0' <= c && c <= '9') || ('a' <= c && c <= 'f') }

func unhex(c byte) byte {
	if c <= '9' {
		return c - '0'
	}
	return c - 'a' + 10
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// number accepts a number with JSON's grammar: encoding/json keeps a
// json.Number's text as written.
func (s *canonScanner) number() bool {
	d, i := s.data, s.pos
	if d[i] == '-' {
		i++
	}
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && isDigit(d[i]):
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	default:
		return false
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || !isDigit(d[i]) {
			return false
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	s.pos = i
	return true
}
