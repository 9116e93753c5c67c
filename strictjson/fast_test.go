package strictjson

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"
)

// The types below exercise every way the fast pass fills a value, so that
// FuzzDecodeFastMatchesSlow can compare it with encoding/json's result.

type fastText struct{ s string }

func (t *fastText) UnmarshalText(b []byte) error {
	if string(b) == "bad" {
		return errors.New("bad text")
	}
	t.s = "text:" + string(b)
	return nil
}

type fastJSON struct{ raw string }

func (j *fastJSON) UnmarshalJSON(b []byte) error {
	if string(b) == `"bad"` {
		return errors.New("bad json")
	}
	j.raw = "json:" + string(b)
	return nil
}

type fastName string

type FastEmbedded struct {
	Promoted string `json:"promoted"`
}

type FastPtrEmbedded struct {
	Deep int `json:"deep"`
}

type fastHidden struct {
	Inner string `json:"inner"`
}

type fastHiddenPtr struct {
	Lost string `json:"lost"`
}

type fastDoc struct {
	FastEmbedded
	*FastPtrEmbedded
	fastHidden
	*fastHiddenPtr
	Str      string                 `json:"str"`
	Name     fastName               `json:"name"`
	Int8     int8                   `json:"int8"`
	Uint16   uint16                 `json:"uint16"`
	F32      float32                `json:"f32"`
	F64      *float64               `json:"f64"`
	PP       **int                  `json:"pp"`
	Bool     bool                   `json:"bool"`
	Num      json.Number            `json:"num"`
	Raw      json.RawMessage        `json:"raw"`
	RawPtr   *json.RawMessage       `json:"raw_ptr"`
	Any      any                    `json:"any"`
	Stamp    time.Time              `json:"stamp"`
	StampPtr *time.Time             `json:"stamp_ptr"`
	Text     fastText               `json:"text"`
	TextPtr  *fastText              `json:"text_ptr"`
	JSON     fastJSON               `json:"json"`
	JSONPtr  *fastJSON              `json:"json_ptr"`
	Bytes    []byte                 `json:"bytes"`
	Quoted   int                    `json:"quoted,string"`
	Ints     []int                  `json:"ints"`
	Pair     [2]string              `json:"pair"`
	Nested   []fastDoc              `json:"nested"`
	Map      map[string]fastDoc     `json:"map"`
	Named    map[fastName]int       `json:"named"`
	IntKeys  map[int]string         `json:"int_keys"`
	Anys     map[string]any         `json:"anys"`
	Slices   map[string][]int       `json:"slices"`
	Unnamed  struct{ A int }        `json:"unnamed"`
	Promo    struct{ time.Time }    `json:"promo"`
	PtrMap   *map[string]*fastDoc   `json:"ptr_map"`
	Iface    interface{ M() }       `json:"iface"`
	Arr      [1]map[string]fastName `json:"arr"`
}

// prefilled returns a value with something in most fields, since decoding
// merges into what is there.
func prefilled() *fastDoc {
	one := 1.0
	n := 7
	pn := &n
	raw := json.RawMessage(`{"old":1}`)
	return &fastDoc{
		FastPtrEmbedded: &FastPtrEmbedded{Deep: 3},
		Str:             "old", F64: &one, PP: &pn, Raw: json.RawMessage(`[1]`), RawPtr: &raw,
		Any:    &n,
		Ints:   make([]int, 3, 8),
		Nested: []fastDoc{{Str: "a", Ints: []int{1, 2}}, {Str: "b"}},
		Map:    map[string]fastDoc{"k": {Str: "v"}},
		Named:  map[fastName]int{"x": 1},
		Anys:   map[string]any{"a": 1.0},
		Pair:   [2]string{"p", "q"},
	}
}

func FuzzDecodeFastMatchesSlow(f *testing.F) {
	seeds := []string{
		`{}`, `null`, `[]`, `{"str": "x", "name": "n", "int8": -128, "uint16": 65535, "f32": 1.5e3, "f64": null, "pp": 5, "bool": true}`,
		`{"num": -0.5e7, "raw": {"a": [1, {"b": null}]}, "raw_ptr": null, "any": {"z": [true, "s", 1.25]}, "stamp": "2026-01-02T03:04:05.123456Z"}`,
		`{"stamp_ptr": null, "text": "hello", "text_ptr": "t", "json": {"x": 1}, "json_ptr": null, "bytes": "aGk=", "quoted": "12"}`,
		`{"ints": [1, 2], "pair": ["a"], "nested": [{"str": "n", "ints": []}], "map": {"k": {"int8": 1}, "l": {}}}`,
		`{"named": {"y": 2}, "int_keys": {"-3": "m"}, "anys": {"b": null}, "slices": {"s": [3]}, "unnamed": {"A": 4}}`,
		`{"promo": "2026-01-02T03:04:05Z", "ptr_map": {"a": {"str": "p"}, "b": null}, "iface": null, "arr": [{"k": "v"}]}`,
		`{"promoted": "p", "deep": 9, "inner": "i", "lost": "l"}`,
		`{"text": "bad"}`, `{"json": "bad"}`, `{"str": "\u00e9\ud800\n"}`, "{\"str\": \"\xff\"}", `{"str": 1}`, `{"ints": [1, 1.5]}`,
		`{"nested": [{"nested": [{"nested": []}]}]}`, `{"str": "a", "str": "b"}`, `{"St\u0072": "a"}`, `{"pair": ["a", "b", "c"]}`,
		`{"map": {"k": {"str": "a"}, "k": {}}}`, `{"any": 1} x`, ` {"uint16": -1} `, `{"f32": 1e39}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := Limits{MaxBytes: 1 << 16, MaxDepth: 16}.withDefaults()
		compare(t, data, lim, func() *fastDoc { return new(fastDoc) })
		compare(t, data, lim, func() *any { return new(any) })
		compare(t, data, lim, func() *map[string]json.RawMessage { return new(map[string]json.RawMessage) })
		compare(t, data, lim, func() *[]*fastDoc { return new([]*fastDoc) })
		// A value that is not zero is left to the slow pass, untouched.
		if v := prefilled(); decodeFast(data, reflect.ValueOf(v), lim) || !reflect.DeepEqual(v, prefilled()) {
			t.Fatalf("fast pass took a value that is not zero")
		}
	})
}

// compare decodes data with both passes into fresh values and fails if the
// fast pass accepts what the slow one refuses or decodes it differently,
// or changes the value when it gives up.
func compare[T any](t *testing.T, data []byte, lim Limits, fresh func() *T) {
	t.Helper()
	fast, slow := fresh(), fresh()
	if !decodeFast(data, reflect.ValueOf(fast), lim) {
		if !reflect.DeepEqual(fast, fresh()) {
			t.Fatalf("fast pass gave up on %q but changed the value: %#v", data, fast)
		}
		return
	}
	if err := decodeSlow(data, reflect.ValueOf(slow), lim); err != nil {
		t.Fatalf("fast pass accepted %q, slow pass refused it: %v", data, err)
	}
	if !reflect.DeepEqual(fast, slow) {
		t.Fatalf("passes disagree on %q:\nfast %#v\nslow %#v", data, fast, slow)
	}
}

func TestDecodeFastMatchesSlow(t *testing.T) {
	t.Parallel()
	// Documents the fast pass must accept, so that the comparison above
	// is not vacuous.
	docs := []string{
		`{"str": "x", "name": "n", "int8": -128, "uint16": 65535, "f32": 1.5e3, "f64": null, "pp": 5, "bool": true}`,
		`{"num": -0.5e7, "raw": {"a": [1, {"b": null}]}, "raw_ptr": null, "any": {"z": [true, "s", 1.25]}, "stamp": "2026-01-02T03:04:05.123456Z"}`,
		`{"stamp_ptr": null, "text": "hello", "text_ptr": "t", "json": {"x": 1}, "json_ptr": null, "bytes": "aGk="}`,
		`{"ints": [1, 2], "pair": ["a"], "nested": [{"str": "n", "ints": []}], "map": {"k": {"int8": 1}, "l": {}}}`,
		`{"named": {"y": 2}, "int_keys": {"-3": "m"}, "anys": {"b": null}, "slices": {"s": [3]}, "unnamed": {"A": 4}}`,
		`{"ptr_map": {"a": {"str": "p"}, "b": null}, "iface": null, "arr": [{"k": "v"}]}`,
		`{"promoted": "p", "deep": 9, "inner": "i", "str": "\u00e9\ud800\n"}`,
	}
	lim := Limits{}.withDefaults()
	for _, d := range docs {
		if !decodeFast([]byte(d), reflect.ValueOf(new(fastDoc)), lim) {
			t.Errorf("fast pass gave up on %s", d)
		}
		compare(t, []byte(d), lim, func() *fastDoc { return new(fastDoc) })
	}
	// Documents it must leave to the slow pass, each for its own reason.
	for _, d := range []string{
		`{"quoted": "12"}`, `{"promo": "2026-01-02T03:04:05Z"}`, `{"lost": "l"}`, `{"text": "bad"}`,
		`{"json": "bad"}`, `{"str": "a", "str": "a"}`, `{"pair": ["a", "b", "c"]}`, `{"iface": {}}`,
		`{"int_keys": {"x": "m"}}`, ` `, `{} {}`, `{"str": "` + strings.Repeat("[", 3) + `"`,
	} {
		if decodeFast([]byte(d), reflect.ValueOf(new(fastDoc)), lim) {
			t.Errorf("fast pass accepted %s", d)
		}
	}
}

// FuzzPlainRun checks the eight-bytes-at-a-time scan against a plain loop.
func FuzzPlainRun(f *testing.F) {
	f.Add([]byte(`abcdefghijklmnop"q`), 0)
	f.Add([]byte("abcdefgh\x1fijklmnop\\"), 3)
	f.Add([]byte("abcdefghijk\xc3\xa9lmnop"), 1)
	f.Add([]byte("\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x7f\x20\x21"), 0)
	f.Fuzz(func(t *testing.T, d []byte, i int) {
		if i < 0 || i > len(d) {
			return
		}
		want := i
		for want < len(d) && d[want] >= 0x20 && d[want] < 0x80 && d[want] != '"' && d[want] != '\\' {
			want++
		}
		if got := plainRun(d, i); got != want {
			t.Fatalf("plainRun(%q, %d) = %d, want %d", d, i, got, want)
		}
	})
}

// benchHash is a SHA-256 hash in hex, as rpc.Hash decodes it.
type benchHash [32]byte

func (h *benchHash) UnmarshalText(b []byte) error {
	if len(b) != 64 {
		return errors.New("want 64 hex digits")
	}
	_, err := hex.Decode(h[:], b)
	return err
}

// benchEvent and benchHeartbeat have the shape of rpc.Event and
// rpc.HeartbeatRequest, the payload choird decodes most.
type benchEvent struct {
	Rev       int64           `json:"rev"`
	Type      string          `json:"type"`
	Lane      string          `json:"lane"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`
	HashPrev  benchHash       `json:"hash_prev"`
	Hash      benchHash       `json:"hash"`
}

type benchHeartbeat struct {
	BaseRev       int64        `json:"base_rev"`
	NewRev        int64        `json:"new_rev"`
	Patches       []benchEvent `json:"patches"`
	ConfigVersion int64        `json:"config_version"`
	HashPrev      benchHash    `json:"hash_prev"`
	HashNew       benchHash    `json:"hash_new"`
	Timestamp     time.Time    `json:"timestamp"`
}

func benchHeartbeatDoc(events int) []byte {
	var sb strings.Builder
	h := strings.Repeat("ab", 32)
	fmt.Fprintf(&sb, `{"base_rev":0,"new_rev":%d,"patches":[`, events)
	for i := range events {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `{"rev":%d,"type":"model_output","lane":"edge","payload":{"text":"%s","tokens":812},"created_at":"2025-01-02T03:04:05.123456Z","hash_prev":"%s","hash":"%s"}`,
			i+1, strings.Repeat("word ", 150), h, h)
	}
	fmt.Fprintf(&sb, `],"config_version":3,"hash_prev":"%s","hash_new":"%s","timestamp":"2025-01-02T03:04:05Z"}`, h, h)
	return []byte(sb.String())
}

// BenchmarkDecodeFastPass weighs the fast pass: Decode (the fast pass,
// which succeeds on these documents) against decodeSlow (checking, then
// encoding/json), on a heartbeat of one event (about 1 KiB), a heartbeat
// of 50 events (about 45 KiB, as a busy agent's catch-up), and a
// config-shaped document with nested maps.
func BenchmarkDecodeFastPass(b *testing.B) {
	var cfg strings.Builder
	cfg.WriteString(`{"agents":{`)
	for i := range 50 {
		if i > 0 {
			cfg.WriteString(",")
		}
		fmt.Fprintf(&cfg, `"agent-%d":{"workspace":"ws-%d","dm":"dm","models":{"edge":"m1","core":"m2"},"secrets":["a","b"]}`, i, i)
	}
	cfg.WriteString(`}}`)
	type benchConfig struct {
		Agents map[string]struct {
			Workspace string            `json:"workspace"`
			DM        string            `json:"dm"`
			Models    map[string]string `json:"models"`
			Secrets   []string          `json:"secrets"`
		} `json:"agents"`
	}
	for _, tc := range []struct {
		name string
		data []byte
		into func() any
	}{
		{"Heartbeat1", benchHeartbeatDoc(1), func() any { return new(benchHeartbeat) }},
		{"Heartbeat50", benchHeartbeatDoc(50), func() any { return new(benchHeartbeat) }},
		{"Config", []byte(cfg.String()), func() any { return new(benchConfig) }},
	} {
		lim := Limits{}.withDefaults()
		if !decodeFast(tc.data, reflect.ValueOf(tc.into()), lim) {
			b.Fatalf("%s: the fast pass refuses the document", tc.name)
		}
		b.Run(tc.name+"/Fast", func(b *testing.B) {
			b.SetBytes(int64(len(tc.data)))
			for b.Loop() {
				if err := Decode(tc.data, tc.into(), Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/Slow", func(b *testing.B) {
			b.SetBytes(int64(len(tc.data)))
			for b.Loop() {
				if err := decodeSlow(tc.data, reflect.ValueOf(tc.into()), lim); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
