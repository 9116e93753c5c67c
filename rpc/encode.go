package rpc

import (
	"encoding/hex"
	"encoding/json"
	"strconv"
	"time"
	"unicode/utf8"
)

// jsonAppender is implemented by payloads encoded without reflection. It
// appends exactly the bytes json.Marshal would produce, or
// reports false for a value it leaves to json.Marshal.
type jsonAppender interface {
	appendJSON(dst []byte) ([]byte, bool)
}

// encodePayload encodes a payload as json.Marshal does, faster for the
// calls made most often.
func encodePayload(p Payload) ([]byte, error) {
	if a, ok := p.(jsonAppender); ok {
		if b, ok := a.appendJSON(nil); ok {
			return b, nil
		}
	}
	return json.Marshal(p)
}

// appendJSON encodes a heartbeat's response as json.Marshal does.
func (r HeartbeatResponse) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"ack_rev":`...)
	b = strconv.AppendInt(b, r.AckRev, 10)
	b = append(b, `,"config_version_latest":`...)
	b = strconv.AppendInt(b, r.ConfigVersionLatest, 10)
	return append(b, '}'), true
}

// appendJSON encodes a heartbeat, the agent's most frequent call. Its
// events' payloads are the bulk of it: a canonical payload, as the agent's
// log writes them, needs only encoding/json's HTML escaping, where
// json.Marshal would scan it again to compact and validate it.
func (r HeartbeatRequest) appendJSON(b []byte) ([]byte, bool) {
	if b == nil {
		n := 256
		for i := range r.Patches {
			n += 320 + len(r.Patches[i].Payload)
		}
		b = make([]byte, 0, n)
	}
	b = append(b, `{"base_rev":`...)
	b = strconv.AppendInt(b, r.BaseRev, 10)
	b = append(b, `,"new_rev":`...)
	b = strconv.AppendInt(b, r.NewRev, 10)
	b = append(b, `,"patches":`...)
	if r.Patches == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i := range r.Patches {
			if i > 0 {
				b = append(b, ',')
			}
			var ok bool
			if b, ok = r.Patches[i].appendJSON(b); !ok {
				return nil, false
			}
		}
		b = append(b, ']')
	}
	b = append(b, `,"config_version":`...)
	b = strconv.AppendInt(b, r.ConfigVersion, 10)
	b = append(b, `,"hash_prev":`...)
	b = appendHash(b, r.HashPrev)
	b = append(b, `,"hash_new":`...)
	b = appendHash(b, r.HashNew)
	b = append(b, `,"timestamp":`...)
	var ok bool
	if b, ok = appendTime(b, r.Timestamp); !ok {
		return nil, false
	}
	if r.Snapshot != nil {
		sn, err := json.Marshal(r.Snapshot)
		if err != nil {
			return nil, false
		}
		b = append(b, `,"snapshot":`...)
		b = append(b, sn...)
	}
	return append(b, '}'), true
}

// appendJSON encodes an event as json.Marshal does.
func (e *Event) appendJSON(b []byte) ([]byte, bool) {
	b = append(b, `{"rev":`...)
	b = strconv.AppendInt(b, e.Rev, 10)
	b = append(b, `,"type":`...)
	b = appendString(b, string(e.Type))
	b = append(b, `,"lane":`...)
	b = appendString(b, e.Lane)
	b = append(b, `,"payload":`...)
	switch {
	case e.Payload == nil:
		b = append(b, "null"...)
	case isCompactCanonical(e.Payload): // (an empty, non-nil payload is not: json.Marshal refuses it)
		// Compact already; what is left of json.Marshal's compaction is
		// escaping <, > and &, which in valid JSON occur only in strings.
		b = appendHTMLEscaped(b, e.Payload)
	default:
		return nil, false
	}
	b = append(b, `,"created_at":`...)
	var ok bool
	if b, ok = appendTime(b, e.CreatedAt); !ok {
		return nil, false
	}
	b = append(b, `,"hash_prev":`...)
	b = appendHash(b, e.HashPrev)
	b = append(b, `,"hash":`...)
	b = appendHash(b, e.Hash)
	return append(b, '}'), true
}

func appendHash(b []byte, h Hash) []byte {
	b = append(b, '"')
	b = hex.AppendEncode(b, h[:])
	return append(b, '"')
}

// appendTime encodes t as time.Time's MarshalJSON does; it reports false
// where MarshalJSON fails (a year outside 0-9999).
func appendTime(b []byte, t time.Time) ([]byte, bool) {
	b = append(b, '"')
	b, err := t.AppendText(b)
	if err != nil {
		return nil, false
	}
	return append(b, '"'), true
}

const lowerHex = "0123456789abcdef"

// appendHTMLEscaped appends src, compact JSON, escaping <, > and & as
// json.Marshal does (U+2028 and U+2029 cannot occur unescaped in canonical
// JSON).
func appendHTMLEscaped(b, src []byte) []byte {
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

// appendString appends s as a JSON string exactly as json.Marshal writes
// it, HTML escaping included.
func appendString(b []byte, s string) []byte {
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
