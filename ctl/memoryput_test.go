package ctl_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/ctl"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
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
	t.Run("EditRefusesAChangeMadeWhileTheEditorWasOpen", func(t *testing.T) {
		// The editor appends a line, says it is open and waits until the
		// test has written the document behind its back.
		opened, proceed := filepath.Join(dir, "opened"), filepath.Join(dir, "proceed")
		slow := filepath.Join(dir, "slow.sh")
		os.WriteFile(slow, []byte("#!/bin/sh\nprintf '%s\\n' ' Mine.' >> \"$1\"\ntouch "+opened+
			"\nwhile [ ! -e "+proceed+" ]; do sleep 0.02; done\n"), 0o700)
		t.Setenv("EDITOR", slow)
		done := make(chan result, 1)
		go func() { done <- mem("edit", "assistant", "user.theme") }()
		choirdtest.WaitFor(t, "the editor to open", nil, func() bool { _, err := os.Stat(opened); return err == nil })
		// From a file, not standard input: the edit in progress holds
		// os.Stdin, and swapping it under it would race.
		other := filepath.Join(dir, "other.txt")
		os.WriteFile(other, []byte("Someone else's text"), 0o600)
		r := mem("put", "assistant", "user.theme", "--file", other)
		if r.code != 0 || !strings.Contains(r.stdout, "version 4") {
			t.Fatalf("concurrent put: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		os.WriteFile(proceed, nil, 0o600)
		r = <-done
		t.Logf("the refused edit says:\n%s", r.stderr)
		for _, want := range []string{"you had version 3, it is now at version 4 (update by operator",
			"Nothing was written", "choirctl memory history assistant user.theme",
			"choirctl memory edit assistant user.theme", "--expect-version 4 --file "} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr lacks %q", want)
			}
		}
		if r.code != ctl.ExitError {
			t.Errorf("exit %d, want %d\n%s%s", r.code, ctl.ExitError, r.stdout, r.stderr)
		}
		vs := history(t, "user.theme")
		if len(vs) != 4 || vs[0].Text != "Someone else's text" {
			t.Fatalf("history %+v: the edit must not be written", vs)
		}
		// The edit is kept in the file the message names, and put with
		// the version it names writes it.
		_, kept, _ := strings.Cut(r.stderr, "your edited text is kept in ")
		kept, _, _ = strings.Cut(kept, "\n")
		t.Cleanup(func() { os.Remove(kept) })
		if b, err := os.ReadFile(kept); err != nil || !strings.Contains(string(b), " Mine.") {
			t.Fatalf("kept text %q: %q, %v", kept, b, err)
		}
		if r := mem("put", "assistant", "user.theme", "--expect-version", "3", "--file", kept); r.code != ctl.ExitError ||
			!strings.Contains(r.stderr, "you had version 3, it is now at version 4") {
			t.Errorf("put expecting a stale version: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if r := mem("put", "assistant", "user.theme", "--expect-version", "4", "--file", kept); r.code != 0 ||
			!strings.Contains(r.stdout, "version 5") {
			t.Errorf("put expecting the current version: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
	})
	t.Run("PutExpectingANewKeyRefusesOneInUse", func(t *testing.T) {
		if r := mem("put", "assistant", "user.theme", "--expect-version", "0", "--file", file); r.code != ctl.ExitError ||
			!strings.Contains(r.stderr, "you had no document (a new key), it is now at version 5") {
			t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if r := mem("put", "assistant", "brand.new", "--expect-version", "0", "--file", file); r.code != 0 ||
			!strings.Contains(r.stdout, "inserted knowledge document brand.new") {
			t.Errorf("exit %d\n%s%s", r.code, r.stdout, r.stderr)
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
