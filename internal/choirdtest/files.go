package choirdtest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
)

// Git runs git with args in dir as a test author, fails the test on an
// error, and returns its output, trimmed.
func Git(t testing.TB, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@t", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@t")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

// GitRepo is a new git repository on branch main with files committed.
func GitRepo(t testing.TB, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	Git(t, dir, "init", "-q", "-b", "main")
	CommitFiles(t, dir, files)
	return dir
}

// CommitFiles writes files into the repository dir and commits them.
func CommitFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, data := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	Git(t, dir, "add", "-A")
	Git(t, dir, "commit", "-q", "-m", "change")
}

// EditHome rewrites .choir.d/config.json (and secrets.json when secrets
// is not nil) as an operator would.
func EditHome(t testing.TB, home string, edit func(c *config.Config), secrets config.Secrets) {
	t.Helper()
	path := filepath.Join(home, config.ConfigFile)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if edit != nil {
		edit(cfg)
	}
	if data, err = cfg.MarshalIndent(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if secrets != nil {
		data, _ := json.Marshal(map[string]string(secrets))
		if err := os.WriteFile(filepath.Join(home, config.SecretsFile), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// LogMessages are the messages of choird's JSON log file at path, each
// line checked to be JSON from source choird.
func LogMessages(t testing.TB, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var msgs []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct {
			Msg    string `json:"msg"`
			Source string `json:"source"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("log line is not JSON: %q", sc.Text())
		}
		if line.Source != "choird" {
			t.Errorf("log line without source=choird: %s", sc.Text())
		}
		msgs = append(msgs, line.Msg)
	}
	return msgs
}
