package strictjson_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/strictjson"
)

type defaults struct {
	Workspace   string `json:"workspace"`
	DM          string `json:"dm"`
	Email       string `json:"email"`
	GitIdentity string `json:"git_identity"`
}

type agent struct {
	Defaults defaults        `json:"defaults"`
	Extra    json.RawMessage `json:"extra"`
	Meta     any             `json:"meta"`
}

type Embedded struct {
	Promoted string `json:"promoted"`
}

type PtrEmbedded struct {
	Deep int `json:"deep"`
}

type hidden struct {
	Shadowed string `json:"shadowed"`
}

type doc struct {
	Embedded
	*PtrEmbedded
	hidden
	Agents      map[string]agent `json:"agents"`
	Ports       []int            `json:"ports"`
	Temperature *float64         `json:"temperature"`
	Count       uint8            `json:"count"`
	Small       int8             `json:"small"`
	Ratio       float32          `json:"ratio"`
	Enabled     bool             `json:"enabled"`
	Stamp       time.Time        `json:"stamp"`
	Quoted      int              `json:"quoted,string"`
	Pair        [2]int           `json:"pair"`
	Counts      map[int]string   `json:"counts"`
	Data        []byte           `json:"data"`
	Number      json.Number      `json:"number"`
	Ignored     string           `json:"-"`
	Untagged    string
	Shadowed    string `json:"shadowed"` // wins over hidden.Shadowed: shallower
	private     string
}

func TestDecodeAccepts(t *testing.T) {
	t.Parallel()

	full := `{
		"promoted": "p", "deep": 3, "shadowed": "s", "Untagged": "u",
		"agents": {
			"agent-1": {
				"defaults": {"workspace": "main", "dm": "admin", "email": "", "git_identity": "dev"},
				"extra": {"anything": [1, {"goes": null}]},
				"meta": [true, 1.5, "x"]
			}
		},
		"ports": [80, 443],
		"temperature": null,
		"count": 255,
		"small": -128,
		"ratio": 0.25,
		"enabled": true,
		"stamp": "2025-01-02T03:04:05Z",
		"quoted": "42",
		"pair": [1, 2],
		"counts": {"7": "seven"},
		"data": "aGk=",
		"number": 12345678901234567890
	}`
	var got doc
	if err := strictjson.Decode([]byte(full), &got, strictjson.Limits{}); err != nil {
		t.Fatalf("Decode: %v", err)
	}
	want := doc{
		Embedded:    Embedded{Promoted: "p"},
		PtrEmbedded: &PtrEmbedded{Deep: 3},
		Shadowed:    "s",
		Untagged:    "u",
		Agents: map[string]agent{"agent-1": {
			Defaults: defaults{Workspace: "main", DM: "admin", GitIdentity: "dev"},
			Extra:    json.RawMessage(`{"anything": [1, {"goes": null}]}`),
			Meta:     []any{true, 1.5, "x"},
		}},
		Ports:  []int{80, 443},
		Count:  255,
		Small:  -128,
		Ratio:  0.25,
		Stamp:  time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Quoted: 42,
		Pair:   [2]int{1, 2},
		Counts: map[int]string{7: "seven"},
		Data:   []byte("hi"),
		Number: "12345678901234567890",
	}
	want.Enabled = true
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decode result:\n got %+v\nwant %+v", got, want)
	}

	tests := []struct {
		name string
		doc  string
		v    any
	}{
		{"EmptyObject", `{}`, &doc{}},
		{"NullForPointerMapSliceRawAny", `{"temperature": null, "agents": null, "ports": null, "data": null}`, &doc{}},
		{"NullInsideRawMessage", `{"agents": {"a": {"extra": null, "meta": null}}}`, &doc{}},
		{"SameKeyInSiblingObjects", `{"agents": {"a": {"extra": {"k": 1}}, "b": {"extra": {"k": 2}}}}`, &doc{}},
		{"TrailingWhitespace", "{} \n\t\r\n", &doc{}},
		{"ScalarTopLevel", `"just a string"`, new(string)},
		{"AnyTopLevel", `[{"a": 1}, {"a": 2}]`, new(any)},
		{"MapOfStrings", `{"a": "1", "b": "2"}`, new(map[string]string)},
		{"DepthExactlyAtLimit", strings.Repeat("[", 64) + strings.Repeat("]", 64), new(any)},
		{"NegativeZeroAndExponentForFloat", `{"ratio": -0e5}`, &doc{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := strictjson.Decode([]byte(tt.doc), tt.v, strictjson.Limits{}); err != nil {
				t.Errorf("Decode(%s): %v", tt.doc, err)
			}
		})
	}
}

func TestDecodeRejects(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		doc  string
		v    any // target; a *doc if nil
		lim  strictjson.Limits
		want []string // problems, as "path: message"; a trailing * matches any suffix
	}{
		{
			name: "UnknownFieldNamesPathAndKnownFields",
			doc:  `{"agents": {"agent-1": {"defaults": {"wrkspace": "main"}}}}`,
			want: []string{`$.agents["agent-1"].defaults.wrkspace: unknown field, did you mean workspace? (known: dm, email, git_identity, workspace)`},
		},
		{
			name: "UnknownTopLevelField",
			doc:  `{"nonsense": {"deeply": ["nested"]}}`,
			want: []string{`$.nonsense: unknown field (known: *`},
		},
		{
			name: "KeyDifferingOnlyInCaseIsUnknown",
			doc:  `{"agents": {"a": {"defaults": {"Workspace": "main"}}}}`,
			want: []string{`$.agents.a.defaults.Workspace: unknown field, did you mean workspace? *`},
		},
		{
			name: "IgnoredAndUnexportedFieldsAreUnknown",
			doc:  `{"Ignored": "x", "private": "y"}`,
			want: []string{`$.Ignored: unknown field*`, `$.private: unknown field*`},
		},
		{
			name: "DuplicateTopLevelKey",
			doc:  `{"count": 1, "count": 2}`,
			want: []string{`$.count: duplicate key`},
		},
		{
			name: "DuplicateKeyInMap",
			doc:  `{"agents": {"a": {}, "a": {}}}`,
			want: []string{`$.agents.a: duplicate key`},
		},
		{
			name: "DuplicateKeyInsideRawMessage",
			doc:  `{"agents": {"a": {"extra": {"k": 1, "k": 2}}}}`,
			want: []string{`$.agents.a.extra.k: duplicate key`},
		},
		{
			name: "DuplicateKeyInsideAnyInsideArray",
			doc:  `{"agents": {"a": {"meta": [{}, {"k k": 1, "k k": 2}]}}}`,
			want: []string{`$.agents.a.meta[1]["k k"]: duplicate key`},
		},
		{
			name: "DuplicateUnknownKeyReportedOnceAsUnknown",
			doc:  `{"zz": 1, "zz": 2}`,
			want: []string{`$.zz: unknown field*`, `$.zz: duplicate key`},
		},
		{
			name: "TrailingValue",
			doc:  `{} {}`,
			want: []string{`$: unexpected data after top-level value at line 1, column 4`},
		},
		{
			name: "TrailingGarbageOnLaterLine",
			doc:  "{}\n  x",
			want: []string{`$: unexpected data after top-level value at line 2, column 3`},
		},
		{
			name: "TooLarge",
			doc:  `{"count": 1}`,
			lim:  strictjson.Limits{MaxBytes: 5},
			want: []string{`$: document is 12 bytes, over the limit of 5`},
		},
		{
			name: "TooDeep",
			doc:  `{"agents": {"a": {"meta": [[]]}}}`,
			lim:  strictjson.Limits{MaxDepth: 3},
			want: []string{`$.agents.a.meta: nesting deeper than 3 levels`},
		},
		{
			name: "TooDeepByDefault",
			doc:  strings.Repeat("[", 65) + strings.Repeat("]", 65),
			v:    new(any),
			want: []string{`$` + strings.Repeat("[0]", 64) + `: nesting deeper than 64 levels`},
		},
		{
			name: "StringForInteger",
			doc:  `{"count": "1"}`,
			want: []string{`$.count: expected non-negative integer, got string`},
		},
		{
			name: "ObjectForString",
			doc:  `{"agents": {"a": {"defaults": {"dm": {"x": 1}}}}}`,
			want: []string{`$.agents.a.defaults.dm: expected string, got object`},
		},
		{
			name: "ArrayForStruct",
			doc:  `{"agents": {"a": []}}`,
			want: []string{`$.agents.a: expected object, got array`},
		},
		{
			name: "ObjectForSlice",
			doc:  `{"ports": {"a": 1}}`,
			want: []string{`$.ports: expected array, got object`},
		},
		{
			name: "NumberForBool",
			doc:  `{"enabled": 1}`,
			want: []string{`$.enabled: expected boolean, got number`},
		},
		{
			name: "NullForString",
			doc:  `{"Untagged": null}`,
			want: []string{`$.Untagged: expected string, got null`},
		},
		{
			name: "NullForStruct",
			doc:  `{"agents": {"a": null}}`,
			want: []string{`$.agents.a: expected object, got null`},
		},
		{
			name: "FractionForInteger",
			doc:  `{"ports": [1, 2.5, 1e3]}`,
			want: []string{
				`$.ports[1]: expected integer, got number with a fraction or exponent`,
				`$.ports[2]: expected integer, got number with a fraction or exponent`,
			},
		},
		{
			name: "IntegerOverflow",
			doc:  `{"small": 128, "count": 256}`,
			want: []string{`$.small: integer out of range for int8`, `$.count: integer out of range for uint8`},
		},
		{
			name: "NegativeForUnsigned",
			doc:  `{"count": -1}`,
			want: []string{`$.count: expected non-negative integer, got negative number`},
		},
		{
			name: "FloatOverflow",
			doc:  `{"ratio": 1e39}`,
			want: []string{`$.ratio: number out of range for float32`},
		},
		{
			name: "StringForJSONNumber",
			doc:  `{"number": "12"}`,
			want: []string{`$.number: expected number, got string`},
		},
		{
			name: "InvalidBase64",
			doc:  `{"data": "not base64!"}`,
			want: []string{`$.data: invalid base64 data`},
		},
		{
			name: "InvalidUnmarshalerValue",
			doc:  `{"stamp": "yesterday"}`,
			want: []string{`$.stamp: invalid time.Time`},
		},
		{
			name: "QuotedOptionNeedsString",
			doc:  `{"quoted": 42}`,
			want: []string{`$.quoted: expected integer inside a string, got number`},
		},
		{
			name: "QuotedOptionNeedsNumberInside",
			doc:  `{"quoted": "forty-two"}`,
			want: []string{`$.quoted: expected integer inside the string`},
		},
		{
			name: "ArrayTooLong",
			doc:  `{"pair": [1, 2, 3]}`,
			want: []string{`$.pair[2]: too many elements: the array holds 2`},
		},
		{
			name: "MapKeyNotInteger",
			doc:  `{"counts": {"seven": "7"}}`,
			want: []string{`$.counts.seven: key is not an integer in the range of int`},
		},
		{
			name: "SyntaxErrorGivesLineAndColumn",
			doc:  "{\n  \"count\": tru\n}",
			want: []string{`$.count: syntax error at line 2, column 15: invalid character '\n' in literal true (expecting 'e')`},
		},
		{
			name: "MissingComma",
			doc:  `{"count": 1 "small": 2}`,
			want: []string{`$: syntax error at line 1, column 13: invalid character '"' after object key:value pair`},
		},
		{
			name: "UnexpectedEnd",
			doc:  `{"agents": {"a": `,
			want: []string{`$.agents.a: unexpected end of input at line 1, column 18`},
		},
		{
			name: "EmptyDocument",
			doc:  " \n ",
			want: []string{`$: empty document`},
		},
		{
			name: "ProblemsBeforeSyntaxErrorAreKept",
			doc:  `{"nope": 1, "count": "x", ]`,
			want: []string{`$.nope: unknown field*`, `$.count: expected non-negative integer, got string`, `$: syntax error at line 1, column 27: *`},
		},
		{
			name: "AllProblemsInOnePass",
			doc: `{
				"agents": {"a": {"defaults": {"wrkspace": "x", "dm": 1}}, "b": {"extra": {"k": 1, "k": 2}}},
				"count": -3,
				"enabled": "yes",
				"count": 4
			}`,
			want: []string{
				`$.agents.a.defaults.wrkspace: unknown field*`,
				`$.agents.a.defaults.dm: expected string, got number`,
				`$.agents.b.extra.k: duplicate key`,
				`$.count: expected non-negative integer, got negative number`,
				`$.enabled: expected boolean, got string`,
				`$.count: duplicate key`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var v doc
			target := tt.v
			if target == nil {
				target = &v
			}
			err := strictjson.Decode([]byte(tt.doc), target, tt.lim)
			var se *strictjson.Error
			if !errors.As(err, &se) {
				t.Fatalf("Decode(%q) = %v, want *strictjson.Error", tt.doc, err)
			}
			var got []string
			for _, p := range se.Problems {
				got = append(got, p.String())
			}
			if len(got) != len(tt.want) {
				t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
			for i := range got {
				if !matches(got[i], tt.want[i]) {
					t.Errorf("problem %d:\n got %s\nwant %s", i, got[i], tt.want[i])
				}
			}
			if err.Error() != strings.Join(got, "\n") {
				t.Errorf("Error() = %q, want the problems one per line", err.Error())
			}
			if !reflect.DeepEqual(v, doc{}) {
				t.Errorf("target was modified despite problems: %+v", v)
			}
		})
	}
}

func matches(got, pattern string) bool {
	if prefix, ok := strings.CutSuffix(pattern, "*"); ok {
		return strings.HasPrefix(got, prefix)
	}
	return got == pattern
}

func TestDecodeNeverQuotesStringValues(t *testing.T) {
	t.Parallel()

	const secret = "s3cr3t-Zq9xK"
	docs := []string{
		`{"count": "` + secret + `"}`,
		`{"stamp": "` + secret + `"}`,
		`{"data": "` + secret + `!"}`,
		`{"quoted": "` + secret + `"}`,
		`{"counts": {"1": "` + secret + `", "1": "` + secret + `"}}`,
		`{"agents": {"a": {"defaults": {"dm": "` + secret + `"}}}} trailing ` + secret,
		`{"Untagged": "` + secret + `" "x": 1}`,
		`{"Untagged": "` + secret,
		`{"Untagged": "` + secret + "\x01" + `"}`,
	}
	for _, d := range docs {
		var v doc
		err := strictjson.Decode([]byte(d), &v, strictjson.Limits{})
		if err == nil {
			t.Errorf("Decode(%q) succeeded, want an error", d)
			continue
		}
		if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "Zq9") {
			t.Errorf("error quotes a string value: %v", err)
		}
	}
}

func TestDecodeCapsProblemCount(t *testing.T) {
	t.Parallel()

	var b strings.Builder
	b.WriteString("{")
	for i := range 500 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `"unknown%d": 1`, i)
	}
	b.WriteString("}")
	err := strictjson.Decode([]byte(b.String()), &doc{}, strictjson.Limits{})
	var se *strictjson.Error
	if !errors.As(err, &se) {
		t.Fatalf("Decode = %v, want *strictjson.Error", err)
	}
	if len(se.Problems) != 101 {
		t.Fatalf("got %d problems, want 100 and a summary", len(se.Problems))
	}
	if last := se.Problems[100].String(); last != "$: 400 more problems not shown" {
		t.Errorf("last problem = %q", last)
	}
}

func TestDecodeRejectsBadTarget(t *testing.T) {
	t.Parallel()

	for _, v := range []any{nil, doc{}, (*doc)(nil)} {
		err := strictjson.Decode([]byte(`{}`), v, strictjson.Limits{})
		var se *strictjson.Error
		if err == nil || errors.As(err, &se) {
			t.Errorf("Decode into %T = %v, want a plain error", v, err)
		}
	}
}

func TestDecodeEmbeddedConflictsFollowEncodingJSON(t *testing.T) {
	t.Parallel()

	type A struct{ Name string }
	type B struct{ Name string }
	type C struct {
		Name string `json:"name"`
	}
	type ambiguous struct {
		A
		B
	}
	type taggedWins struct {
		A
		C
	}
	err := strictjson.Decode([]byte(`{"Name": "x"}`), &ambiguous{}, strictjson.Limits{})
	if err == nil || !strings.Contains(err.Error(), "$.Name: unknown field (the object takes no fields)") {
		t.Errorf("ambiguous embedded field: err = %v, want unknown field", err)
	}
	var tw taggedWins
	if err := strictjson.Decode([]byte(`{"name": "x", "Name": "y"}`), &tw, strictjson.Limits{}); err != nil {
		t.Errorf("tagged embedded field: %v", err)
	}
	if tw.C.Name != "x" || tw.A.Name != "y" {
		t.Errorf("decoded %+v", tw)
	}
}

func TestPath(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name string
		got  string
		want string
	}{
		{"IdentifierUsesDot", strictjson.PathKey("$", "agents"), "$.agents"},
		{"UnderscoreAndDigitsUseDot", strictjson.PathKey("$", "_a1"), "$._a1"},
		{"HyphenUsesBrackets", strictjson.PathKey("$.agents", "agent-1"), `$.agents["agent-1"]`},
		{"LeadingDigitUsesBrackets", strictjson.PathKey("$", "1a"), `$["1a"]`},
		{"EmptyKeyUsesBrackets", strictjson.PathKey("$", ""), `$[""]`},
		{"QuotesAreEscaped", strictjson.PathKey("$", `a"b`), `$["a\"b"]`},
		{"IndexUsesBrackets", strictjson.PathIndex("$.ports", 3), "$.ports[3]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if tt.got != tt.want {
				t.Errorf("got %s, want %s", tt.got, tt.want)
			}
		})
	}
}

func FuzzDecode(f *testing.F) {
	seeds := []string{
		`{}`, `[]`, `null`, `"x"`, `1`, `{"count": 1, "count": 2}`,
		`{"agents": {"a-1": {"defaults": {"workspace": "w"}, "extra": {"x": [1, {"y": null}]}}}}`,
		`{"quoted": "12", "stamp": "2025-01-01T00:00:00Z", "data": "aGk=", "pair": [1, 2, 3]}`,
		`{"counts": {"-1": "x"}, "number": 1e400, "ratio": -0.0}`,
		`{"a":` + strings.Repeat("[", 70), "{\"\xff\": 1}", `{} x`, `{"k": "\ud800"}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		lim := strictjson.Limits{MaxBytes: 1 << 16, MaxDepth: 32}
		check := func(v, fresh any) {
			err := strictjson.Decode(data, v, lim)
			if err != nil {
				var se *strictjson.Error
				if !errors.As(err, &se) || len(se.Problems) == 0 || len(se.Problems) > 101 {
					t.Fatalf("Decode(%q) = %#v, want *Error with 1..101 problems", data, err)
				}
				return
			}
			// Whatever Decode accepts, encoding/json accepts too.
			if err := json.Unmarshal(data, fresh); err != nil {
				t.Fatalf("Decode(%q) succeeded but json.Unmarshal failed: %v", data, err)
			}
		}
		check(new(doc), new(doc))
		check(new(any), new(any))
		check(new(map[string]string), new(map[string]string))
	})
}

func BenchmarkDecode(b *testing.B) {
	var sb strings.Builder
	sb.WriteString(`{"ports": [1, 2, 3], "count": 7, "agents": {`)
	for i := range 50 {
		if i > 0 {
			sb.WriteString(",")
		}
		fmt.Fprintf(&sb, `"agent-%d": {"defaults": {"workspace": "ws-%d", "dm": "dm", "email": "e", "git_identity": "g"}, "extra": {"a": [1, 2, {"b": true}]}, "meta": null}`, i, i)
	}
	sb.WriteString(`}}`)
	data := []byte(sb.String())
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		var v doc
		if err := strictjson.Decode(data, &v, strictjson.Limits{}); err != nil {
			b.Fatal(err)
		}
	}
}
