package fastpath

import (
	"encoding/hex"
	"strconv"
	"time"
	"unicode/utf8"
)

// The encoders below write JSON exactly as json.Marshal does, for the
// payloads rpc encodes without reflection (a heartbeat and its answer).

// AppendHash appends a hash as a JSON string of hex digits, as rpc.Hash's
// MarshalText does.
func AppendHash(b []byte, h [32]byte) []byte {
	b = append(b, '"')
	b = hex.AppendEncode(b, h[:])
	return append(b, '"')
}

// AppendTime encodes t as time.Time's MarshalJSON does; it reports false
// where MarshalJSON fails (a year outside 0-9999).
func AppendTime(b []byte, t time.Time) ([]byte, bool) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return nil, false
	}
	return append(b, '"'), true
}

const lowerHex = "0123456789abcdef"

// AppendHTMLEscaped appends src, compact JSON, escaping <, > and & as
// json.Marshal does (U+2028 and U+2029 cannot occur unescaped in canonical
// JSON).
func AppendHTMLEscaped(b, src []byte) []byte {
	start := 0
	for i, c := range src {
		if c == '<' || c == '>' || c == '&' {
			b = append(b, src[start:i]...)
			b = append(b, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&0xf])
			start = i + 1
		}
	}
	return append(b, src[start:]...)
}

// AppendString appends s as a JSON string exactly as json.Marshal writes
// it, HTML escaping included.
func AppendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', lowerHex[c>>4], lowerHex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', lowerHex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}

// AppendEvent encodes an event of an agent's log (rpc.Event) as
// json.Marshal does, or reports false for one whose payload is not compact
// canonical JSON, which it leaves to json.Marshal.
func AppendEvent(b []byte, rev int64, typ, lane string, payload []byte, createdAt time.Time, hashPrev, hash [32]byte) ([]byte, bool) {
	b = append(b, `{"rev":`...)
	b = strconv.AppendInt(b, rev, 10)
	b = append(b, `,"type":`...)
	b = AppendString(b, typ)
	b = append(b, `,"lane":`...)
	b = AppendString(b, lane)
	b = append(b, `,"payload":`...)
	switch {
	case payload == nil:
		b = append(b, "null"...)
	case IsCompactCanonical(payload): // (an empty, non-nil payload is not: json.Marshal refuses it)
		// Compact already; what is left of json.Marshal's compaction is
		// escaping <, > and &, which in valid JSON occur only in strings.
		b = AppendHTMLEscaped(b, payload)
	default:
		return nil, false
	}
	b = append(b, `,"created_at":`...)
	var ok bool
	if b, ok = AppendTime(b, createdAt); !ok {
		return nil, false
	}
	b = append(b, `,"hash_prev":`...)
	b = AppendHash(b, hashPrev)
	b = append(b, `,"hash":`...)
	b = AppendHash(b, hash)
	return append(b, '}'), true
}
