// Package gittest is a git remote for tests: a real git http-backend
// served over HTTPS by httptest, which answers only requests that carry
// its token in a Basic authorization, as GitHub does, and records what
// each request carried. Tests reach it through a client that trusts its
// certificate ([Server.Transport]) and run git with [Git].
package gittest

import (
	"bytes"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/cgi"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
)

// Username is what the server expects beside its token (any name would
// do for GitHub; choird sends this one).
const Username = "x-access-token"

// Server is an HTTPS git remote.
type Server struct {
	srv   *httptest.Server
	root  string
	token string

	mu   sync.Mutex
	seen []Request
}

// Request is what one request to the server carried.
type Request struct {
	Method, Path, Query string
	// Authorized says it carried the token.
	Authorized bool
	// Authorization is its Authorization header.
	Authorization string
	// Chunked says its body came in chunks, as git sends a pack larger
	// than its http.postBuffer, and as a proxy that streams it passes
	// it on.
	Chunked bool
}

// NewServer starts a remote that serves the bare repositories of a
// temporary directory to requests that carry token; it stops when the
// test ends.
func NewServer(t testing.TB, token string) *Server {
	t.Helper()
	exe, err := exec.Command("git", "--exec-path").Output()
	if err != nil {
		t.Skipf("no git: %v", err)
	}
	s := &Server{root: t.TempDir(), token: token}
	backend := &cgi.Handler{Path: filepath.Join(strings.TrimSpace(string(exe)), "git-http-backend"),
		Env: []string{"GIT_PROJECT_ROOT=" + s.root, "GIT_HTTP_EXPORT_ALL=1"}}
	want := "Basic " + base64.StdEncoding.EncodeToString([]byte(Username+":"+token))
	s.srv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth := r.Header.Get("Authorization")
		s.mu.Lock()
		s.seen = append(s.seen, Request{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Authorized: auth == want,
			Authorization: auth, Chunked: slices.Contains(r.TransferEncoding, "chunked")})
		s.mu.Unlock()
		if auth != want {
			w.Header().Set("WWW-Authenticate", `Basic realm="git"`)
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		if r.ContentLength < 0 {
			// CGI wants a length: the test's remote reads a streamed
			// body whole (what reached it streamed all the same).
			b, err := io.ReadAll(r.Body)
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			r.Body, r.ContentLength, r.TransferEncoding = io.NopCloser(bytes.NewReader(b)), int64(len(b)), nil
		}
		backend.ServeHTTP(w, r)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// Host is the server's host:port, as a git identity's hosts name it.
func (s *Server) Host() string {
	u, _ := url.Parse(s.srv.URL)
	return u.Host
}

// URL is the HTTPS URL of repository repo ("owner/name.git").
func (s *Server) URL(repo string) string { return s.srv.URL + "/" + repo }

// Transport trusts the server's certificate.
func (s *Server) Transport() http.RoundTripper { return s.srv.Client().Transport }

// Init creates the bare repository repo ("owner/name.git"), which
// accepts pushes.
func (s *Server) Init(t testing.TB, repo string) {
	t.Helper()
	dir := filepath.Join(s.root, repo)
	Git(t, "", "init", "--quiet", "--bare", "--initial-branch=main", dir)
	Git(t, "", "-C", dir, "config", "http.receivepack", "true")
}

// Log is the subjects of ref's commits in repo, newest first, as the
// server holds them.
func (s *Server) Log(t testing.TB, repo, ref string) string {
	t.Helper()
	return strings.TrimSpace(Git(t, "", "-C", filepath.Join(s.root, repo), "log", "--format=%s", ref))
}

// Requests are the requests the server received so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.seen...)
}

// Git runs git, with home's .gitconfig as its only configuration when
// home is set, and fails the test if it fails.
func Git(t testing.TB, home string, args ...string) string {
	t.Helper()
	out, err := Run(home, args...)
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// Run runs git as Git does and returns its output and error.
func Run(home string, args ...string) (string, error) {
	cmd := exec.Command("git", args...)
	cmd.Env = append(os.Environ(), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false", "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=Test", "GIT_AUTHOR_EMAIL=test@choir.local", "GIT_COMMITTER_NAME=Test", "GIT_COMMITTER_EMAIL=test@choir.local")
	if home != "" {
		cmd.Env = append(cmd.Env, "HOME="+home, "GIT_CONFIG_GLOBAL="+filepath.Join(home, ".gitconfig"))
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}
