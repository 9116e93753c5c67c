package svc_test

import (
	"crypto/rand"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/egress/svc"
	"github.com/choirhq/choir/internal/gittest"
)

// gitToken is the token choird holds for the git identities.
const gitToken = "ghp-choird-held"

// gitBundle is a testBundle with a git remote, ada's gateway, and a HOME
// whose git reaches the remote through ada's route.
type gitBundle struct {
	*testBundle
	up   *gittest.Server
	gw   *httptest.Server
	home string
}

// gitSetup is setup with an HTTPS git remote holding team/app.git,
// team/tools.git and else/app.git, which ada's identity (ada-git) and
// bob's (bob-git) may reach on team/* only; the handler trusts the
// remote's certificate. ada's HOME sends every request for the remote to
// the gateway's route for ada-git, as the agent's global git
// configuration does.
func gitSetup(t *testing.T) *gitBundle {
	t.Helper()
	b := setup(t)
	up := gittest.NewServer(t, gitToken)
	for _, repo := range []string{"team/app.git", "team/tools.git", "else/app.git"} {
		up.Init(t, repo)
	}
	b.setConfig(func(c *config.Config) {
		c.GitIdentities = map[string]config.GitIdentity{}
		for _, id := range []string{"ada-git", "bob-git"} {
			c.GitIdentities[id] = config.GitIdentity{Name: id, Email: id + "@choir.local", Secret: "git-key",
				Hosts: []string{"git.example.com", up.Host()}, Repos: []string{"team/*"}}
		}
	})
	b.h = svc.New(svc.Options{Pool: b.pool, Config: b.config, Ledger: b.ledger, Transport: up.Transport()})
	g := &gitBundle{testBundle: b, up: up, gw: b.gateway(t, "ada"), home: t.TempDir()}
	gittest.Git(t, g.home, "config", "--global", "url."+g.gw.URL+svc.GitPrefix+"ada-git/"+up.Host()+"/.insteadOf",
		"https://"+up.Host()+"/")
	return g
}

// TestGitPushAndCloneThroughTheRoute pushes a commit (with two megabytes
// of random data, more than git's http.postBuffer, so that git streams
// the pack in chunks) and clones it back with a real git through ada's
// route: the pack reaches the remote still in chunks (the route streams
// it, never holding it whole), the remote sees the token on every
// request, and git's side (its configuration, its output) never holds it.
func TestGitPushAndCloneThroughTheRoute(t *testing.T) {
	t.Parallel()
	g := gitSetup(t)
	up, home := g.up, g.home
	ws := filepath.Join(home, "ws")
	var out strings.Builder
	out.WriteString(gittest.Git(t, home, "clone", "--quiet", up.URL("team/app.git"), ws))
	blob := make([]byte, 2<<20)
	rand.Read(blob)
	if err := os.WriteFile(filepath.Join(ws, "blob.bin"), blob, 0o600); err != nil {
		t.Fatal(err)
	}
	out.WriteString(gittest.Git(t, home, "-C", ws, "add", "blob.bin"))
	out.WriteString(gittest.Git(t, home, "-C", ws, "commit", "--quiet", "-m", "through the gateway"))
	out.WriteString(gittest.Git(t, home, "-C", ws, "push", "--quiet", "origin", "HEAD:refs/heads/main"))
	if got := up.Log(t, "team/app.git", "main"); got != "through the gateway" {
		t.Fatalf("the push did not arrive: log %q", got)
	}
	back := filepath.Join(home, "back")
	out.WriteString(gittest.Git(t, home, "clone", "--quiet", up.URL("team/app.git"), back))
	if got, _ := os.ReadFile(filepath.Join(back, "blob.bin")); string(got) != string(blob) {
		t.Errorf("the clone's blob.bin differs from the pushed one (%d bytes)", len(got))
	}
	cfg, _ := os.ReadFile(filepath.Join(home, ".gitconfig"))
	out.Write(cfg)
	b64 := base64.StdEncoding.EncodeToString([]byte(gittest.Username + ":" + gitToken))
	if s := out.String(); strings.Contains(s, gitToken) || strings.Contains(s, b64) {
		t.Errorf("git's side holds the token:\n%s", s)
	}
	reqs := up.Requests()
	var posts int
	streamed := false
	for _, r := range reqs {
		if !r.Authorized {
			t.Errorf("%s %s reached the remote without the token (Authorization %q)", r.Method, r.Path, r.Authorization)
		}
		if r.Method == http.MethodPost {
			posts++
		}
		streamed = streamed || r.Path == "/team/app.git/git-receive-pack" && r.Chunked
	}
	if !streamed {
		t.Errorf("the pushed pack did not reach the remote in chunks: %+v", reqs)
	}
	if posts < 3 {
		t.Errorf("the remote saw %d POSTs, want the first clone's, the push's and the second clone's: %+v", posts, reqs)
	}
}

// TestGitRouteRefuses refuses, before the remote sees anything, another
// session's identity, a host or repository the identity may not reach,
// and every request that is not one of git's smart-HTTP requests; a
// refusal says why, in the text git shows its user.
func TestGitRouteRefuses(t *testing.T) {
	t.Parallel()
	g := gitSetup(t)
	up, gw := g.up, g.gw
	route := gw.URL + svc.GitPrefix + "ada-git/" + up.Host() + "/"
	refs := "/info/refs?service=git-upload-pack"
	for _, tc := range []struct {
		name, method, url string
		status            int
		why               string
	}{
		{"AnotherSessionsIdentity", "GET", gw.URL + svc.GitPrefix + "bob-git/" + up.Host() + "/team/app.git" + refs, 403,
			"git identity bob-git is not yours: agent ada's session is bound to ada-git"},
		{"UnknownIdentity", "GET", gw.URL + svc.GitPrefix + "eve-git/" + up.Host() + "/team/app.git" + refs, 404,
			`no git identity "eve-git"`},
		{"HostNotAllowed", "GET", gw.URL + svc.GitPrefix + "ada-git/evil.example.com/team/app.git" + refs, 403,
			"host evil.example.com is not allowed: git identity ada-git may reach git.example.com, " + up.Host()},
		{"RepositoryNotAllowed", "GET", route + "else/app.git" + refs, 403,
			"repository else/app is not allowed: git identity ada-git may reach team/*"},
		{"ReceivePackNotAllowed", "POST", route + "else/app.git/git-receive-pack", 403, "repository else/app is not allowed"},
		{"NotGit", "GET", route + "team/app.git/HEAD", 404, "not a git smart-HTTP request"},
		{"API", "GET", route + "api/user", 404, "not a git smart-HTTP request"},
		{"OtherService", "GET", route + "team/app.git/info/refs?service=git-upload-archive", 404, "not a git smart-HTTP request"},
		{"DumbHTTP", "GET", route + "team/app.git/info/refs", 404, "not a git smart-HTTP request"},
		{"PostToRefs", "POST", route + "team/app.git" + refs, 404, "not a git smart-HTTP request"},
		{"GetPack", "GET", route + "team/app.git/git-upload-pack", 404, "not a git smart-HTTP request"},
		{"DotSegments", "GET", route + "team/../else/app.git" + refs, 404, "not a git smart-HTTP request"},
		{"EncodedSlash", "GET", route + "team%2F..%2Felse/app.git" + refs, 404, "not a git smart-HTTP request"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(tc.method, tc.url, nil)
			res, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer res.Body.Close()
			body, _ := io.ReadAll(res.Body)
			if res.StatusCode != tc.status || !strings.Contains(string(body), tc.why) ||
				!strings.HasPrefix(res.Header.Get("Content-Type"), "text/plain") {
				t.Errorf("%d %q (%s), want %d saying %q", res.StatusCode, body, res.Header.Get("Content-Type"), tc.status, tc.why)
			}
		})
	}
	if reqs := up.Requests(); len(reqs) != 0 {
		t.Errorf("refused requests reached the remote: %+v", reqs)
	}
}

// TestGitRefusedPushSaysWhy pushes with a real git to a repository the
// identity may not reach: the push fails, and git's output names the
// reason.
func TestGitRefusedPushSaysWhy(t *testing.T) {
	t.Parallel()
	g := gitSetup(t)
	up, home := g.up, g.home
	ws := filepath.Join(home, "ws")
	gittest.Git(t, home, "clone", "--quiet", up.URL("team/app.git"), ws)
	gittest.Git(t, home, "-C", ws, "commit", "--quiet", "--allow-empty", "-m", "elsewhere")
	out, err := gittest.Run(home, "-C", ws, "push", up.URL("else/app.git"), "HEAD:refs/heads/main")
	if err == nil || !strings.Contains(out, "repository else/app is not allowed: git identity ada-git may reach team/*") {
		t.Errorf("push to else/app: %v\n%s", err, out)
	}
	for _, r := range up.Requests() {
		if strings.HasPrefix(r.Path, "/else/") {
			t.Errorf("the refused push reached the remote: %s %s", r.Method, r.Path)
		}
	}
}
