package agent

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
)

// gitGet runs git config --global with home as HOME and returns its output.
func gitGet(t *testing.T, home string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"config", "--global"}, args...)...)
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git config --global %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestGitConfigReadsBackWhatWasMeant writes the global git configuration
// without git and has the real git read it back: names and emails that
// need quoting or escapes, and a route prefix per host.
func TestGitConfigReadsBackWhatWasMeant(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed: scripts/testdeps.sh installs it")
	}
	for _, name := range []string{"Dev", `Ann "the admin" O'Neil`, ` lead and trail `, `back\slash`, "tab\there",
		"hash # and ; semicolon", "new\nline", "Zoë 🎶", ""} {
		home := t.TempDir()
		c := gitConfig{name: name, email: "dev@choir.local", insteadOf: [][2]string{
			{"http://127.0.0.1:4242/svc/git/dev/git.example.com/", "https://git.example.com/"},
			{"http://127.0.0.1:4242/svc/git/dev/odd\"host\\/", "https://odd/"}}}
		if err := c.write(home); err != nil {
			t.Fatal(err)
		}
		if got := strings.TrimSuffix(gitGet(t, home, "--get", "user.name"), "\n"); got != name {
			t.Errorf("user.name = %q, want %q", got, name)
		}
		if got := gitGet(t, home, "--get", "user.email"); got != "dev@choir.local\n" {
			t.Errorf("user.email = %q", got)
		}
		want := "url.http://127.0.0.1:4242/svc/git/dev/git.example.com/.insteadof https://git.example.com/\n" +
			"url.http://127.0.0.1:4242/svc/git/dev/odd\"host\\/.insteadof https://odd/\n"
		if got := gitGet(t, home, "--get-regexp", `^url\.`); got != want {
			t.Errorf("insteadOf:\n%s\nwant\n%s", got, want)
		}
		if b, _ := os.ReadFile(filepath.Join(home, ".gitconfig")); strings.Contains(string(b), "helper") {
			t.Errorf("a fresh HOME's .gitconfig names a credential helper:\n%s", b)
		}
	}
}

// TestGitConfigKeepsAReusedHome writes over a .gitconfig an older agent
// left: its settings stay, the identity's win, and its credential helper
// is no longer asked.
func TestGitConfigKeepsAReusedHome(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed: scripts/testdeps.sh installs it")
	}
	home := t.TempDir()
	old := "[user]\n\tname = Old\n[credential]\n\thelper = store\n[core]\n\teditor = vi"
	if err := os.WriteFile(filepath.Join(home, ".gitconfig"), []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := (gitConfig{name: "New", email: "new@choir.local"}).write(home); err != nil {
		t.Fatal(err)
	}
	if got := gitGet(t, home, "--get", "user.name"); got != "New\n" {
		t.Errorf("user.name = %q, want the identity's", got)
	}
	if got := gitGet(t, home, "--get", "core.editor"); got != "vi\n" {
		t.Errorf("core.editor = %q, want the older setting kept", got)
	}
	// git takes an empty helper as the end of the list before it.
	if got := gitGet(t, home, "--get-all", "credential.helper"); got != "store\n\n" {
		t.Errorf("credential.helper values = %q, want store emptied by an empty value after it", got)
	}
	cmd := exec.Command("git", "credential", "fill")
	cmd.Env = []string{"HOME=" + home, "PATH=" + os.Getenv("PATH"), "GIT_CONFIG_NOSYSTEM=1", "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false"}
	cmd.Stdin = strings.NewReader("protocol=https\nhost=git.example.com\n\n")
	os.WriteFile(filepath.Join(home, ".git-credentials"), []byte("https://u:leaked@git.example.com\n"), 0o600)
	if out, _ := cmd.CombinedOutput(); strings.Contains(string(out), "leaked") {
		t.Errorf("the older agent's credential store still answers: %q", out)
	}
}

// TestGitRoutes: with a gateway and a token to push with, each of the
// identity's hosts goes to choird's git route for the identity, through
// the tools' proxy; without either, git gets no route.
func TestGitRoutes(t *testing.T) {
	gi := config.GitIdentity{Secret: "git-token", Hosts: []string{"github.com", "git.example.com:8443"}}
	want := [][2]string{
		{"http://127.0.0.1:4242/svc/git/dev/github.com/", "https://github.com/"},
		{"http://127.0.0.1:4242/svc/git/dev/git.example.com:8443/", "https://git.example.com:8443/"},
	}
	if got := gitRoutes("dev", gi, "127.0.0.1:4242"); !slices.Equal(got, want) {
		t.Errorf("routes = %q, want %q", got, want)
	}
	if got := gitRoutes("dev", gi, ""); got != nil {
		t.Errorf("without a gateway: routes = %q, want none", got)
	}
	gi.Secret = ""
	if got := gitRoutes("dev", gi, "127.0.0.1:4242"); got != nil {
		t.Errorf("without a token: routes = %q, want none", got)
	}
}
