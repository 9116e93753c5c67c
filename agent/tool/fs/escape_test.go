package fs_test

import (
	"context"
	"encoding/json"
	"errors"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
)

// TestPathEscapes tries every way out of the workspace with every file
// tool, through the arbiter's path (Locks) and straight through Execute.
func TestPathEscapes(t *testing.T) {
	t.Parallel()
	b := tooltest.Setup(t, builtin.Config{})
	outside := t.TempDir()
	tooltest.WriteFile(t, filepath.Join(outside, "secret.txt"), "foo secret\n", 0o644)
	tooltest.WriteFile(t, filepath.Join(b.WS, "sub", "in.txt"), "foo inside\n", 0o644)
	relOut, err := filepath.Rel(b.WS, filepath.Join(outside, "secret.txt"))
	if err != nil {
		t.Fatal(err)
	}
	links := map[string]string{
		"link_abs":          filepath.Join(outside, "secret.txt"),
		"link_rel":          relOut,
		"link_dir":          outside,
		"dangling":          filepath.Join(outside, "new.txt"),
		"chain1":            "chain2",
		"chain2":            filepath.Join(outside, "secret.txt"),
		"sub/up":            "../..",
		"sub/deeper_escape": "../sub/../../" + filepath.Base(outside),
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(b.WS, name)); err != nil {
			t.Fatal(err)
		}
	}

	escapes := []struct {
		name string
		path string
	}{
		{"DotDot", "../secret.txt"},
		{"DotDotInside", "sub/../../secret.txt"},
		{"AbsoluteOutside", filepath.Join(outside, "secret.txt")},
		{"AbsoluteRoot", "/etc/passwd"},
		{"SymlinkAbsolute", "link_abs"},
		{"SymlinkRelative", "link_rel"},
		{"SymlinkedParentDirectory", "link_dir/secret.txt"},
		{"SymlinkedParentNewFile", "link_dir/new.txt"},
		{"DanglingSymlink", "dangling"},
		{"SymlinkChain", "chain1"},
		{"SymlinkToParentOfWorkspace", "sub/up/x"},
		{"SymlinkWithDotDotTarget", "sub/deeper_escape/secret.txt"},
	}
	inputs := map[string]func(p string) string{
		tool.NameFSRead:   func(p string) string { return `{"path": ` + quote(p) + `}` },
		tool.NameFSWrite:  func(p string) string { return `{"path": ` + quote(p) + `, "content": "pwned\n"}` },
		tool.NameFSSearch: func(p string) string { return `{"pattern": "foo", "path": ` + quote(p) + `}` },
	}
	for _, e := range escapes {
		for name, mk := range inputs {
			t.Run(e.name+"/"+name, func(t *testing.T) {
				t.Parallel()
				input := json.RawMessage(mk(e.path))
				d, _ := b.Reg.Lookup(name)
				_, err := d.Locks(b.WS, input)
				tooltest.WantPathEscape(t, err)
				if !strings.Contains(err.Error(), "paths must stay inside the workspace") {
					t.Errorf("message %q does not say what to do", err)
				}
				_, err = d.Execute(context.Background(), b.Env, input)
				tooltest.WantPathEscape(t, err)
			})
		}
	}

	t.Run("OtherRefusals", func(t *testing.T) {
		t.Parallel()
		if err := os.Symlink("loop2", filepath.Join(b.WS, "loop1")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("loop1", filepath.Join(b.WS, "loop2")); err != nil {
			t.Fatal(err)
		}
		for p, want := range map[string]string{"loop1": "too many levels of symbolic links", "a\x00b": "NUL"} {
			d, _ := b.Reg.Lookup(tool.NameFSRead)
			_, err := d.Locks(b.WS, json.RawMessage(`{"path": `+quote(p)+`}`))
			var pe *tool.PathError
			if !errors.As(err, &pe) || errors.Is(err, tool.ErrPathEscape) || !strings.Contains(err.Error(), want) {
				t.Errorf("%q: got %v, want a refusal with %q", p, err, want)
			}
		}
	})

	t.Run("InsideAccessStillWorks", func(t *testing.T) {
		t.Parallel()
		if err := os.Symlink("sub/in.txt", filepath.Join(b.WS, "inlink")); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(b.WS, "sub"), filepath.Join(b.WS, "abs_in_dir")); err != nil {
			t.Fatal(err)
		}
		for _, p := range []string{"sub/in.txt", filepath.Join(b.WS, "sub/in.txt"), "inlink", "abs_in_dir/in.txt"} {
			r, err := b.Call(t, tool.NameFSRead, `{"path": `+quote(p)+`}`)
			if err != nil || r.Status != tool.StatusSuccess || !strings.Contains(string(r.Output), "foo inside") {
				t.Errorf("%s: got %+v %v", p, r, err)
			}
		}
		// A link out of the workspace is refused even when the rest of the
		// path would lead back in.
		_, err := b.Call(t, tool.NameFSRead, `{"path": `+quote("sub/up/"+filepath.Base(b.WS)+"/sub/in.txt")+`}`)
		tooltest.WantPathEscape(t, err)
	})

	t.Cleanup(func() {
		if got := tooltest.ReadFile(t, filepath.Join(outside, "secret.txt")); got != "foo secret\n" {
			t.Errorf("the outside file changed: %q", got)
		}
		if _, err := os.Stat(filepath.Join(outside, "new.txt")); err == nil {
			t.Error("a file was created outside the workspace")
		}
	})
}

// TestSearchSkipsLinksOut checks that a search of the whole workspace does
// not follow a link that leads out of it.
func TestSearchSkipsLinksOut(t *testing.T) {
	t.Parallel()
	b := tooltest.Setup(t, builtin.Config{})
	outside := t.TempDir()
	tooltest.WriteFile(t, filepath.Join(outside, "secret.txt"), "foo secret\n", 0o644)
	tooltest.WriteFile(t, filepath.Join(b.WS, "in.txt"), "foo inside\n", 0o644)
	if err := os.Symlink(outside, filepath.Join(b.WS, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "secret.txt"), filepath.Join(b.WS, "secret.txt")); err != nil {
		t.Fatal(err)
	}
	r := b.MustCall(t, tool.NameFSSearch, `{"pattern": "foo"}`)
	if strings.Contains(string(r.Output), "secret") || !strings.Contains(string(r.Output), "foo inside") {
		t.Errorf("got %s", r.Output)
	}
}

func quote(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}
