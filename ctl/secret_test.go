package ctl_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/dbtest"
)

func readSecretsFile(t *testing.T, home string) config.Secrets {
	t.Helper()
	path := filepath.Join(home, "secrets.json")
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("secrets.json mode = %04o, want 0600", st.Mode().Perm())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := config.ParseSecrets(data)
	if err != nil {
		t.Fatalf("secrets.json does not parse: %v", err)
	}
	return s
}

// TestSecretSetFromStdin swaps os.Stdin, so it is not parallel: Go runs it
// before every parallel test starts.
func TestSecretSetFromStdin(t *testing.T) {
	home := t.TempDir()
	localInit(t, home, dbtest.DefaultURL)
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdin
	os.Stdin = r
	t.Cleanup(func() { os.Stdin = old; r.Close() })
	w.WriteString("tok-from-stdin-5e6f\n")
	w.Close()
	res := run(t, "--home", home, "secret", "set", "telegram-token", "-")
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	if got := readSecretsFile(t, home)["telegram-token"]; got != "tok-from-stdin-5e6f" {
		t.Errorf("stored value = %q (the trailing newline must be dropped)", got)
	}
	if strings.Contains(res.stdout+res.stderr, "tok-from-stdin") {
		t.Errorf("the value was printed: %s%s", res.stdout, res.stderr)
	}
}

func TestSecretEdit(t *testing.T) {
	t.Parallel()

	t.Run("SetAddsAndUpdatesAtomicallyWithMode0600", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, dbtest.DefaultURL)
		res := run(t, "--home", home, "secret", "set", "openrouter-key", "sk-value-a1b2")
		if res.code != 0 || !strings.Contains(res.stdout, "added secret openrouter-key") ||
			!strings.Contains(res.stdout, "choirctl secret apply") {
			t.Fatalf("set: %d %s %s", res.code, res.stdout, res.stderr)
		}
		res = run(t, "--home", home, "secret", "set", "openrouter-key", "sk-value-c3d4")
		if res.code != 0 || !strings.Contains(res.stdout, "updated secret openrouter-key") {
			t.Fatalf("update: %d %s %s", res.code, res.stdout, res.stderr)
		}
		s := readSecretsFile(t, home)
		if s["openrouter-key"] != "sk-value-c3d4" || s["postgres-admin"] != "postgres:" {
			t.Errorf("secrets = %v", s.Names())
		}
		if strings.Contains(res.stdout+res.stderr, "sk-value") {
			t.Errorf("a value was printed: %s", res.stdout)
		}
		// No temporary file is left beside it.
		entries, _ := os.ReadDir(home)
		for _, e := range entries {
			if strings.Contains(e.Name(), ".tmp-") {
				t.Errorf("temporary file left: %s", e.Name())
			}
		}
		// The whole config still validates with the new file.
		if r := run(t, "--home", home, "config", "validate"); r.code != 0 {
			t.Errorf("validate: %s", r.stderr)
		}
	})

	t.Run("DeleteRemovesAnUnusedSecret", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, dbtest.DefaultURL)
		run(t, "--home", home, "secret", "set", "spare", "v-spare-0000")
		res := run(t, "--home", home, "secret", "delete", "spare")
		if res.code != 0 || !strings.Contains(res.stdout, "deleted secret spare") {
			t.Fatalf("delete: %d %s %s", res.code, res.stdout, res.stderr)
		}
		if _, ok := readSecretsFile(t, home)["spare"]; ok {
			t.Error("spare is still in secrets.json")
		}
		res = run(t, "--home", home, "secret", "delete", "spare")
		if res.code != 2 || !strings.Contains(res.stderr, "not in secrets.json") {
			t.Errorf("second delete: %d %s", res.code, res.stderr)
		}
	})

	t.Run("EditThatBreaksConfigIsRefusedWithThePathAndChangesNothing", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, dbtest.DefaultURL)
		path := filepath.Join(home, "secrets.json")
		before, _ := os.ReadFile(path)

		res := run(t, "--home", home, "secret", "delete", "postgres-admin")
		if res.code != 2 || !strings.Contains(res.stderr, "$.postgres.secret") || !strings.Contains(res.stderr, "unchanged") {
			t.Errorf("delete of a used secret: %d %s", res.code, res.stderr)
		}
		res = run(t, "--home", home, "secret", "set", "postgres-admin", "no-colon-here")
		if res.code != 2 || !strings.Contains(res.stderr, "$.postgres.secret") || strings.Contains(res.stderr, "no-colon-here") {
			t.Errorf("set of a malformed postgres secret: %d %s", res.code, res.stderr)
		}
		if after, _ := os.ReadFile(path); string(after) != string(before) {
			t.Errorf("secrets.json changed:\n%s", after)
		}
	})

	t.Run("BadInputIsRefused", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, dbtest.DefaultURL)
		for _, tc := range []struct {
			args []string
			want string
		}{
			{[]string{"secret", "set", "Bad Name", "v"}, "must match"},
			{[]string{"secret", "set", "empty", ""}, "secret delete"},
			{[]string{"secret", "set"}, "accepts between 1 and 2 arg"},
		} {
			res := run(t, append([]string{"--home", home}, tc.args...)...)
			if res.code != 2 || !strings.Contains(res.stderr, tc.want) {
				t.Errorf("%v: %d %s", tc.args, res.code, res.stderr)
			}
		}
	})

	t.Run("InsecureSecretsFileIsRefused", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, dbtest.DefaultURL)
		path := filepath.Join(home, "secrets.json")
		if err := os.Chmod(path, 0o644); err != nil {
			t.Fatal(err)
		}
		res := run(t, "--home", home, "secret", "set", "x", "v")
		if res.code == 0 || !strings.Contains(res.stderr, "chmod 600") {
			t.Errorf("set on a 0644 secrets.json: %d %s", res.code, res.stderr)
		}
	})

	t.Run("ListAndConfigCommandsSayWhenChoirdIsNotRunning", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, dbtest.DefaultURL)
		for _, args := range [][]string{{"secret", "list"}, {"config", "load"}, {"config", "diff"},
			{"config", "apply"}, {"config", "show", "--json"}} {
			res := run(t, append([]string{"--home", home}, args...)...)
			if res.code == 0 || !strings.Contains(res.stderr, "not running") {
				t.Errorf("%v: %d %s", args, res.code, res.stderr)
			}
		}
		var out map[string]any
		if res := run(t, "--home", home, "config", "validate", "--json"); json.Unmarshal([]byte(res.stdout), &out) != nil {
			t.Errorf("config validate --json still works: %s", res.stdout)
		}
	})
}
