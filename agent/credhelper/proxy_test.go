package credhelper

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// gitServer is an HTTPS git server (git http-backend) that answers only
// requests carrying the token, and records what every request carried.
type gitServer struct {
	srv  *httptest.Server
	root string
	mu   sync.Mutex
	auth []string
}

func newGitServer(t *testing.T) *gitServer {
	t.Helper()
	g := &gitServer{root: t.TempDir()}
	git(t, "", nil, "init", "--quiet", "--bare", filepath.Join(g.root, "repo.git"))
	git(t, "", nil, "-C", filepath.Join(g.root, "repo.git"), "config", "http.receivepack", "true")
	backend := &cgi.Handler{Path: "/usr/lib/git-core/git-http-backend",
		Env: []string{"GIT_PROJECT_ROOT=" + g.root, "GIT_HTTP_EXPORT_ALL=1"}}
	g.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.auth = append(g.auth, r.Header.Get("Authorization"))
		g.mu.Unlock()
		if r.Header.Get("Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte(DefaultUsername+":"+testToken)) {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(g.srv.Close)
	return g
}

// git runs git with a private global configuration (home's .gitconfig).
func git(t *testing.T, home string, stdin *string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "GIT_CONFIG_NOSYSTEM=1")
	if home != "" {
		cmd.Env = append(cmd.Env, "HOME="+home, "GIT_CONFIG_GLOBAL="+filepath.Join(home, ".gitconfig"))
	}
	if stdin != nil {
		cmd.Stdin = strings.NewReader(*stdin)
	}
	out, err := cmd.CombinedOutput()
	if err != nil && stdin == nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// TestProxyPushesWithoutGitHoldingTheToken clones and pushes with a real
// git through the proxy: the server receives the token on every request,
// while git's configuration, its credential helpers (git credential fill)
// and its output never hold it.
func TestProxyPushesWithoutGitHoldingTheToken(t *testing.T) {
	t.Parallel()
	g := newGitServer(t)
	u, _ := url.Parse(g.srv.URL)
	p := &Proxy{Hosts: []string{u.Host}, TokenFunc: func() (string, bool) { return testToken, true },
		Transport: g.srv.Client().Transport}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := p.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	git(t, home, nil, "config", "--global", "url."+p.Prefix(u.Host)+".insteadOf", "https://"+u.Host+"/")
	git(t, home, nil, "config", "--global", "user.name", "Agent")
	git(t, home, nil, "config", "--global", "user.email", "agent@choir.local")
	ws := filepath.Join(home, "ws")
	var out strings.Builder
	out.WriteString(git(t, home, nil, "clone", "--quiet", g.srv.URL+"/repo.git", ws))
	if err := os.WriteFile(filepath.Join(ws, "a.txt"), []byte("hello\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out.WriteString(git(t, home, nil, "-C", ws, "add", "a.txt"))
	out.WriteString(git(t, home, nil, "-C", ws, "commit", "--quiet", "-m", "a"))
	out.WriteString(git(t, home, nil, "-C", ws, "push", "--quiet", "origin", "HEAD:refs/heads/main"))
	if got := git(t, "", nil, "-C", filepath.Join(g.root, "repo.git"), "log", "--format=%s", "main"); strings.TrimSpace(got) != "a" {
		t.Fatalf("the push did not arrive: log %q", got)
	}
	fill := "protocol=https\nhost=" + u.Host + "\n\n"
	out.WriteString(git(t, home, &fill, "credential", "fill"))
	gitconfig, _ := os.ReadFile(filepath.Join(home, ".gitconfig"))
	out.Write(gitconfig)
	b64 := base64.StdEncoding.EncodeToString([]byte(testToken))
	if s := out.String(); strings.Contains(s, testToken) || strings.Contains(s, b64[:len(b64)-4]) {
		t.Fatalf("git's side holds the token:\n%s", s)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.auth) < 3 || g.auth[0] == "" {
		t.Errorf("the server saw Authorization %q, want the token on every request", g.auth)
	}
}

// TestProxyRefuses checks what the proxy does not forward: a request
// without its key, for another host, or that is not git's.
func TestProxyRefuses(t *testing.T) {
	t.Parallel()
	g := newGitServer(t)
	u, _ := url.Parse(g.srv.URL)
	p := &Proxy{Hosts: []string{u.Host}, TokenFunc: func() (string, bool) { return testToken, true },
		Transport: g.srv.Client().Transport}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := p.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	base := p.Prefix(u.Host)
	noKey := strings.Replace(base, p.key, "guess", 1)
	other := strings.Replace(base, u.Host, "evil.example.com", 1)
	for _, c := range []struct{ method, url, why string }{
		{"GET", noKey + "repo.git/info/refs?service=git-upload-pack", "not a request of this agent's git"},
		{"GET", other + "repo.git/info/refs?service=git-upload-pack", "is not one of the git identity's hosts"},
		{"GET", base + "api/user", "is not a git smart-HTTP request"},
		{"GET", base + "repo.git/info/refs?service=other", "is not a git smart-HTTP request"},
		{"POST", base + "repo.git/info/refs?service=git-upload-pack", "is not a git smart-HTTP request"},
	} {
		req, _ := http.NewRequest(c.method, c.url, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body := make([]byte, 512)
		n, _ := resp.Body.Read(body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body[:n]), c.why) {
			t.Errorf("%s %s: %d %q, want 403 saying %q", c.method, c.url, resp.StatusCode, body[:n], c.why)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.auth) != 0 {
		t.Errorf("refused requests reached the server: %q", g.auth)
	}
}
