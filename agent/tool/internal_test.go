package tool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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

func TestResolvePath(t *testing.T) {
	t.Parallel()
	ws := t.TempDir()
	mkfile(t, filepath.Join(ws, "src", "a.go"), "")
	mkfile(t, filepath.Join(ws, "file"), "")
	if err := os.Symlink("src", filepath.Join(ws, "s")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(ws, "src", "a.go"), filepath.Join(ws, "abs")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("src/nope", filepath.Join(ws, "dangling_in")); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ in, want string }{
		{"", "."},
		{".", "."},
		{"./", "."},
		{"src/a.go", "src/a.go"},
		{"src/../src/./a.go", "src/a.go"},
		{"s/a.go", "src/a.go"},
		{"s/new/deeper.go", "src/new/deeper.go"},
		{"abs", "src/a.go"},
		{"dangling_in", "src/nope"},
		{"file/below", "file/below"},
		{ws, "."},
		{ws + "/s/a.go", "src/a.go"},
	}
	for _, tt := range tests {
		got, err := ResolvePath(ws, tt.in)
		if err != nil || got != tt.want {
			t.Errorf("ResolvePath(%q) = %q, %v; want %q", tt.in, got, err, tt.want)
		}
	}
	if _, err := ResolvePath("", "a"); err == nil {
		t.Error("no workspace: want an error")
	}
	for rel, want := range map[string]string{".": "workspace", ".choirtmp": "choirtmp", ".choirtmp/send/a": "choirtmp", ".choirtmpx": "file:.choirtmpx", "a/b": "file:a/b"} {
		if got := lockKeyFor(rel); got != want {
			t.Errorf("lockKeyFor(%q) = %q, want %q", rel, got, want)
		}
	}
}

func TestCheckKeys(t *testing.T) {
	t.Parallel()
	tests := []struct {
		doc  string
		ok   bool
		path string
	}{
		{`{"a": 1, "b": {"a": 2}}`, true, ""},
		{`[{"a": 1}, {"a": 2}]`, true, ""},
		{`{"a": "\"a\": 1, \\", "b": ["a", "a"]}`, true, ""},
		{`{"a": 1, "a": 2}`, false, "/a"},
		{`{"a": 1, "\u0061": 2}`, false, "/a"},
		{`{"x": {"k": 1, "y": [1, {"z": 0, "z": 1}]}}`, false, "/x/y/*/z"},
		{`{"x": {"k": 1}, "k": 2}`, true, ""},
		{`"plain"`, true, ""},
		{strings.Repeat("[", 65) + strings.Repeat("]", 65), false, ""},
		{strings.Repeat("[", 64) + strings.Repeat("]", 64), true, ""},
	}
	for _, tt := range tests {
		p, ok := checkKeys([]byte(tt.doc))
		if ok != tt.ok || p.Path != tt.path {
			t.Errorf("checkKeys(%.40s) = %+v %v, want ok %v path %q", tt.doc, p, ok, tt.ok, tt.path)
		}
	}
}
