package chain

import (
	"bytes"
	"strings"
	"testing"

	"github.com/choirhq/choir/rpc/internal/fastpath"
)

var canonicalSeeds = []string{
	`{}`, `[]`, `null`, `true`, `"x"`, `-0.5e+7`, `{"a":1,"b":[true,false,null],"c":{"d":"e"}}`,
	`{"b":1,"a":2}`, `{"a":1,"a":2}`, `{ "a": 1 }`, `{"a":1} `, `{"a":1}{}`, `{"k":"\u00e9"}`, `{"k":"é"}`,
	`{"k":"\n\t\r\b\f\"\\"}`, `{"k":"\u0001\u001f"}`, `{"k":"\u0001\u001F"}`, `{"k":"\u000a"}`, `{"k":"\/"}`,
	`{"k":"\u2028\u2029"}`, "{\"k\":\"\u2028\"}", "{\"k\":\"\xff\"}", `{"k":"\ud800"}`, `{"k":"\ufffd"}`, `{"<>&":"<>&"}`,
	"{\"k\":\"\x7f\"}", `{"\n":1}`, `{"a":1,"b":2,"aa":3}`, `{"":1,"a":2}`, `[1,2.50,1e3,1E-3,-0]`, `01`, `1.`, `[1,]`, `{"a"}`,
	`{"k":"\u003c\u003e\u0026"}`, `{"\u003c":1,"a":2}`, `{"a":1,"\u003c":2}`, `{"k":"\\u003c"}`, `{"k":"\u003C"}`,
	`{"a":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
}

// FuzzCanonicalJSON checks fastpath's scanner against the reference: whatever
// fastpath.IsCanonical accepts, canonicalJSON turns into the same bytes, and what
// canonicalJSON writes, fastpath.IsCanonical accepts (unless it is very
// deep).
func FuzzCanonicalJSON(f *testing.F) {
	for _, s := range canonicalSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if len(raw) == 0 {
			return
		}
		ref, err := canonicalJSON(raw)
		if out, ok := fastpath.Canonicalize(raw); ok {
			if err != nil {
				t.Fatalf("canonicalize accepts %q, which canonicalJSON refuses: %v", raw, err)
			}
			if !bytes.Equal(ref, out) {
				t.Fatalf("fastpath.Canonicalize(%q) = %q, but its canonical form is %q", raw, out, ref)
			}
			if fastpath.IsCanonical(raw) != bytes.Equal(raw, out) {
				t.Fatalf("fastpath.IsCanonical(%q) = %v, yet canonicalize gives %q", raw, fastpath.IsCanonical(raw), out)
			}
		} else if fastpath.IsCanonical(raw) || fastpath.IsCompactCanonical(raw) {
			t.Fatalf("isCanonical or isCompactCanonical accepts %q, which canonicalize refuses", raw)
		}
		if err == nil && bytes.Count(ref, []byte("[")) < fastpath.CanonMaxDepth/2 && bytes.Count(ref, []byte("{")) < fastpath.CanonMaxDepth/2 && !fastpath.IsCanonical(ref) {
			t.Fatalf("isCanonical refuses canonicalJSON's output %q", ref)
		}
	})
}

func TestCanonicalJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in, want string
		fast     bool
	}{
		{`{"b":1,"a":[2,{"d":null,"c":"x"}]}`, `{"a":[2,{"c":"x","d":null}],"b":1}`, false},
		{` {"a" : 1.50} `, `{"a":1.50}`, false},
		{`{"a":1,"a":2}`, `{"a":2}`, false},
		{`{"k":"\u0041\/\u000a"}`, `{"k":"A/\n"}`, false},
		{`{"k":"a\nb\u0001<>&\u2028"}`, `{"k":"a\nb\u0001<>&\u2028"}`, true},
		{`{"a":{"b":[1,2.5e3,"é"]},"b":true}`, `{"a":{"b":[1,2.5e3,"é"]},"b":true}`, true},
		{`{"k":"\u003cb\u003e\u0026\\u003c"}`, `{"k":"<b>&\\u003c"}`, false},
	} {
		if got := fastpath.IsCanonical([]byte(tc.in)); got != tc.fast {
			t.Errorf("fastpath.IsCanonical(%s) = %v, want %v", tc.in, got, tc.fast)
		}
		got, err := Canonical([]byte(tc.in))
		if err != nil || string(got) != tc.want {
			t.Errorf("Canonical(%s) = %s, %v; want %s", tc.in, got, err, tc.want)
		}
	}
	if _, err := Canonical([]byte(`{"a":`)); err == nil {
		t.Error("Canonical accepted a truncated document")
	}
}
