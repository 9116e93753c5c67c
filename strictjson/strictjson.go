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
	"sync/atomic"
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
// problem, decodes it into v as encoding/json would. Problems with the
// document are returned as an [*Error] listing all of them (up to a
// hundred), and v is left untouched. A v that is not a non-nil pointer is a
// programming error, reported as a plain error.
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
	if decodeFast(data, rv, lim) {
		return nil
	}
	return decodeSlow(data, rv, lim)
}

// decodeFast checks and decodes data in one pass, setting the values that
// encoding/json would set, and reports whether it succeeded. At the first
// problem, or for anything it does not decode exactly as encoding/json
// does (a ",string" field, a type with promoted unmarshalers), it gives up
// and leaves v untouched, and decodeSlow decides: so every problem is
// reported by one code path, and the fast path needs only to be right
// about what it accepts. A document the fast path accepts is one that
// decodeSlow accepts, with the same result; FuzzDecodeFastMatchesSlow
// checks that. BenchmarkDecodeFastPass shows what it is worth: two to
// eight times decodeSlow's speed on heartbeats and configs.
func decodeFast(data []byte, rv reflect.Value, lim Limits) bool {
	// Decoding merges into v's value, as encoding/json does. A scratch
	// copy of a value that holds slices, maps or pointers would share them,
	// and a document that fails half-way would leave v changed; so the
	// fast pass takes only zero values, which is what callers decode into.
	if !rv.Elem().IsZero() {
		return false
	}
	c := newChecker(data, lim.MaxDepth)
	defer c.release()
	c.fast = true
	scratch := reflect.New(rv.Type().Elem())
	if err := c.value(infoOf(rv.Type().Elem()), 0, false, scratch.Elem()); err == nil {
		c.trailing()
	}
	if c.failed {
		return false
	}
	rv.Elem().Set(scratch.Elem())
	return true
}

// decodeSlow checks data, decodes it with encoding/json and, only if that
// fails, checks it again running the unmarshalers of values that have
// them, to say which value is wrong and where.
func decodeSlow(data []byte, rv reflect.Value, lim Limits) error {
	check := func(deep bool) *Error {
		c := newChecker(data, lim.MaxDepth)
		defer c.release()
		c.deep = deep
		if len(bytes.TrimLeft(data, " \t\r\n")) == 0 {
			c.add("empty document")
		} else if err := c.value(infoOf(rv.Type().Elem()), 0, false, reflect.Value{}); err == nil {
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
	return &Error{Problems: []Problem{{Path: Root, Message: fmt.Sprintf("cannot decode into %s", rv.Type())}}}
}

// errFatal stops the check pass: after a syntax error or excessive nesting
// the rest of the token stream cannot be walked. The problem has already
// been recorded.
var errFatal = errors.New("fatal problem")

type checker struct {
	// deep runs the unmarshalers of types that have them on their values.
	deep bool
	// fast is decodeFast's pass: it decodes as it goes, and stops at the
	// first problem without recording it (failed is set instead).
	fast   bool
	failed bool
	dec    lexer
	data   []byte
	// maxDepth bounds nesting.
	maxDepth int
	problems []Problem
	dropped  int
	// path is where the walk is, rendered only when a problem is found:
	// building a path string for every value would cost an allocation each.
	path []segment
	// keys holds the keys of the objects being walked, innermost last,
	// for finding duplicates without a map per object.
	keys [][]byte
}

var checkerPool = sync.Pool{New: func() any { return new(checker) }}

func newChecker(data []byte, maxDepth int) *checker {
	c := checkerPool.Get().(*checker)
	c.dec = lexer{data: data, stack: c.dec.stack[:0]}
	c.data, c.maxDepth = data, maxDepth
	return c
}

// release returns c to the pool, dropping its references to the document.
func (c *checker) release() {
	clear(c.keys[:cap(c.keys)])
	*c = checker{
		dec:  lexer{stack: c.dec.stack[:0]},
		path: c.path[:0],
		keys: c.keys[:0],
	}
	checkerPool.Put(c)
}

// segment is one step of a path: an object key, given by the span of its
// quoted text in the document, or an array index.
type segment struct {
	keyStart, keyEnd int
	index            int
	isIndex          bool
}

func (c *checker) here() string {
	p := Root
	for _, s := range c.path {
		if s.isIndex {
			p = PathIndex(p, s.index)
		} else {
			p = PathKey(p, unquoteKey(c.data[s.keyStart:s.keyEnd]))
		}
	}
	return p
}

func (c *checker) add(msg string) {
	c.failed = true
	if c.fast {
		return
	}
	if len(c.problems) >= maxProblems {
		c.dropped++
		return
	}
	c.problems = append(c.problems, Problem{Path: c.here(), Message: msg})
}

// giveUp ends the fast pass without a problem: decodeSlow decides.
func (c *checker) giveUp() { c.failed = true }

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
	if c.fast {
		c.failed = true
		return errFatal
	}
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

// typeInfo is what the walk needs to know of a target type, worked out
// once per type: reflect's Implements is too slow to ask per value.
type typeInfo struct {
	base     reflect.Type
	kind     target
	nullable bool
	// fields are a struct's JSON fields.
	fields *fieldSet
	// plainMap is a map whose keys are of string kind and not text
	// unmarshalers: the fast pass decodes those itself.
	plainMap bool
	// odd is a type whose unmarshalers encoding/json finds by rules the
	// fast pass does not follow (an unnamed type with promoted methods).
	odd bool
	// elem caches the info of a slice's, array's or map's elements, found
	// on first use (a type may contain itself).
	elem atomic.Pointer[typeInfo]
}

func (ti *typeInfo) elemInfo() *typeInfo {
	if e := ti.elem.Load(); e != nil {
		return e
	}
	e := infoOf(ti.base.Elem())
	ti.elem.Store(e)
	return e
}

var (
	anyInfo   = &typeInfo{kind: targetAny, nullable: true}
	typeInfos sync.Map // reflect.Type -> *typeInfo
)

func infoOf(t reflect.Type) *typeInfo {
	if t == nil {
		return anyInfo
	}
	if ti, ok := typeInfos.Load(t); ok {
		return ti.(*typeInfo)
	}
	ti := &typeInfo{}
	ti.base, ti.kind, ti.nullable = resolve(t)
	switch ti.kind {
	case targetStruct:
		ti.fields = cachedFields(ti.base)
	case targetMap:
		kt := ti.base.Key()
		ti.plainMap = kt.Kind() == reflect.String && !reflect.PointerTo(kt).Implements(textUnmarshalerType)
	}
	if ti.base != nil && ti.base.Name() == "" && reflect.PointerTo(ti.base).NumMethod() > 0 {
		ti.odd = true
	}
	got, _ := typeInfos.LoadOrStore(t, ti)
	return got.(*typeInfo)
}

func tokenKind(k tokKind) string {
	switch k {
	case tokBeginObject:
		return "object"
	case tokBeginArray:
		return "array"
	case tokString:
		return "string"
	case tokNumber:
		return "number"
	case tokTrue, tokFalse:
		return "boolean"
	case tokNull:
		return "null"
	}
	return "unknown token"
}

// value checks the next value in the stream against the type ti describes,
// which is anyInfo when anything goes (and only syntax, nesting and
// duplicates are checked).
// quoted is set for fields tagged with the ",string" option. In the fast
// pass, dst is where the value goes (a settable value of that type); it is
// invalid where the value is only checked.
func (c *checker) value(ti *typeInfo, depth int, quoted bool, dst reflect.Value) error {
	if c.fast && c.failed {
		return errFatal
	}
	k, err := c.dec.next()
	if err != nil {
		return c.fail(err)
	}
	start := c.dec.start
	if dst.IsValid() && ti.odd {
		c.giveUp()
		return errFatal
	}
	switch {
	case k == tokBeginObject || k == tokBeginArray:
		return c.composite(ti, k, start, depth, dst)
	case k == tokNull:
		c.null(ti, start, dst)
	case quoted:
		c.quotedValue(ti, k, dst)
	default:
		c.scalar(ti, k, start, dst)
	}
	return nil
}

// composite checks an object or array whose first token, k, was just read
// at start, against ti (see value).
func (c *checker) composite(ti *typeInfo, k tokKind, start, depth int, dst reflect.Value) error {
	base, kind := ti.base, ti.kind
	decode := dst.IsValid()
	if depth+1 > c.maxDepth {
		c.add(fmt.Sprintf("nesting deeper than %d levels", c.maxDepth))
		return errFatal
	}
	switch kind {
	case targetJSONUnmarshaler:
		if err := c.skip(k, depth+1); err != nil {
			return err
		}
		if decode {
			c.unmarshalJSON(c.deref(dst), start)
		} else {
			c.checkUnmarshalJSON(base, start)
		}
		return nil
	case targetAny:
	case targetStruct, targetMap:
		if k != tokBeginObject {
			c.mismatch(kind, base, k)
			kind = targetAny
		}
	case targetSlice:
		if k != tokBeginArray {
			c.mismatch(kind, base, k)
			kind = targetAny
		}
	default:
		c.mismatch(kind, base, k)
		kind = targetAny
	}
	if kind == targetAny {
		base = nil
	}
	// The fast pass fills structs, slices, arrays and maps with string
	// keys itself; anything else (interfaces, json.RawMessage, maps
	// with other keys) it checks, then hands to encoding/json.
	var into reflect.Value
	handOver := false
	if decode && !c.failed {
		if kind == targetAny || (kind == targetMap && !ti.plainMap) {
			handOver = true
		} else {
			into = c.deref(dst)
		}
	}
	var err error
	if k == tokBeginObject {
		err = c.object(base, ti, kind, depth+1, into)
	} else {
		err = c.array(base, ti, depth+1, into)
	}
	if err == nil && handOver {
		c.handOver(dst, start)
	}
	return err
}

// null checks a null, read at start, against ti (see value).
func (c *checker) null(ti *typeInfo, start int, dst reflect.Value) {
	switch {
	case !ti.nullable:
		c.add("expected " + describe(ti.kind, ti.base) + ", got null")
	case dst.IsValid():
		c.storeNull(dst, start)
	case ti.kind == targetJSONUnmarshaler:
		c.checkUnmarshalJSON(ti.base, start)
	}
}

// quotedValue checks the value of a ",string" field, whose token k was
// just read, against ti (see value).
func (c *checker) quotedValue(ti *typeInfo, k tokKind, dst reflect.Value) {
	if k == tokString {
		c.quoted(ti.kind, ti.base, c.dec.strString())
		if dst.IsValid() {
			c.giveUp() // rare: let encoding/json do it
		}
		return
	}
	c.add("expected " + describe(ti.kind, ti.base) + " inside a string, got " + tokenKind(k))
}

// scalar checks a string, number or boolean, whose token k was just read
// at start, against ti (see value).
func (c *checker) scalar(ti *typeInfo, k tokKind, start int, dst reflect.Value) {
	base, kind := ti.base, ti.kind
	decode := dst.IsValid()
	switch kind {
	case targetAny:
		if decode {
			c.handOver(dst, start)
		}
	case targetJSONUnmarshaler:
		if decode {
			c.unmarshalJSON(c.deref(dst), start)
		} else {
			c.checkUnmarshalJSON(base, start)
		}
	case targetTextUnmarshaler:
		if k != tokString {
			c.mismatch(kind, base, k)
			return
		}
		if decode {
			u := c.deref(dst).Addr().Interface().(encoding.TextUnmarshaler)
			if err := u.UnmarshalText(c.dec.strBytes()); err != nil {
				c.giveUp()
			}
			return
		}
		if !c.deep {
			return
		}
		u := reflect.New(base).Interface().(encoding.TextUnmarshaler)
		if err := u.UnmarshalText(c.dec.strBytes()); err != nil {
			c.add("invalid " + base.String())
		}
	case targetString:
		if k != tokString {
			c.mismatch(kind, base, k)
		} else if decode {
			c.deref(dst).SetString(c.dec.strString())
		}
	case targetBytes:
		if k != tokString {
			c.mismatch(kind, base, k)
			return
		}
		var scratch []byte
		if err := json.Unmarshal(strconv.AppendQuote(nil, c.dec.strString()), &scratch); err != nil {
			c.add("invalid base64 data")
		} else if decode {
			c.handOver(dst, start)
		}
	case targetBool:
		if k != tokTrue && k != tokFalse {
			c.mismatch(kind, base, k)
		} else if decode {
			c.deref(dst).SetBool(k == tokTrue)
		}
	case targetNumber, targetInt, targetUint, targetFloat:
		if k != tokNumber {
			c.mismatch(kind, base, k)
			return
		}
		var into reflect.Value
		if decode {
			into = c.deref(dst)
		}
		c.number(kind, base, string(c.data[start:c.dec.pos]), into)
	case targetUnsupported:
		c.add("cannot decode into " + base.String())
	default: // struct, map, slice
		c.mismatch(kind, base, k)
	}
}

// deref follows the pointers of dst, allocating those that are nil, as
// encoding/json does on its way to a non-null value.
func (c *checker) deref(dst reflect.Value) reflect.Value {
	for dst.Kind() == reflect.Pointer {
		if dst.IsNil() {
			dst.Set(reflect.New(dst.Type().Elem()))
		}
		dst = dst.Elem()
	}
	return dst
}

// storeNull stores null in dst as encoding/json does: a pointer, map,
// slice or interface becomes nil, a named type with an UnmarshalJSON
// method is handed "null", and anything else is left alone.
func (c *checker) storeNull(dst reflect.Value, start int) {
	switch dst.Kind() {
	case reflect.Pointer:
		dst.SetZero()
		return
	case reflect.Interface:
		c.handOver(dst, start)
		return
	}
	if dst.Type().Name() != "" {
		if u, ok := dst.Addr().Interface().(json.Unmarshaler); ok {
			if err := u.UnmarshalJSON(c.data[start:c.dec.pos]); err != nil {
				c.giveUp()
			}
			return
		}
	}
	if k := dst.Kind(); k == reflect.Map || k == reflect.Slice {
		dst.SetZero()
	}
}

// unmarshalJSON hands the value that began at start to dst's UnmarshalJSON.
func (c *checker) unmarshalJSON(dst reflect.Value, start int) {
	if c.failed {
		return
	}
	u := dst.Addr().Interface().(json.Unmarshaler)
	if err := u.UnmarshalJSON(c.data[start:c.dec.pos]); err != nil {
		c.giveUp()
	}
}

// handOver decodes the value that began at start, already checked, into
// dst with encoding/json: decoding through a pointer to dst is what
// encoding/json itself does with it in place.
func (c *checker) handOver(dst reflect.Value, start int) {
	if c.failed {
		return
	}
	raw := c.data[start:c.dec.pos]
	if dst.Type() == rawMessageType {
		dst.SetBytes(append(dst.Bytes()[:0], raw...)) // what RawMessage.UnmarshalJSON does
		return
	}
	if err := json.Unmarshal(raw, dst.Addr().Interface()); err != nil {
		c.giveUp()
	}
}

func (c *checker) mismatch(kind target, base reflect.Type, k tokKind) {
	if kind == targetUnsupported {
		c.add("cannot decode into " + base.String())
		return
	}
	c.add("expected " + describe(kind, base) + ", got " + tokenKind(k))
}

// number checks that the literal n fits the numeric target and, when into
// is valid, stores it there.
func (c *checker) number(kind target, base reflect.Type, n string, into reflect.Value) {
	switch kind {
	case targetInt:
		v, err := strconv.ParseInt(n, 10, base.Bits())
		if err != nil {
			c.add(intProblem(err, "integer", base))
		} else if into.IsValid() {
			into.SetInt(v)
		}
	case targetUint:
		v, err := strconv.ParseUint(n, 10, base.Bits())
		if err != nil {
			if strings.HasPrefix(n, "-") && !strings.ContainsAny(n, ".eE") {
				c.add("expected non-negative integer, got negative number")
				return
			}
			c.add(intProblem(err, "non-negative integer", base))
		} else if into.IsValid() {
			into.SetUint(v)
		}
	case targetFloat:
		v, err := strconv.ParseFloat(n, base.Bits())
		if err != nil {
			c.add("number out of range for " + base.String())
		} else if into.IsValid() {
			into.SetFloat(v)
		}
	case targetNumber:
		if into.IsValid() {
			into.SetString(n)
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
		c.number(kind, base, s, reflect.Value{})
	default:
		c.add("expected " + describe(kind, base) + ", got string")
	}
}

// checkUnmarshalJSON validates the value that began at offset start (just
// read) by handing its raw bytes to the type's UnmarshalJSON.
func (c *checker) checkUnmarshalJSON(base reflect.Type, start int) {
	if !c.deep {
		return
	}
	raw := c.data[start:c.dec.pos]
	u, ok := reflect.New(base).Interface().(json.Unmarshaler)
	if !ok {
		// Only the value receiver implements it.
		u, ok = reflect.New(base).Elem().Interface().(json.Unmarshaler)
	}
	if ok && u.UnmarshalJSON(raw) != nil {
		c.add("invalid " + base.String())
	}
}

// skip walks the rest of a container whose opening token k was just read,
// checking only syntax, nesting and duplicate keys.
func (c *checker) skip(k tokKind, depth int) error {
	if k == tokBeginObject {
		return c.object(nil, anyInfo, targetAny, depth, reflect.Value{})
	}
	return c.array(nil, anyInfo, depth, reflect.Value{})
}

// object walks the members of an object whose '{' was just read. base is
// the struct or map type the object decodes into, or nil for anything; ti
// describes it. into, in the fast pass, is the struct or map to fill.
func (c *checker) object(base reflect.Type, ti *typeInfo, kind target, depth int, into reflect.Value) error {
	var elem reflect.Value // a map's element, reused for every member as encoding/json does
	if kind == targetMap && into.IsValid() {
		if into.IsNil() {
			into.Set(reflect.MakeMap(base))
		}
		elem = reflect.New(base.Elem()).Elem()
	}
	keys := dupKeys{c: c, mark: len(c.keys)}
	defer keys.release()
	for c.dec.More() {
		k, err := c.dec.next()
		if err != nil {
			return c.fail(err)
		}
		if k != tokString {
			// The lexer reports non-string keys as syntax errors, so this
			// is unreachable; stay safe anyway.
			c.add("object key is not a string")
			return errFatal
		}
		key := c.dec.strBytes()
		c.path = append(c.path, segment{keyStart: c.dec.start, keyEnd: c.dec.pos})
		dup := keys.seen(key)
		if dup {
			c.add("duplicate key")
		}
		child, quoted, dst := c.member(key, dup, base, ti, kind, into, elem)
		if err := c.value(child, depth, quoted, dst); err != nil {
			return err
		}
		if kind == targetMap && into.IsValid() && !c.failed {
			kv := reflect.New(base.Key()).Elem()
			kv.SetString(string(key))
			into.SetMapIndex(kv, elem)
		}
		c.path = c.path[:len(c.path)-1]
	}
	if _, err := c.dec.next(); err != nil { // '}'
		return c.fail(err)
	}
	return nil
}

// member returns what the member named key of an object (see object)
// decodes as: its type, whether it is quoted, and in the fast pass where
// it goes. It reports an unknown field, or a map key its type refuses,
// unless the key is a duplicate, reported already.
func (c *checker) member(key []byte, dup bool, base reflect.Type, ti *typeInfo, kind target, into, elem reflect.Value) (child *typeInfo, quoted bool, dst reflect.Value) {
	child = anyInfo
	switch kind {
	case targetStruct:
		f, ok := ti.fields.byName[string(key)]
		if !ok {
			if !dup {
				c.add(ti.fields.unknown(string(key)))
			}
			break
		}
		child, quoted = f.info(), f.quoted
		if into.IsValid() {
			dst = c.field(into, f.index)
		}
	case targetMap:
		child = ti.elemInfo()
		if !ti.plainMap {
			if msg := checkMapKey(base.Key(), string(key)); msg != "" && !dup {
				c.add(msg)
			}
		}
		if into.IsValid() {
			elem.SetZero()
			dst = elem
		}
	}
	return child, quoted, dst
}

// dupKeys finds the duplicate keys of one object: by a linear scan of the
// checker's keys while the object is small (most are), and by a map beyond
// that: a map per object was a large share of the cost of decoding many
// small objects.
type dupKeys struct {
	c    *checker
	mark int // where the object's keys start in c.keys
	m    map[string]struct{}
}

// seen records key and reports whether the object had it already.
func (d *dupKeys) seen(key []byte) bool {
	if d.m != nil {
		_, dup := d.m[string(key)]
		d.m[string(key)] = struct{}{}
		return dup
	}
	c := d.c
	for _, k := range c.keys[d.mark:] {
		if bytes.Equal(k, key) {
			return true
		}
	}
	c.keys = append(c.keys, key)
	if len(c.keys)-d.mark > 16 {
		d.m = make(map[string]struct{}, 2*(len(c.keys)-d.mark))
		for _, k := range c.keys[d.mark:] {
			d.m[string(k)] = struct{}{}
		}
	}
	return false
}

// release drops the object's keys from the checker's.
func (d *dupKeys) release() {
	clear(d.c.keys[d.mark:])
	d.c.keys = d.c.keys[:d.mark]
}

// field returns the field of struct v at index, allocating the embedded
// structs it goes through, as encoding/json does. It gives up on an
// embedded pointer to an unexported struct, which encoding/json cannot set.
func (c *checker) field(v reflect.Value, index []int) reflect.Value {
	for _, i := range index {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				if !v.CanSet() {
					c.giveUp()
					return reflect.Value{}
				}
				v.Set(reflect.New(v.Type().Elem()))
			}
			v = v.Elem()
		}
		v = v.Field(i)
	}
	return v
}

// array walks the elements of an array whose '[' was just read. into, in
// the fast pass, is the slice or array to fill.
func (c *checker) array(base reflect.Type, ti *typeInfo, depth int, into reflect.Value) error {
	elem := anyInfo
	maxLen := -1
	if base != nil {
		elem = ti.elemInfo()
		if base.Kind() == reflect.Array {
			maxLen = base.Len()
		}
	}
	isSlice := into.IsValid() && into.Kind() == reflect.Slice
	i := 0
	for c.dec.More() {
		c.path = append(c.path, segment{index: i, isIndex: true})
		if maxLen >= 0 && i == maxLen {
			c.add(fmt.Sprintf("too many elements: the array holds %d", maxLen))
			elem = anyInfo
		}
		// Slices grow and reuse their elements as encoding/json's do.
		var dst reflect.Value
		if into.IsValid() && !c.failed {
			if isSlice {
				if i >= into.Cap() {
					into.Grow(1)
				}
				if i >= into.Len() {
					into.SetLen(i + 1)
				}
			}
			if i < into.Len() {
				dst = into.Index(i)
			}
		}
		if err := c.value(elem, depth, false, dst); err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		i++
	}
	if _, err := c.dec.next(); err != nil { // ']'
		return c.fail(err)
	}
	if into.IsValid() && !c.failed {
		if i < into.Len() {
			if isSlice {
				into.SetLen(i)
			} else {
				for ; i < into.Len(); i++ {
					into.Index(i).SetZero()
				}
			}
		}
		if i == 0 && isSlice {
			into.Set(reflect.MakeSlice(into.Type(), 0, 0))
		}
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
	name string
	typ  reflect.Type
	// index leads from the struct to the field, through embedded structs,
	// as reflect.Value.FieldByIndex takes it.
	index  []int
	quoted bool
	tagged bool
	depth  int
	// ti caches the info of typ, found on first use (a type may contain
	// itself, so it cannot be worked out with the field set).
	ti *atomic.Pointer[typeInfo]
}

func (f *field) info() *typeInfo {
	if ti := f.ti.Load(); ti != nil {
		return ti
	}
	ti := infoOf(f.typ)
	f.ti.Store(ti)
	return ti
}

type fieldSet struct {
	byName map[string]*field
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
		index []int
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
					index := append(slices.Clip(p.index), i)
					f := field{name: name, typ: sf.Type, index: index, quoted: quoted, tagged: name != "", depth: p.depth + 1}
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
					next = append(next, pending{typ: ft, depth: p.depth + 1, index: append(slices.Clip(p.index), i)})
				}
			}
		}
	}

	byName := map[string][]field{}
	for _, f := range all {
		byName[f.name] = append(byName[f.name], f)
	}
	fs := &fieldSet{byName: map[string]*field{}}
	for name, fields := range byName {
		if f, ok := dominant(fields); ok {
			f.ti = new(atomic.Pointer[typeInfo])
			fs.byName[name] = &f
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
