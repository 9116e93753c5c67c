// Package strictjson decodes JSON documents strictly: it refuses what
// encoding/json quietly tolerates, and reports every problem at once with
// the JSON path where it occurs.
//
// Choir reads its configuration files with it, and choird reads RPC payloads
// from agents with it, so it assumes the input may be hostile or may hold
// secrets. Decode rejects:
//
//   - object keys that match no field of the target struct (matching is
//     exact; encoding/json would accept a key that differs only in case),
//   - duplicate object keys at any depth, including inside maps,
//     json.RawMessage and interface values,
//   - data after the top-level value,
//   - documents larger than [Limits.MaxBytes] or nested deeper than
//     [Limits.MaxDepth],
//   - values of the wrong JSON type for their target, integers that do not
//     fit their target, and null where the target is not a pointer, map,
//     slice, interface or json.RawMessage.
//
// Problems name their location as a JSON path such as
// $.agents["agent-1"].defaults.workspace. Messages never quote string
// values from the document, which may be secrets; keys are quoted in paths.
package strictjson

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode"
	"unicode/utf8"
)

// Default limits, used where a [Limits] field is zero or negative.
const (
	DefaultMaxBytes = 1 << 20
	DefaultMaxDepth = 64
)

// maxDepthCeiling caps Limits.MaxDepth: encoding/json itself refuses to
// decode documents nested deeper than 10000 levels.
const maxDepthCeiling = 10000

// maxProblems bounds how many problems one Decode reports, so that a hostile
// document full of unknown keys cannot make an error message as large as the
// document.
const maxProblems = 100

// Root is the JSON path of the top-level value.
const Root = "$"

// Limits bound the resources Decode spends on a document. A zero field takes
// its default.
type Limits struct {
	// MaxBytes is the largest document accepted, in bytes
	// (default [DefaultMaxBytes]).
	MaxBytes int
	// MaxDepth is the deepest nesting of objects and arrays accepted
	// (default [DefaultMaxDepth], at most 10000). A scalar top-level value
	// has depth 0, {} has depth 1.
	MaxDepth int
}

func (l Limits) withDefaults() Limits {
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.MaxDepth <= 0 {
		l.MaxDepth = DefaultMaxDepth
	}
	l.MaxDepth = min(l.MaxDepth, maxDepthCeiling)
	return l
}

// Problem is one thing wrong with a document.
type Problem struct {
	// Path is the JSON path of the offending value or key, such as
	// $.agents["agent-1"].defaults.workspace.
	Path string
	// Message says what is wrong, without quoting string values.
	Message string
}

// String renders the problem as "path: message".
func (p Problem) String() string { return p.Path + ": " + p.Message }

// Error is returned when a document has problems. It holds all of them, in
// document order.
type Error struct {
	Problems []Problem
}

// Error joins the problems, one per line.
func (e *Error) Error() string {
	var b strings.Builder
	for i, p := range e.Problems {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(p.String())
	}
	return b.String()
}

// PathKey returns the path of the member key of the object at path: .key
// when key looks like an identifier, ["key"] otherwise.
func PathKey(path, key string) string {
	if isIdentifier(key) {
		return path + "." + key
	}
	// Quote as JSON would, so the path can be read back unambiguously.
	q, _ := json.Marshal(key) // Marshal of a string cannot fail.
	return path + "[" + string(q) + "]"
}

// PathIndex returns the path of element i of the array at path.
func PathIndex(path string, i int) string {
	return path + "[" + strconv.Itoa(i) + "]"
}

func isIdentifier(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		switch {
		case c == '_', 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z':
		case i > 0 && '0' <= c && c <= '9':
		default:
			return false
		}
	}
	return true
}

// Decode checks data against the type v points to and, if it finds no
// problem, decodes it into v with encoding/json. Problems with the document
// are returned as an [*Error] listing all of them (up to a hundred), and v
// is left untouched. A v that is not a non-nil pointer is a programming
// error, reported as a plain error.
//
// Types implementing json.Unmarshaler (other than json.RawMessage) are
// checked by calling their UnmarshalJSON on a scratch value, so it must be
// free of side effects. Its error text is not reported, since it may quote
// the value; the problem says only that the value is invalid for the type.
func Decode(data []byte, v any, lim Limits) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("strictjson: decode target must be a non-nil pointer, got %T", v)
	}
	lim = lim.withDefaults()
	if len(data) > lim.MaxBytes {
		return &Error{Problems: []Problem{{
			Path:    Root,
			Message: fmt.Sprintf("document is %d bytes, over the limit of %d", len(data), lim.MaxBytes),
		}}}
	}

	// The first pass checks everything but the values of types with their
	// own unmarshalers, which the decode itself runs; only if the decode
	// fails does a second pass run them one by one to say which value is
	// wrong, and where. The decode goes into a scratch value, so v is left
	// untouched by a document that fails.
	check := func(deep bool) *Error {
		c := &checker{dec: newLexer(data), data: data, maxDepth: lim.MaxDepth, deep: deep}
		if len(bytes.TrimLeft(data, " \t\r\n")) == 0 {
			c.add("empty document")
		} else if err := c.value(rv.Type().Elem(), 0, false); err == nil {
			c.trailing()
		}
		return c.result()
	}
	if e := check(false); e != nil {
		return e
	}
	scratch := reflect.New(rv.Type().Elem())
	scratch.Elem().Set(rv.Elem()) // decoding merges into v's value, as encoding/json does
	err := json.Unmarshal(data, scratch.Interface())
	if err == nil {
		rv.Elem().Set(scratch.Elem())
		return nil
	}
	if e := check(true); e != nil {
		return e
	}
	// The check passes should have caught everything encoding/json
	// refuses; if they did not, report the error without its text unless
	// it is known to carry no values.
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		path := Root
		if te.Field != "" {
			for k := range strings.SplitSeq(te.Field, ".") {
				path = PathKey(path, k)
			}
		}
		return &Error{Problems: []Problem{{Path: path, Message: "expected " + describeType(te.Type) + ", got " + te.Value}}}
	}
	return &Error{Problems: []Problem{{Path: Root, Message: fmt.Sprintf("cannot decode into %T", v)}}}
}

// errFatal stops the check pass: after a syntax error or excessive nesting
// the rest of the token stream cannot be walked. The problem has already
// been recorded.
var errFatal = errors.New("fatal problem")

type checker struct {
	// deep runs the unmarshalers of types that have them on their values.
	deep     bool
	dec      *lexer
	data     []byte
	maxDepth int
	problems []Problem
	dropped  int
	// path is where the walk is, rendered only when a problem is found:
	// building a path string for every value would cost an allocation each.
	path []segment
}

// segment is one step of a path: an object key, or an array index.
type segment struct {
	key     string
	index   int
	isIndex bool
}

func (c *checker) here() string {
	p := Root
	for _, s := range c.path {
		if s.isIndex {
			p = PathIndex(p, s.index)
		} else {
			p = PathKey(p, s.key)
		}
	}
	return p
}

func (c *checker) add(msg string) {
	if len(c.problems) >= maxProblems {
		c.dropped++
		return
	}
	c.problems = append(c.problems, Problem{Path: c.here(), Message: msg})
}

func (c *checker) result() *Error {
	if len(c.problems) == 0 {
		return nil
	}
	ps := c.problems
	if c.dropped > 0 {
		ps = append(ps, Problem{Path: Root, Message: fmt.Sprintf("%d more problems not shown", c.dropped)})
	}
	return &Error{Problems: ps}
}

// position converts a byte offset into a 1-based line and column (in runes).
func (c *checker) position(off int64) string {
	off = min(max(off, 0), int64(len(c.data)))
	before := c.data[:off]
	line := bytes.Count(before, []byte("\n")) + 1
	col := utf8.RuneCount(before[bytes.LastIndexByte(before, '\n')+1:]) + 1
	return fmt.Sprintf("line %d, column %d", line, col)
}

// fail records a problem for an error returned by the token stream and
// returns errFatal.
func (c *checker) fail(err error) error {
	var se *json.SyntaxError
	switch {
	case errors.Is(err, errSyntax), errors.As(err, &se):
		// The offsets of syntax errors from Decoder.Token count only some
		// of the bytes read, so find the error again with a plain scan,
		// whose offset is exact. Its messages quote at most the single
		// offending character, never a whole value.
		off, msg := c.dec.InputOffset(), "invalid character"
		if err := json.Unmarshal(c.data, new(json.RawMessage)); errors.As(err, &se) {
			off, msg = se.Offset, se.Error()
			if msg != "unexpected end of JSON input" {
				off-- // Offset counts the offending byte.
			}
		}
		c.add(fmt.Sprintf("syntax error at %s: %s", c.position(off), msg))
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		c.add(fmt.Sprintf("unexpected end of input at %s", c.position(int64(len(c.data)))))
	default:
		c.add("invalid JSON: " + err.Error())
	}
	return errFatal
}

func (c *checker) trailing() {
	off := c.dec.InputOffset()
	rest := c.data[off:]
	trimmed := bytes.TrimLeft(rest, " \t\r\n")
	if len(trimmed) > 0 {
		c.add(fmt.Sprintf("unexpected data after top-level value at %s", c.position(off+int64(len(rest)-len(trimmed)))))
	}
}

var (
	rawMessageType      = reflect.TypeFor[json.RawMessage]()
	numberType          = reflect.TypeFor[json.Number]()
	jsonUnmarshalerType = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshalerType = reflect.TypeFor[encoding.TextUnmarshaler]()
)

// target classifies what a Go type accepts.
type target int

const (
	targetAny target = iota // anything at all: interface{} and json.RawMessage
	targetJSONUnmarshaler
	targetTextUnmarshaler
	targetStruct
	targetMap
	targetSlice // also arrays
	targetBytes // []byte, decoded from base64
	targetString
	targetNumber // json.Number
	targetBool
	targetInt
	targetUint
	targetFloat
	targetUnsupported
)

// resolve strips pointers from t and classifies what remains. nullable
// reports whether null is acceptable.
func resolve(t reflect.Type) (base reflect.Type, kind target, nullable bool) {
	if t == nil {
		return nil, targetAny, true
	}
	for t.Kind() == reflect.Pointer {
		nullable = true
		t = t.Elem()
	}
	switch {
	case t == rawMessageType:
		return t, targetAny, true
	case t.Implements(jsonUnmarshalerType) || reflect.PointerTo(t).Implements(jsonUnmarshalerType):
		return t, targetJSONUnmarshaler, true // encoding/json hands null to UnmarshalJSON
	case t.Implements(textUnmarshalerType) || reflect.PointerTo(t).Implements(textUnmarshalerType):
		return t, targetTextUnmarshaler, nullable
	case t == numberType:
		return t, targetNumber, nullable
	}
	switch t.Kind() {
	case reflect.Interface:
		if t.NumMethod() == 0 {
			return t, targetAny, true
		}
		return t, targetUnsupported, true
	case reflect.Struct:
		return t, targetStruct, nullable
	case reflect.Map:
		return t, targetMap, true
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 && !reflect.PointerTo(t.Elem()).Implements(jsonUnmarshalerType) && !reflect.PointerTo(t.Elem()).Implements(textUnmarshalerType) {
			return t, targetBytes, true
		}
		return t, targetSlice, true
	case reflect.Array:
		return t, targetSlice, nullable
	case reflect.String:
		return t, targetString, nullable
	case reflect.Bool:
		return t, targetBool, nullable
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return t, targetInt, nullable
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return t, targetUint, nullable
	case reflect.Float32, reflect.Float64:
		return t, targetFloat, nullable
	}
	return t, targetUnsupported, true
}

// describe names in JSON terms what a target accepts.
func describe(kind target, t reflect.Type) string {
	switch kind {
	case targetStruct, targetMap:
		return "object"
	case targetSlice:
		return "array"
	case targetBytes:
		return "base64 string"
	case targetString, targetTextUnmarshaler:
		return "string"
	case targetNumber, targetFloat:
		return "number"
	case targetBool:
		return "boolean"
	case targetInt:
		return "integer"
	case targetUint:
		return "non-negative integer"
	}
	return "JSON value for " + t.String()
}

func describeType(t reflect.Type) string {
	if t == nil {
		return "a different type"
	}
	base, kind, _ := resolve(t)
	return describe(kind, base)
}

func tokenKind(tok json.Token) string {
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '{' {
			return "object"
		}
		return "array"
	case string:
		return "string"
	case json.Number:
		return "number"
	case bool:
		return "boolean"
	case nil:
		return "null"
	}
	return "unknown token"
}

// value checks the next value in the stream against t, which is nil when
// anything goes (and only syntax, nesting and duplicates are checked).
// quoted is set for fields tagged with the ",string" option.
func (c *checker) value(t reflect.Type, depth int, quoted bool) error {
	start := c.dec.InputOffset()
	tok, err := c.dec.Token()
	if err != nil {
		return c.fail(err)
	}
	base, kind, nullable := resolve(t)

	if d, ok := tok.(json.Delim); ok {
		if depth+1 > c.maxDepth {
			c.add(fmt.Sprintf("nesting deeper than %d levels", c.maxDepth))
			return errFatal
		}
		switch kind {
		case targetJSONUnmarshaler:
			if err := c.skip(d, depth+1); err != nil {
				return err
			}
			c.checkUnmarshalJSON(base, start)
			return nil
		case targetAny:
		case targetStruct, targetMap:
			if d != '{' {
				c.mismatch(kind, base, tok)
				kind = targetAny
			}
		case targetSlice:
			if d != '[' {
				c.mismatch(kind, base, tok)
				kind = targetAny
			}
		default:
			c.mismatch(kind, base, tok)
			kind = targetAny
		}
		if kind == targetAny {
			base = nil
		}
		if d == '{' {
			return c.object(base, kind, depth+1)
		}
		return c.array(base, depth+1)
	}

	if tok == nil {
		if !nullable {
			c.add("expected " + describe(kind, base) + ", got null")
		} else if kind == targetJSONUnmarshaler {
			c.checkUnmarshalJSON(base, start)
		}
		return nil
	}
	if quoted {
		if s, ok := tok.(string); ok {
			c.quoted(kind, base, s)
			return nil
		}
		c.add("expected " + describe(kind, base) + " inside a string, got " + tokenKind(tok))
		return nil
	}

	switch kind {
	case targetAny:
	case targetJSONUnmarshaler:
		c.checkUnmarshalJSON(base, start)
	case targetTextUnmarshaler:
		s, ok := tok.(string)
		if !ok {
			c.mismatch(kind, base, tok)
			return nil
		}
		if !c.deep {
			return nil
		}
		u := reflect.New(base).Interface().(encoding.TextUnmarshaler)
		if err := u.UnmarshalText([]byte(s)); err != nil {
			c.add("invalid " + base.String())
		}
	case targetString:
		if _, ok := tok.(string); !ok {
			c.mismatch(kind, base, tok)
		}
	case targetBytes:
		s, ok := tok.(string)
		if !ok {
			c.mismatch(kind, base, tok)
			return nil
		}
		var scratch []byte
		if err := json.Unmarshal(strconv.AppendQuote(nil, s), &scratch); err != nil {
			c.add("invalid base64 data")
		}
	case targetBool:
		if _, ok := tok.(bool); !ok {
			c.mismatch(kind, base, tok)
		}
	case targetNumber, targetInt, targetUint, targetFloat:
		n, ok := tok.(json.Number)
		if !ok {
			c.mismatch(kind, base, tok)
			return nil
		}
		c.number(kind, base, string(n))
	case targetUnsupported:
		c.add("cannot decode into " + base.String())
	default: // struct, map, slice
		c.mismatch(kind, base, tok)
	}
	return nil
}

func (c *checker) mismatch(kind target, base reflect.Type, tok json.Token) {
	if kind == targetUnsupported {
		c.add("cannot decode into " + base.String())
		return
	}
	c.add("expected " + describe(kind, base) + ", got " + tokenKind(tok))
}

// number checks that the literal n fits the numeric target.
func (c *checker) number(kind target, base reflect.Type, n string) {
	switch kind {
	case targetInt:
		if _, err := strconv.ParseInt(n, 10, base.Bits()); err != nil {
			c.add(intProblem(err, "integer", base))
		}
	case targetUint:
		if _, err := strconv.ParseUint(n, 10, base.Bits()); err != nil {
			if strings.HasPrefix(n, "-") && !strings.ContainsAny(n, ".eE") {
				c.add("expected non-negative integer, got negative number")
				return
			}
			c.add(intProblem(err, "non-negative integer", base))
		}
	case targetFloat:
		if _, err := strconv.ParseFloat(n, base.Bits()); err != nil {
			c.add("number out of range for " + base.String())
		}
	}
}

func intProblem(err error, want string, base reflect.Type) string {
	if errors.Is(err, strconv.ErrRange) {
		return "integer out of range for " + base.String()
	}
	return "expected " + want + ", got number with a fraction or exponent"
}

// quoted checks a value of a field tagged ",string": a JSON string holding a
// literal of the field's type.
func (c *checker) quoted(kind target, base reflect.Type, s string) {
	switch kind {
	case targetString:
		var scratch string
		if err := json.Unmarshal([]byte(s), &scratch); err != nil {
			c.add("expected a quoted JSON string inside the string")
		}
	case targetBool:
		if s != "true" && s != "false" {
			c.add("expected true or false inside the string")
		}
	case targetInt, targetUint, targetFloat:
		// A JSON number literal, and nothing else, must fill the string.
		if s == "" || (s[0] != '-' && (s[0] < '0' || s[0] > '9')) || !json.Valid([]byte(s)) || strings.ContainsAny(s, " \t\r\n") {
			c.add("expected " + describe(kind, base) + " inside the string")
			return
		}
		c.number(kind, base, s)
	default:
		c.add("expected " + describe(kind, base) + ", got string")
	}
}

// checkUnmarshalJSON validates the value that began at offset start (just
// read) by handing its raw bytes to the type's UnmarshalJSON.
func (c *checker) checkUnmarshalJSON(base reflect.Type, start int64) {
	if !c.deep {
		return
	}
	raw := c.data[start:c.dec.InputOffset()]
	// The offset before a value may include the separator that precedes it.
	raw = bytes.TrimLeft(raw, " \t\r\n")
	raw = bytes.TrimPrefix(raw, []byte(":"))
	raw = bytes.TrimPrefix(raw, []byte(","))
	raw = bytes.TrimLeft(raw, " \t\r\n")
	u, ok := reflect.New(base).Interface().(json.Unmarshaler)
	if !ok {
		// Only the value receiver implements it.
		u, ok = reflect.New(base).Elem().Interface().(json.Unmarshaler)
	}
	if ok && u.UnmarshalJSON(raw) != nil {
		c.add("invalid " + base.String())
	}
}

// skip walks the rest of a container whose opening delimiter d was just
// read, checking only syntax, nesting and duplicate keys.
func (c *checker) skip(d json.Delim, depth int) error {
	if d == '{' {
		return c.object(nil, targetAny, depth)
	}
	return c.array(nil, depth)
}

// object walks the members of an object whose '{' was just read. base is
// the struct or map type the object decodes into, or nil for anything.
func (c *checker) object(base reflect.Type, kind target, depth int) error {
	var fields *fieldSet
	if kind == targetStruct {
		fields = cachedFields(base)
	}
	// Duplicate keys are found by a linear scan while objects are small
	// (most are), and by a map beyond that: a map per object was a large
	// share of the cost of decoding many small objects.
	var seenList []string
	var seenMap map[string]struct{}
	isDup := func(key string) bool {
		if seenMap != nil {
			_, dup := seenMap[key]
			seenMap[key] = struct{}{}
			return dup
		}
		for _, k := range seenList {
			if k == key {
				return true
			}
		}
		seenList = append(seenList, key)
		if len(seenList) > 16 {
			seenMap = make(map[string]struct{}, 2*len(seenList))
			for _, k := range seenList {
				seenMap[k] = struct{}{}
			}
		}
		return false
	}
	for c.dec.More() {
		tok, err := c.dec.Token()
		if err != nil {
			return c.fail(err)
		}
		key, ok := tok.(string)
		if !ok {
			// Token reports non-string keys as syntax errors, so this
			// is unreachable; stay safe anyway.
			c.add("object key is not a string")
			return errFatal
		}
		c.path = append(c.path, segment{key: key})
		dup := isDup(key)
		if dup {
			c.add("duplicate key")
		}

		var child reflect.Type
		quoted := false
		switch kind {
		case targetStruct:
			f, ok := fields.byName[key]
			if !ok {
				if !dup {
					c.add(fields.unknown(key))
				}
				break
			}
			child, quoted = f.typ, f.quoted
		case targetMap:
			child = base.Elem()
			if msg := checkMapKey(base.Key(), key); msg != "" && !dup {
				c.add(msg)
			}
		}
		if err := c.value(child, depth, quoted); err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
	}
	if _, err := c.dec.Token(); err != nil { // '}'
		return c.fail(err)
	}
	return nil
}

func (c *checker) array(base reflect.Type, depth int) error {
	var elem reflect.Type
	maxLen := -1
	if base != nil {
		elem = base.Elem()
		if base.Kind() == reflect.Array {
			maxLen = base.Len()
		}
	}
	i := 0
	for c.dec.More() {
		c.path = append(c.path, segment{index: i, isIndex: true})
		if maxLen >= 0 && i == maxLen {
			c.add(fmt.Sprintf("too many elements: the array holds %d", maxLen))
			elem = nil
		}
		if err := c.value(elem, depth, false); err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		i++
	}
	if _, err := c.dec.Token(); err != nil { // ']'
		return c.fail(err)
	}
	return nil
}

// checkMapKey reports whether key can become a key of type kt, the way
// encoding/json converts map keys.
func checkMapKey(kt reflect.Type, key string) string {
	if reflect.PointerTo(kt).Implements(textUnmarshalerType) {
		u := reflect.New(kt).Interface().(encoding.TextUnmarshaler)
		if err := u.UnmarshalText([]byte(key)); err != nil {
			return "invalid key for " + kt.String()
		}
		return ""
	}
	switch kt.Kind() {
	case reflect.String:
		return ""
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if _, err := strconv.ParseInt(key, 10, kt.Bits()); err != nil {
			return "key is not an integer in the range of " + kt.String()
		}
		return ""
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		if _, err := strconv.ParseUint(key, 10, kt.Bits()); err != nil {
			return "key is not a non-negative integer in the range of " + kt.String()
		}
		return ""
	}
	return "cannot decode keys into " + kt.String()
}

// field is a struct field as encoding/json sees it.
type field struct {
	name   string
	typ    reflect.Type
	quoted bool
	tagged bool
	depth  int
}

type fieldSet struct {
	byName map[string]field
	names  []string // sorted
}

// unknown words the problem for a key that matches no field.
func (fs *fieldSet) unknown(key string) string {
	if len(fs.names) == 0 {
		return "unknown field (the object takes no fields)"
	}
	var b strings.Builder
	b.WriteString("unknown field")
	if s := fs.suggest(key); s != "" {
		b.WriteString(", did you mean ")
		b.WriteString(s)
		b.WriteString("?")
	}
	b.WriteString(" (known: ")
	b.WriteString(strings.Join(fs.names, ", "))
	b.WriteString(")")
	return b.String()
}

// suggest returns the known field closest to key, if it is close enough to
// be a likely typo.
func (fs *fieldSet) suggest(key string) string {
	best, bestDist := "", 3
	lk := strings.ToLower(key)
	for _, n := range fs.names {
		if strings.ToLower(n) == lk {
			return n
		}
		if d := editDistance(lk, strings.ToLower(n)); d < bestDist && d < len(n)/2+1 {
			best, bestDist = n, d
		}
	}
	return best
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 1 << 30 // not a typo, and not worth the time
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

var fieldCache sync.Map // reflect.Type -> *fieldSet

func cachedFields(t reflect.Type) *fieldSet {
	if fs, ok := fieldCache.Load(t); ok {
		return fs.(*fieldSet)
	}
	fs, _ := fieldCache.LoadOrStore(t, typeFields(t))
	return fs.(*fieldSet)
}

// typeFields lists the JSON fields of struct type t following the rules of
// encoding/json: tags rename or hide fields, fields of embedded structs are
// promoted, and of several fields with one name the shallowest wins, a
// tagged one breaking ties; an unbroken tie hides the name altogether.
func typeFields(t reflect.Type) *fieldSet {
	type pending struct {
		typ   reflect.Type
		depth int
	}
	var all []field
	current := []pending{}
	next := []pending{{typ: t}}
	visited := map[reflect.Type]bool{}
	var count, nextCount map[reflect.Type]int
	for len(next) > 0 {
		current, next = next, current[:0]
		count, nextCount = nextCount, map[reflect.Type]int{}
		for _, p := range current {
			if visited[p.typ] {
				continue
			}
			visited[p.typ] = true
			for i := range p.typ.NumField() {
				sf := p.typ.Field(i)
				if sf.Anonymous {
					et := sf.Type
					if et.Kind() == reflect.Pointer {
						et = et.Elem()
					}
					if !sf.IsExported() && et.Kind() != reflect.Struct {
						continue
					}
				} else if !sf.IsExported() {
					continue
				}
				tag := sf.Tag.Get("json")
				if tag == "-" {
					continue
				}
				name, opts, _ := strings.Cut(tag, ",")
				if !isValidTag(name) {
					name = ""
				}
				ft := sf.Type
				if ft.Name() == "" && ft.Kind() == reflect.Pointer {
					ft = ft.Elem()
				}
				if name != "" || !sf.Anonymous || ft.Kind() != reflect.Struct {
					quoted := false
					if slices.Contains(strings.Split(opts, ","), "string") {
						switch ft.Kind() {
						case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
							reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
							reflect.Float32, reflect.Float64, reflect.String:
							quoted = true
						}
					}
					f := field{name: name, typ: sf.Type, quoted: quoted, tagged: name != "", depth: p.depth + 1}
					if f.name == "" {
						f.name = sf.Name
					}
					all = append(all, f)
					if count[p.typ] > 1 {
						// The enclosing struct was embedded more than once
						// at this depth: its fields annihilate each other.
						all = append(all, f)
					}
					continue
				}
				nextCount[ft]++
				if nextCount[ft] == 1 {
					next = append(next, pending{typ: ft, depth: p.depth + 1})
				}
			}
		}
	}

	byName := map[string][]field{}
	for _, f := range all {
		byName[f.name] = append(byName[f.name], f)
	}
	fs := &fieldSet{byName: map[string]field{}}
	for name, fields := range byName {
		if f, ok := dominant(fields); ok {
			fs.byName[name] = f
			fs.names = append(fs.names, name)
		}
	}
	slices.Sort(fs.names)
	return fs
}

func dominant(fields []field) (field, bool) {
	minDepth := slices.MinFunc(fields, func(a, b field) int { return a.depth - b.depth }).depth
	var top []field
	for _, f := range fields {
		if f.depth == minDepth {
			top = append(top, f)
		}
	}
	if len(top) == 1 {
		return top[0], true
	}
	var tagged []field
	for _, f := range top {
		if f.tagged {
			tagged = append(tagged, f)
		}
	}
	if len(tagged) == 1 {
		return tagged[0], true
	}
	return field{}, false
}

func isValidTag(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		switch {
		case strings.ContainsRune("!#$%&()*+-./:;<=>?@[]^_{|}~ ", c):
		case !unicode.IsLetter(c) && !unicode.IsDigit(c):
			return false
		}
	}
	return true
}
