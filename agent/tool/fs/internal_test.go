package fs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
)

func mkfile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// searchTree builds a workspace with everything the search must get right.
func searchTree(t *testing.T) string {
	t.Helper()
	ws := t.TempDir()
	outside := t.TempDir()
	mkfile(t, filepath.Join(outside, "secret.txt"), "foo secret\n")
	files := map[string]string{
		"a.txt":             "foo bar\nno match\nFOO upper\n",
		"a/b.go":            "package b\n// foo in go\n",
		"a-b/c.txt":         "foo dash\n",
		"a0":                "foo zero",
		"B/x.txt":           "foo capital dir\n",
		".hidden/h.txt":     "foo hidden\n",
		".git/config":       "foo git\n",
		"sub/.git":          "gitdir: foo\n",
		".choirtmp/recv/up": "foo uploaded\n",
		"bin.dat":           "foo\x00binary\n",
		"sub/deep/x.md":     "foo deep\nfoo again\n",
		"crlf.txt":          "foo crlf\r\nbar\r\n",
		"literal.txt":       "a.b\naxb\n",
		"long.txt":          strings.Repeat("y", 600) + " foo " + strings.Repeat("z", 600) + "\n",
		"utf8.txt":          "naïve foo ünïcode\n",
		"bad-utf8.txt":      "foo \xff\xfe bytes\n",
		"sub/deep/nomatch":  "nothing here\n",
	}
	for p, c := range files {
		mkfile(t, filepath.Join(ws, p), c)
	}
	for name, target := range map[string]string{"link.txt": "a.txt", "out": outside} {
		if err := os.Symlink(target, filepath.Join(ws, name)); err != nil {
			t.Fatal(err)
		}
	}
	return ws
}

type searchOut struct {
	Matches []searchMatch `json:"matches"`
	Count   int           `json:"count"`
	Partial bool          `json:"partial"`
	Shown   int           `json:"shown"`
}

func runSearch(t *testing.T, s fsSearch, env tool.Env, input string) (tool.Result, error) {
	t.Helper()
	d, err := tool.NewDef(s.Spec(), s, tool.OriginBuiltin, "")
	if err != nil {
		t.Fatal(err)
	}
	return d.Execute(context.Background(), env, json.RawMessage(input))
}

func TestSearchGoFallback(t *testing.T) {
	t.Parallel()
	ws := searchTree(t)
	env := tool.Env{Workspace: ws}
	m := func(p string, line int, text string) searchMatch { return searchMatch{Path: p, Line: line, Text: text} }
	longText := strings.Repeat("y", 400) + "…"
	tests := []struct {
		name  string
		input string
		want  []searchMatch
	}{
		{"WholeWorkspace", `{"pattern": "foo"}`, []searchMatch{
			m(".hidden/h.txt", 1, "foo hidden"),
			m("B/x.txt", 1, "foo capital dir"),
			m("a/b.go", 2, "// foo in go"),
			m("a-b/c.txt", 1, "foo dash"),
			m("a.txt", 1, "foo bar"),
			m("a0", 1, "foo zero"),
			m("bad-utf8.txt", 1, "foo \uFFFD bytes"),
			m("crlf.txt", 1, "foo crlf"),
			m("long.txt", 1, longText),
			m("sub/deep/x.md", 1, "foo deep"),
			m("sub/deep/x.md", 2, "foo again"),
			m("utf8.txt", 1, "naïve foo ünïcode"),
		}},
		{"IgnoreCase", `{"pattern": "FOO", "ignore_case": true, "path": "a.txt"}`, []searchMatch{m("a.txt", 1, "foo bar"), m("a.txt", 3, "FOO upper")}},
		{"CaseSensitive", `{"pattern": "FOO", "path": "a.txt"}`, []searchMatch{m("a.txt", 3, "FOO upper")}},
		{"FixedStrings", `{"pattern": "a.b", "fixed_strings": true, "path": "literal.txt"}`, []searchMatch{m("literal.txt", 1, "a.b")}},
		{"Regexp", `{"pattern": "a.b", "path": "literal.txt"}`, []searchMatch{m("literal.txt", 1, "a.b"), m("literal.txt", 2, "axb")}},
		{"Glob", `{"pattern": "foo", "glob": "*.md"}`, []searchMatch{m("sub/deep/x.md", 1, "foo deep"), m("sub/deep/x.md", 2, "foo again")}},
		{"GlobClass", `{"pattern": "foo", "glob": "[ab]*.txt"}`, []searchMatch{m("a.txt", 1, "foo bar"), m("bad-utf8.txt", 1, "foo \uFFFD bytes")}},
		{"Directory", `{"pattern": "foo", "path": "sub"}`, []searchMatch{m("sub/deep/x.md", 1, "foo deep"), m("sub/deep/x.md", 2, "foo again")}},
		{"NoMatch", `{"pattern": "nothing-like-this"}`, []searchMatch{}},
		{"ExplicitChoirTmp", `{"pattern": "foo", "path": ".choirtmp"}`, []searchMatch{m(".choirtmp/recv/up", 1, "foo uploaded")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := runSearch(t, fsSearch{}, env, tt.input)
			if err != nil {
				t.Fatal(err)
			}
			out := decode[searchOut](t, r.Output)
			if !slices.Equal(out.Matches, tt.want) || out.Count != len(tt.want) || out.Shown != len(tt.want) {
				t.Errorf("got %d matches:\n%+v\nwant:\n%+v", out.Count, out.Matches, tt.want)
			}
		})
	}
}

// TestSearchBackendsAgree runs every query through ripgrep and through the
// Go search and requires identical results.
func TestSearchBackendsAgree(t *testing.T) {
	t.Parallel()
	rg, err := exec.LookPath("rg")
	if err != nil {
		t.Skip("rg is not on PATH (Debian: apt-get install ripgrep)")
	}
	ws := searchTree(t)
	for i := range 300 {
		mkfile(t, filepath.Join(ws, "many", "f"+strings.Repeat("0", 3-len(itoa(i)))+itoa(i)+".txt"), "foo many\nfoo more\n")
	}
	env := tool.Env{Workspace: ws, Limits: tool.Limits{ResultBytes: 4096}}
	inputs := []string{
		`{"pattern": "foo"}`,
		`{"pattern": "FOO", "ignore_case": true}`,
		`{"pattern": "a.b", "fixed_strings": true}`,
		`{"pattern": "a.b"}`,
		`{"pattern": "^foo (deep|again)$"}`,
		`{"pattern": "foo", "glob": "*.md"}`,
		`{"pattern": "foo", "glob": "[ab]*.txt"}`,
		`{"pattern": "foo", "path": "sub"}`,
		`{"pattern": "foo", "path": "a.txt"}`,
		`{"pattern": "foo", "path": "link.txt"}`,
		`{"pattern": "ü", "path": "utf8.txt"}`,
		`{"pattern": "bytes"}`,
		`{"pattern": "foo", "max_results": 3}`,
		`{"pattern": "foo", "path": "many"}`,
		`{"pattern": "nothing-like-this"}`,
		`{"pattern": "\\bfoo\\b", "path": "crlf.txt"}`,
		`{"pattern": "foo", "path": ".choirtmp/recv"}`,
	}
	for _, input := range inputs {
		t.Run(input, func(t *testing.T) {
			t.Parallel()
			goRes, err := runSearch(t, fsSearch{}, env, input)
			if err != nil {
				t.Fatal(err)
			}
			rgRes, err := runSearch(t, fsSearch{rg: rg}, env, input)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(goRes.JSON(), rgRes.JSON()) {
				t.Errorf("ripgrep and Go differ:\nrg: %s\ngo: %s", rgRes.JSON(), goRes.JSON())
			}
			if goRes.Status != tool.StatusSuccess {
				t.Errorf("got %+v", goRes)
			}
		})
	}

	t.Run("ManyMatchesSpillToArtifact", func(t *testing.T) {
		t.Parallel()
		r, err := runSearch(t, fsSearch{rg: rg}, env, `{"pattern": "foo", "path": "many", "max_results": 5}`)
		if err != nil {
			t.Fatal(err)
		}
		out := decode[searchOut](t, r.Output)
		if out.Count != 600 || out.Shown != 5 || !r.Truncated || r.ArtifactRef == "" {
			t.Fatalf("count %d shown %d truncated %v ref %q", out.Count, out.Shown, r.Truncated, r.ArtifactRef)
		}
		art, err := os.ReadFile(filepath.Join(ws, r.ArtifactRef))
		if err != nil {
			t.Fatal(err)
		}
		if lines := strings.Split(strings.TrimSuffix(string(art), "\n"), "\n"); len(lines) != 600 || lines[0] != "many/f000.txt:1:foo many" || lines[599] != "many/f299.txt:2:foo more" {
			t.Errorf("artifact: %d lines, first %q", len(lines), lines[0])
		}
	})
}

func TestSearchFailures(t *testing.T) {
	t.Parallel()
	ws := searchTree(t)
	env := tool.Env{Workspace: ws}
	for _, s := range []fsSearch{{}, {rg: "/nonexistent/rg"}} {
		for input, want := range map[string]string{
			`{"pattern": "foo", "path": "bin.dat"}`: "bin.dat is a binary file",
			`{"pattern": "foo", "path": "missing"}`: "missing: no such file",
		} {
			r, err := runSearch(t, s, env, input)
			if err != nil || r.Status != tool.StatusError || !strings.Contains(r.Summary, want) {
				t.Errorf("%s: got %+v %v, want %q", input, r, err, want)
			}
		}
		for _, input := range []string{`{"pattern": "foo("}`, `{"pattern": "x", "glob": "[!a]*"}`, `{"pattern": "x", "glob": "a/b"}`} {
			_, err := runSearch(t, s, env, input)
			var ie *tool.InputError
			if !errors.As(err, &ie) {
				t.Errorf("%s: got %v, want *InputError", input, err)
			}
		}
		// A broken rg falls back to the Go search.
		r, err := runSearch(t, s, env, `{"pattern": "foo deep"}`)
		if err != nil || !strings.Contains(string(r.Output), "sub/deep/x.md") {
			t.Errorf("got %+v %v", r, err)
		}
	}
}

// TestRootRefusesSwappedLink models the race the resolution cannot close:
// a directory checked as inside is replaced by a link out before the open.
// The open goes through the os.Root and fails.
func TestRootRefusesSwappedLink(t *testing.T) {
	t.Parallel()
	ws, outside := t.TempDir(), t.TempDir()
	mkfile(t, filepath.Join(ws, "d", "f.txt"), "inside\n")
	mkfile(t, filepath.Join(outside, "f.txt"), "outside\n")
	w, err := openWorkspace(tool.Env{Workspace: ws})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	rel, err := w.resolve("d/f.txt")
	if err != nil || rel != "d/f.txt" {
		t.Fatalf("resolve: %q %v", rel, err)
	}
	if err := os.RemoveAll(filepath.Join(ws, "d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(ws, "d")); err != nil {
		t.Fatal(err)
	}
	if b, err := w.root.ReadFile(rel); err == nil {
		t.Fatalf("read through a swapped link: %q", b)
	}
	if err := tool.WriteFileAtomic(w.root, rel, []byte("pwned"), 0o644); err == nil {
		t.Fatal("wrote through a swapped link")
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "f.txt")); string(b) != "outside\n" {
		t.Errorf("outside file is %q", b)
	}
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %s: %v", b, err)
	}
	return v
}

func itoa(i int) string {
	b, _ := json.Marshal(i)
	return string(b)
}
