package ctl_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/ctl"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestMemoryPutAndEdit writes knowledge as the operator from a file, from
// stdin and through $EDITOR, and reads the versions back from history. It
// swaps os.Stdin and sets EDITOR, so it is not parallel.
func TestMemoryPutAndEdit(t *testing.T) {
	home := ctl.StartChoirdOn(t, dbtest.NewDatabase(t))
	mem := func(args ...string) result {
		return run(t, append([]string{"--home", home, "memory"}, args...)...)
	}
	history := func(t *testing.T, key string) []admin.MemoryKnowledgeVersion {
		t.Helper()
		r := mem("history", "assistant", key, "--json")
		var vs []admin.MemoryKnowledgeVersion
		if err := json.Unmarshal([]byte(r.stdout), &vs); err != nil {
			t.Fatalf("history: exit %d: %v\n%s%s", r.code, err, r.stdout, r.stderr)
		}
		return vs
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "theme.txt")
	os.WriteFile(file, []byte("The user prefers dark mode\n"), 0o600)

	t.Run("PutFromAFileThenStdinMakesOperatorVersions", func(t *testing.T) {
		r := mem("put", "assistant", "user.theme", "--file", file)
		if r.code != 0 || !strings.Contains(r.stdout, "inserted knowledge document user.theme of assistant: version 1 by operator") {
			t.Fatalf("put --file: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		withStdin(t, "The user prefers light mode\n", func() {
			r = mem("put", "assistant", "user.theme", "-")
		})
		if r.code != 0 || !strings.Contains(r.stdout, "updated knowledge document user.theme of assistant: version 2") {
			t.Fatalf("put -: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		vs := history(t, "user.theme")
		if len(vs) != 2 || vs[0].Text != "The user prefers light mode" || vs[0].Op != "update" || vs[1].Op != "insert" {
			t.Fatalf("history %+v", vs)
		}
		for _, v := range vs {
			if v.Actor != "operator" {
				t.Errorf("version %d has actor %q, want operator", v.Version, v.Actor)
			}
		}
	})
	t.Run("PutOfTheSameTextWritesNothing", func(t *testing.T) {
		withStdin(t, "The user prefers light mode", func() {
			r := mem("put", "assistant", "user.theme")
			if r.code != 0 || !strings.Contains(r.stdout, "unchanged (version 2): nothing written") {
				t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		})
		if n := len(history(t, "user.theme")); n != 2 {
			t.Errorf("%d versions, want 2", n)
		}
	})
	t.Run("PutRefusesEmptyTextAndUnknownAgents", func(t *testing.T) {
		empty := filepath.Join(dir, "empty.txt")
		os.WriteFile(empty, []byte("\n"), 0o600)
		if r := mem("put", "assistant", "user.theme", "--file", empty); r.code != ctl.ExitUsage || !strings.Contains(r.stderr, "is empty") {
			t.Errorf("empty: exit %d: %s", r.code, r.stderr)
		}
		if r := mem("put", "ghost", "k", "--file", file); r.code != ctl.ExitUsage || !strings.Contains(r.stderr, "ghost") {
			t.Errorf("unknown agent: exit %d: %s", r.code, r.stderr)
		}
	})

	// The editor: a script that appends a line, or leaves the file alone.
	appendEditor := filepath.Join(dir, "append.sh")
	os.WriteFile(appendEditor, []byte("#!/bin/sh\nprintf '%s\\n' ' Also in the evening.' >> \"$1\"\n"), 0o700)
	t.Setenv("VISUAL", "")

	t.Run("EditWritesAChangedTextAsTheNextVersion", func(t *testing.T) {
		t.Setenv("EDITOR", appendEditor)
		r := mem("edit", "assistant", "user.theme")
		if r.code != 0 || !strings.Contains(r.stdout, "version 3 by operator") {
			t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		vs := history(t, "user.theme")
		if len(vs) != 3 || vs[0].Actor != "operator" || vs[0].Text != "The user prefers light mode Also in the evening." {
			t.Errorf("history %+v", vs)
		}
	})
	t.Run("EditOfANewKeyStartsEmpty", func(t *testing.T) {
		t.Setenv("EDITOR", appendEditor)
		r := mem("edit", "assistant", "user.evening")
		if r.code != 0 || !strings.Contains(r.stdout, "inserted knowledge document user.evening of assistant: version 1") {
			t.Fatalf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if vs := history(t, "user.evening"); len(vs) != 1 || vs[0].Text != " Also in the evening." || vs[0].Actor != "operator" {
			t.Errorf("history %+v", vs)
		}
	})
	t.Run("EditWithoutAChangeWritesNothing", func(t *testing.T) {
		t.Setenv("EDITOR", "true")
		r := mem("edit", "assistant", "user.theme")
		if r.code != 0 || !strings.Contains(r.stdout, "unchanged: nothing written") {
			t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if n := len(history(t, "user.theme")); n != 3 {
			t.Errorf("%d versions, want 3", n)
		}
	})
	t.Run("AFailingEditorWritesNothing", func(t *testing.T) {
		t.Setenv("EDITOR", "false")
		r := mem("edit", "assistant", "user.theme")
		if r.code != ctl.ExitError || !strings.Contains(r.stderr, "the editor (false) failed, nothing written") {
			t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
}

// withStdin runs f with os.Stdin reading text.
func withStdin(t *testing.T, text string, f func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "stdin")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	in, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	old := os.Stdin
	os.Stdin = in
	defer func() { os.Stdin = old }()
	f()
}
