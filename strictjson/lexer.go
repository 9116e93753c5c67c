package strictjson

import (
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

// Token returns the next token: json.Delim, string, json.Number, bool or
// nil; io.EOF after the top-level value; errSyntax on malformed input.
func (l *lexer) Token() (json.Token, error) {
	for {
		l.skipSpace()
		if l.pos >= len(l.data) {
			if l.state == lexDone {
				return nil, io.EOF
			}
			return nil, io.ErrUnexpectedEOF
		}
		c := l.data[l.pos]
		switch l.state {
		case lexDone:
			return nil, errSyntax
		case lexObjCommaOrEnd:
			switch c {
			case ',':
				l.pos++
				l.state = lexObjKey
				continue
			case '}':
				return l.close()
			}
			return nil, errSyntax
		case lexArrCommaOrEnd:
			switch c {
			case ',':
				l.pos++
				l.state = lexArrValue
				continue
			case ']':
				return l.close()
			}
			return nil, errSyntax
		case lexObjColon:
			if c != ':' {
				return nil, errSyntax
			}
			l.pos++
			l.state = lexObjValue
			continue
		case lexObjKeyOrEnd, lexObjKey:
			if c == '}' && l.state == lexObjKeyOrEnd {
				return l.close()
			}
			if c != '"' {
				return nil, errSyntax
			}
			s, err := l.str()
			if err != nil {
				return nil, err
			}
			l.state = lexObjColon
			return s, nil
		case lexArrValueOrEnd:
			if c == ']' {
				return l.close()
			}
		}
		return l.value(c)
	}
}

func (l *lexer) close() (json.Token, error) {
	open := l.stack[len(l.stack)-1]
	l.stack = l.stack[:len(l.stack)-1]
	l.pos++
	l.afterValue()
	if open == '{' {
		return json.Delim('}'), nil
	}
	return json.Delim(']'), nil
}

// value reads a value starting with c, in a state that expects one.
func (l *lexer) value(c byte) (json.Token, error) {
	switch c {
	case '{':
		l.pos++
		l.stack = append(l.stack, '{')
		l.state = lexObjKeyOrEnd
		return json.Delim('{'), nil
	case '[':
		l.pos++
		l.stack = append(l.stack, '[')
		l.state = lexArrValueOrEnd
		return json.Delim('['), nil
	case '"':
		s, err := l.str()
		if err != nil {
			return nil, err
		}
		l.afterValue()
		return s, nil
	case 't':
		return l.literal("true", true)
	case 'f':
		return l.literal("false", false)
	case 'n':
		return l.literal("null", nil)
	}
	if c == '-' || (c >= '0' && c <= '9') {
		n, err := l.number()
		if err != nil {
			return nil, err
		}
		l.afterValue()
		return n, nil
	}
	return nil, errSyntax
}

func (l *lexer) literal(word string, v json.Token) (json.Token, error) {
	if len(l.data)-l.pos < len(word) || string(l.data[l.pos:l.pos+len(word)]) != word {
		return nil, errSyntax
	}
	l.pos += len(word)
	l.afterValue()
	return v, nil
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number reads a number with JSON's grammar, keeping its text.
func (l *lexer) number() (json.Number, error) {
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
		return "", errSyntax
	}
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || !isDigit(d[i]) {
			return "", errSyntax
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
			return "", errSyntax
		}
		for i < len(d) && isDigit(d[i]) {
			i++
		}
	}
	n := json.Number(d[l.pos:i])
	l.pos = i
	return n, nil
}

// str reads a string starting at the opening quote. Strings without escapes
// are sliced directly; the rest are unquoted by encoding/json, so escapes
// and invalid UTF-8 are treated exactly as json.Unmarshal treats them.
func (l *lexer) str() (string, error) {
	d := l.data
	i := l.pos + 1
	escaped := false
	for ; i < len(d); i++ {
		switch c := d[i]; {
		case c == '"':
			raw := d[l.pos : i+1]
			l.pos = i + 1
			if !escaped && utf8.Valid(raw) {
				return string(raw[1 : len(raw)-1]), nil
			}
			var s string
			if err := json.Unmarshal(raw, &s); err != nil {
				return "", errSyntax
			}
			return s, nil
		case c == '\\':
			escaped = true
			i++ // the escaped byte cannot end the string
		case c < 0x20:
			return "", errSyntax
		}
	}
	return "", io.ErrUnexpectedEOF
}
