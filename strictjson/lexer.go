package strictjson

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"unicode/utf8"
)

// errSyntax is the lexer's only error for malformed input. The checker
// then finds the exact position and message with a plain encoding/json
// scan, which is the slow path and runs only for bad documents.
var errSyntax = errors.New("syntax error")

// lexer yields the tokens of one JSON document with the semantics the
// checker relies on from json.Decoder (Token with UseNumber, More,
// InputOffset), at a fraction of its cost: json.Decoder.Token builds and
// discards an error value for most scalars, which made strict decoding
// several times slower than decoding itself.
type lexer struct {
	data  []byte
	pos   int
	stack []byte // open containers: '{' or '['
	state lexState
	// start is where the last token's text begins.
	start int
	// unquoted is the value of the last string token when it differs from
	// its text between the quotes (escapes, invalid UTF-8); nil otherwise.
	unquoted []byte
}

type lexState uint8

const (
	lexValue         lexState = iota // top-level value expected
	lexObjKeyOrEnd                   // after '{'
	lexObjKey                        // after ',' in an object
	lexObjColon                      // after a key
	lexObjValue                      // after ':'
	lexObjCommaOrEnd                 // after a member's value
	lexArrValueOrEnd                 // after '['
	lexArrValue                      // after ',' in an array
	lexArrCommaOrEnd                 // after an element
	lexDone                          // the top-level value is complete
)

func newLexer(data []byte) *lexer { return &lexer{data: data, stack: make([]byte, 0, 16)} }

// InputOffset is the offset just past the last token returned.
func (l *lexer) InputOffset() int64 { return int64(l.pos) }

func (l *lexer) skipSpace() {
	for l.pos < len(l.data) {
		switch l.data[l.pos] {
		case ' ', '\t', '\r', '\n':
			l.pos++
		default:
			return
		}
	}
}

// More reports whether the current array or object has another element.
func (l *lexer) More() bool {
	l.skipSpace()
	if l.pos >= len(l.data) {
		return false
	}
	c := l.data[l.pos]
	return c != ']' && c != '}'
}

// afterValue sets the state once a value is complete.
func (l *lexer) afterValue() {
	switch {
	case len(l.stack) == 0:
		l.state = lexDone
	case l.stack[len(l.stack)-1] == '{':
		l.state = lexObjCommaOrEnd
	default:
		l.state = lexArrCommaOrEnd
	}
}

// tokKind is the kind of a token, as next reports it.
type tokKind uint8

const (
	tokBeginObject tokKind = iota + 1
	tokEndObject
	tokBeginArray
	tokEndArray
	tokString
	tokNumber
	tokTrue
	tokFalse
	tokNull
)

// Token returns the next token: json.Delim, string, json.Number, bool or
// nil; io.EOF after the top-level value; errSyntax on malformed input. It
// boxes every token; the checker uses next instead.
func (l *lexer) Token() (json.Token, error) {
	k, err := l.next()
	if err != nil {
		return nil, err
	}
	switch k {
	case tokBeginObject:
		return json.Delim('{'), nil
	case tokEndObject:
		return json.Delim('}'), nil
	case tokBeginArray:
		return json.Delim('['), nil
	case tokEndArray:
		return json.Delim(']'), nil
	case tokString:
		return l.strString(), nil
	case tokNumber:
		return json.Number(l.data[l.start:l.pos]), nil
	case tokTrue:
		return true, nil
	case tokFalse:
		return false, nil
	}
	return nil, nil
}

// next reads the next token and returns its kind without boxing it: its
// text is l.data[l.start:l.pos], and a string's value is strBytes or
// strString. It returns io.EOF after the top-level value and errSyntax on
// malformed input.
func (l *lexer) next() (tokKind, error) {
	for {
		l.skipSpace()
		if l.pos >= len(l.data) {
			if l.state == lexDone {
				return 0, io.EOF
			}
			return 0, io.ErrUnexpectedEOF
		}
		c := l.data[l.pos]
		l.start = l.pos
		switch l.state {
		case lexDone:
			return 0, errSyntax
		case lexObjCommaOrEnd:
			switch c {
			case ',':
				l.pos++
				l.state = lexObjKey
				continue
			case '}':
				return l.close(), nil
			}
			return 0, errSyntax
		case lexArrCommaOrEnd:
			switch c {
			case ',':
				l.pos++
				l.state = lexArrValue
				continue
			case ']':
				return l.close(), nil
			}
			return 0, errSyntax
		case lexObjColon:
			if c != ':' {
				return 0, errSyntax
			}
			l.pos++
			l.state = lexObjValue
			continue
		case lexObjKeyOrEnd, lexObjKey:
			if c == '}' && l.state == lexObjKeyOrEnd {
				return l.close(), nil
			}
			if c != '"' {
				return 0, errSyntax
			}
			if err := l.str(); err != nil {
				return 0, err
			}
			l.state = lexObjColon
			return tokString, nil
		case lexArrValueOrEnd:
			if c == ']' {
				return l.close(), nil
			}
		}
		return l.value(c)
	}
}

func (l *lexer) close() tokKind {
	open := l.stack[len(l.stack)-1]
	l.stack = l.stack[:len(l.stack)-1]
	l.pos++
	l.afterValue()
	if open == '{' {
		return tokEndObject
	}
	return tokEndArray
}

// value reads a value starting with c, in a state that expects one.
func (l *lexer) value(c byte) (tokKind, error) {
	switch c {
	case '{':
		l.pos++
		l.stack = append(l.stack, '{')
		l.state = lexObjKeyOrEnd
		return tokBeginObject, nil
	case '[':
		l.pos++
		l.stack = append(l.stack, '[')
		l.state = lexArrValueOrEnd
		return tokBeginArray, nil
	case '"':
		if err := l.str(); err != nil {
			return 0, err
		}
		l.afterValue()
		return tokString, nil
	case 't':
		return l.literal("true", tokTrue)
	case 'f':
		return l.literal("false", tokFalse)
	case 'n':
		return l.literal("null", tokNull)
	}
	if c == '-' || (c >= '0' && c <= '9') {
		if err := l.number(); err != nil {
			return 0, err
		}
		l.afterValue()
		return tokNumber, nil
	}
	return 0, errSyntax
}

func (l *lexer) literal(word string, k tokKind) (tokKind, error) {
	if len(l.data)-l.pos < len(word) || string(l.data[l.pos:l.pos+len(word)]) != word {
		return 0, errSyntax
	}
	l.pos += len(word)
	l.afterValue()
	return k, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number reads a number with JSON's grammar; its text is the token's.
func (l *lexer) number() error {
	d, i := l.data, l.pos
	if i < len(d) && d[i] == '-' {
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
		return errSyntax
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return errSyntax
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
			return errSyntax
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	l.pos = i
	return nil
}

// str reads a string starting at the opening quote. A string without
// escapes whose bytes are valid UTF-8 is its own value (strBytes slices the
// input); any other is unquoted here by encoding/json, so that escapes and
// invalid UTF-8 are treated exactly as json.Unmarshal treats them, and a
// malformed escape is a syntax error.
func (l *lexer) str() error {
	d := l.data
	i := l.pos + 1
	escaped, high := false, false
	for {
		i = plainRun(d, i)
		if i >= len(d) {
			return io.ErrUnexpectedEOF
		}
		switch c := d[i]; {
		case c == '"':
			raw := d[l.pos : i+1]
			l.pos = i + 1
			l.unquoted = nil
			if !escaped && (!high || utf8.Valid(raw)) {
				return nil
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return errSyntax
			}
			l.unquoted = []byte(s)
			return nil
		case c == '\\':
			escaped = true
			i += 2 // the escaped byte cannot end the string
		case c < 0x20:
			return errSyntax
		default:
			high = true
			i++
		}
	}
}

// plainRun returns the index of the first byte of d at or after i that is
// not plain ASCII inside a string (0x20 to 0x7f but '"' and '\\'), or
// len(d). It tests eight bytes at a time: strings are most of a payload.
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

// strBytes returns the value of the string token just read. It may alias
// the input, as encoding/json's own unquoting does.
func (l *lexer) strBytes() []byte {
	if l.unquoted != nil {
		return l.unquoted
	}
	return l.data[l.start+1 : l.pos-1]
}

// strString returns the value of the string token just read as a string.
func (l *lexer) strString() string { return string(l.strBytes()) }

// unquoteKey returns the value of the string whose quoted text is raw, as
// str would; raw must have been read by str already.
func unquoteKey(raw []byte) string {
	if bytes.IndexByte(raw, '\\') < 0 && utf8.Valid(raw) {
		return string(raw[1 : len(raw)-1])
	}
	var s string
	json.Unmarshal(raw, &s) // Cannot fail: str accepted raw.
	return s
}
