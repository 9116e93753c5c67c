package console_test

import (
	"context"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/console"
	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// testBundle is a choird serving the console on a free port, with the
// two agents of the shared end-to-end configuration and a regular DM,
// alice, bound to assistant.
type testBundle struct {
	d   *choirdtest.Choird
	url string
}

func setup(t testing.TB) *testBundle {
	t.Helper()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(c *config.Config, _ config.Secrets) {
		choirdtest.FastHeartbeat(c, nil)
		c.Console = &config.Console{Listen: "127.0.0.1:0"}
		c.DMs["alice"] = config.DM{Gateway: "console", UserID: "alice"}
		a := c.Agents["assistant"]
		a.Defaults.DM = "alice"
		c.Agents["assistant"] = a
	}})
	if d.ConsoleURL() == "" {
		t.Fatal("choird serves no console")
	}
	return &testBundle{d: d, url: d.ConsoleURL()}
}

// link runs choirctl console and returns the link it printed.
func (b *testBundle) link(t testing.TB) string {
	t.Helper()
	code, out, errOut := choirctltest.Run(t, b.d.Home, "console")
	if code != 0 {
		t.Fatalf("choirctl console: exit %d: %s", code, errOut)
	}
	link := regexp.MustCompile(`https?://\S+`).FindString(out)
	if !strings.HasPrefix(link, b.url+"/login?token=") {
		t.Fatalf("choirctl console printed %q; want a link into %s", out, b.url)
	}
	return link
}

// client is a browser-like client that keeps cookies and does not follow
// redirects, so that each answer is seen.
func client(t testing.TB) *http.Client {
	t.Helper()
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// loggedIn returns a client with a console session, and the session's
// cookie.
func (b *testBundle) loggedIn(t testing.TB) (*http.Client, *http.Cookie) {
	t.Helper()
	c := client(t)
	resp := get(t, c, b.link(t))
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/" {
		t.Fatalf("login link: HTTP %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	var ck *http.Cookie
	for _, k := range resp.Cookies() {
		if k.Name == console.CookieName {
			ck = k
		}
	}
	if ck == nil || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || ck.Secure {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, not Secure without TLS", ck)
	}
	return c, ck
}

func get(t testing.TB, c *http.Client, u string) *http.Response {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	checkHeaders(t, u, resp)
	return resp
}

// body GETs u and returns its status and body.
func body(t testing.TB, c *http.Client, u string) (int, string) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	checkHeaders(t, u, resp)
	return resp.StatusCode, string(b)
}

// post sends a form to path with the given extra headers.
func (b *testBundle) post(t testing.TB, c *http.Client, path string, form url.Values, hdr map[string]string) *http.Response {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	checkHeaders(t, path, resp)
	return resp
}

func checkHeaders(t testing.TB, what string, resp *http.Response) {
	t.Helper()
	h := resp.Header
	if h.Get("Content-Security-Policy") != console.CSP || h.Get("X-Content-Type-Options") != "nosniff" ||
		h.Get("Referrer-Policy") != "no-referrer" {
		t.Errorf("%s: security headers missing: %v", what, h)
	}
}

// csrf reads the CSRF token from a signed-in page.
func (b *testBundle) csrf(t testing.TB, c *http.Client) string {
	t.Helper()
	_, page := body(t, c, b.url+"/approvals")
	m := regexp.MustCompile(`name="csrf" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil {
		t.Fatalf("no CSRF token on the page:\n%s", page)
	}
	return m[1]
}

// actorOf is the audit actor of the session whose cookie this is.
func (b *testBundle) actorOf(t testing.TB, ck *http.Cookie) string {
	t.Helper()
	var id string
	if err := b.d.OwnPool(t).QueryRow(context.Background(),
		`SELECT session_id::text FROM choir_control.console_sessions WHERE secret_hash = $1`, login.Hash(ck.Value)).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return login.ActorPrefix + id[:login.PrefixLen]
}

func adminClient(b *testBundle) *admin.Client { return admin.NewClient(admin.SocketPath(b.d.Home)) }
