package proposal_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/proposal"
)

func TestSplitKeepsEverything(t *testing.T) {
	t.Parallel()
	var b strings.Builder
	for i := range 3000 {
		b.WriteString(strings.Repeat("é", i%7) + "line\n")
	}
	b.WriteString(strings.Repeat("ü", 5000)) // one line longer than a part
	text := b.String()
	parts := proposal.Split(text)
	if strings.Join(parts, "") != text {
		t.Fatal("the parts do not add up to the text")
	}
	for i, p := range parts {
		if len(p) > proposal.PartBytes || !strings.HasPrefix(p, strings.TrimLeft(p, "\x80\xbf")) {
			t.Errorf("part %d: %d bytes", i, len(p))
		}
		if !json.Valid([]byte(`"` + strings.ReplaceAll(p, "\n", `\n`) + `"`)) {
			t.Errorf("part %d is not valid UTF-8", i)
		}
	}
}

func TestMergePatch(t *testing.T) {
	t.Parallel()
	got, err := proposal.MergePatch(json.RawMessage(`{"a":{"b":1,"c":1000000},"d":[1,2],"e":"x"}`),
		json.RawMessage(`{"a":{"b":null,"f":true},"d":[3],"g":{"h":"i"}}`))
	if err != nil {
		t.Fatal(err)
	}
	var v, want any
	json.Unmarshal(got, &v)
	json.Unmarshal([]byte(`{"a":{"c":1000000,"f":true},"d":[3],"e":"x","g":{"h":"i"}}`), &want)
	if b1, b2 := mustJSON(v), mustJSON(want); b1 != b2 {
		t.Errorf("got %s, want %s", b1, b2)
	}
	if strings.Contains(string(got), "e+") {
		t.Errorf("numbers rewritten: %s", got)
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestParseRepoBranchBelongsToTheSession(t *testing.T) {
	t.Parallel()
	if _, err := proposal.ParseRepo(json.RawMessage(`{"branch":"proposal/s1/add-tool","rationale":"r"}`), "s1"); err != nil {
		t.Errorf("own branch: %v", err)
	}
	for _, b := range []string{"proposal/s2/add-tool", "main", "proposal/s1/", "proposal/s1/A B"} {
		if _, err := proposal.ParseRepo(json.RawMessage(`{"branch":"`+b+`","rationale":"r"}`), "s1"); err == nil {
			t.Errorf("branch %q accepted", b)
		}
	}
}

func TestRenderToolShowsPolicyAndCodeInFull(t *testing.T) {
	t.Parallel()
	code := "#!/bin/sh\n" + strings.Repeat("echo hello\n", 500)
	in, _ := json.Marshal(map[string]any{"change": "add", "name": "x.hello", "description": "d",
		"parameters": map[string]any{"type": "object"}, "behavior": "b", "rationale": "r",
		"runtime":        map[string]any{"side_effect": "external", "trust": "own", "secret_resources": []string{"k"}, "locks": []any{map[string]string{"resource": "net:api", "mode": "X"}}},
		"implementation": map[string]string{"content": code}})
	tl, err := proposal.ParseTool(in, func(string) bool { return false })
	if err != nil {
		t.Fatal(err)
	}
	out := proposal.RenderTool(tl)
	for _, want := range []string{"Lock policy: net:api X", "Secret scope: k", code, "tools/x.hello (", "executable, full content"} {
		if !strings.Contains(out, want) {
			t.Errorf("render lacks %.60q", want)
		}
	}
}
