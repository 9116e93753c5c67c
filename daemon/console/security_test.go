package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestConsoleSecurity: nothing but the login link and the static files
// answers without a session; a one-time link logs in once, and not after
// its minute; a POST needs the session's CSRF token and a same-origin
// request; an expired or revoked session is refused; a decision made in
// the console is recorded as console:<session> in the audit view; a
// regular DM has no way in.
func TestConsoleSecurity(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	pool := b.d.OwnPool(t)
	a := b.d.StandIn(t, "assistant", admin.StartOverrides{})

	t.Run("NoSessionNoPage", func(t *testing.T) {
		t.Parallel()
		anon := client(t)
		id := uuid.NewString()
		for _, p := range []string{"/", "/approvals", "/approvals/" + id, "/events", "/sessions", "/sessions/" + id, "/usage", "/usage.csv", "/audit", "/nowhere"} {
			if code, page := body(t, anon, b.url+p); code != http.StatusUnauthorized || !strings.Contains(page, "choirctl console") {
				t.Errorf("GET %s without a session: HTTP %d\n%s", p, code, page)
			}
		}
		for _, p := range []string{"/approvals/" + id + "/decide", "/logout"} {
			if resp := b.post(t, anon, p, url.Values{"decision": {"approve"}}, nil); resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("POST %s without a session: HTTP %d", p, resp.StatusCode)
			}
		}
		// A made-up cookie is no session either.
		u, _ := url.Parse(b.url)
		anon.Jar.SetCookies(u, []*http.Cookie{{Name: "choir_console", Value: "forged"}})
		if code, _ := body(t, anon, b.url+"/"); code != http.StatusUnauthorized {
			t.Errorf("forged cookie: HTTP %d", code)
		}
		if code, _ := body(t, anon, b.url+"/static/console.js"); code != http.StatusOK {
			t.Errorf("static script: HTTP %d", code)
		}
	})

	t.Run("OneTimeLinkWorksOnce", func(t *testing.T) {
		t.Parallel()
		link := b.link(t)
		if resp := get(t, client(t), link); resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("first use: HTTP %d", resp.StatusCode)
		}
		if resp := get(t, client(t), link); resp.StatusCode != http.StatusUnauthorized || len(resp.Cookies()) != 0 {
			t.Errorf("replayed link: HTTP %d, cookies %v", resp.StatusCode, resp.Cookies())
		}
		if resp := get(t, client(t), b.url+"/login?token=made-up"); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("made-up token: HTTP %d", resp.StatusCode)
		}
	})

	t.Run("ExpiredLinkRefused", func(t *testing.T) {
		t.Parallel()
		link := b.link(t)
		token := strings.TrimPrefix(link, b.url+"/login?token=")
		if _, err := pool.Exec(ctx, `UPDATE choir_control.console_tokens SET expires_at = now() - interval '1 second'
			WHERE token_hash = $1`, login.Hash(token)); err != nil {
			t.Fatal(err)
		}
		if resp := get(t, client(t), link); resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("expired link: HTTP %d", resp.StatusCode)
		}
	})

	t.Run("CrossSitePostRefused", func(t *testing.T) {
		t.Parallel()
		c, ck := b.loggedIn(t)
		id := choirdtest.RequestApproval(t, a, "cross site")
		csrf := b.csrf(t, c)
		path := "/approvals/" + id + "/decide"
		for name, tc := range map[string]struct {
			form url.Values
			hdr  map[string]string
		}{
			"NoToken":         {url.Values{"decision": {"approve"}}, nil},
			"WrongToken":      {url.Values{"decision": {"approve"}, "csrf": {"x" + csrf}}, nil},
			"CrossSite":       {url.Values{"decision": {"approve"}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "cross-site"}},
			"UserTyped":       {url.Values{"decision": {"approve"}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "none"}},
			"SameSiteOther":   {url.Values{"decision": {"approve"}, "csrf": {csrf}}, map[string]string{"Sec-Fetch-Site": "same-site"}},
			"ForeignOrigin":   {url.Values{"decision": {"approve"}, "csrf": {csrf}}, map[string]string{"Origin": "http://evil.example"}},
			"NullOrigin":      {url.Values{"decision": {"approve"}, "csrf": {csrf}}, map[string]string{"Origin": "null"}},
			"OtherPortOrigin": {url.Values{"decision": {"approve"}, "csrf": {csrf}}, map[string]string{"Origin": "http://127.0.0.1:1"}},
		} {
			if resp := b.post(t, c, path, tc.form, tc.hdr); resp.StatusCode != http.StatusForbidden {
				t.Errorf("%s: HTTP %d, want 403", name, resp.StatusCode)
			}
		}
		if got, err := b.d.Approvals().Show(ctx, control.Scope{Admin: true, Actor: "test"}, id); err != nil || got.Status != "pending" {
			t.Fatalf("after refused posts: %+v, %v", got, err)
		}
		resp := b.post(t, c, path, url.Values{"decision": {"reject"}, "csrf": {csrf}},
			map[string]string{"Origin": b.url, "Sec-Fetch-Site": "same-origin"})
		if resp.StatusCode != http.StatusSeeOther {
			t.Fatalf("same-origin POST: HTTP %d", resp.StatusCode)
		}
		actor := b.actorOf(t, ck)
		var by, status string
		if err := pool.QueryRow(ctx, `SELECT resolved_by, status FROM choir_audit.approvals WHERE approval_id = $1`, id).Scan(&by, &status); err != nil {
			t.Fatal(err)
		}
		if by != actor || status != "rejected" {
			t.Errorf("audit view: %s by %q, want rejected by %q", status, by, actor)
		}
		var createdBy string
		if err := pool.QueryRow(ctx, `SELECT created_by FROM choir_audit.console_sessions WHERE actor = $1`, actor).Scan(&createdBy); err != nil ||
			!strings.HasPrefix(createdBy, "choirctl") {
			t.Errorf("choir_audit.console_sessions: %s was created by %q, %v", actor, createdBy, err)
		}
		// A second decision says who won, and changes nothing.
		if code, page := b.postBody(t, c, path, url.Values{"decision": {"approve"}, "csrf": {csrf}}); code != http.StatusConflict ||
			!strings.Contains(page, "already rejected by "+actor) {
			t.Errorf("second decision: HTTP %d\n%s", code, page)
		}
	})

	t.Run("UnknownApprovalNotFound", func(t *testing.T) {
		t.Parallel()
		c, _ := b.loggedIn(t)
		for _, id := range []string{uuid.NewString(), "not-an-id"} {
			if code, page := body(t, c, b.url+"/approvals/"+id); code != http.StatusNotFound {
				t.Errorf("approval %s: HTTP %d\n%s", id, code, page)
			}
		}
	})

	t.Run("ExpiredSessionRefused", func(t *testing.T) {
		t.Parallel()
		c, ck := b.loggedIn(t)
		if code, _ := body(t, c, b.url+"/"); code != http.StatusOK {
			t.Fatalf("signed in: HTTP %d", code)
		}
		if _, err := pool.Exec(ctx, `UPDATE choir_control.console_sessions SET expires_at = now() - interval '1 second'
			WHERE secret_hash = $1`, login.Hash(ck.Value)); err != nil {
			t.Fatal(err)
		}
		if code, _ := body(t, c, b.url+"/"); code != http.StatusUnauthorized {
			t.Errorf("expired session: HTTP %d", code)
		}
	})

	t.Run("RevokedSessionRefused", func(t *testing.T) {
		t.Parallel()
		c, ck := b.loggedIn(t)
		actor := b.actorOf(t, ck)
		prefix := strings.TrimPrefix(actor, login.ActorPrefix)
		if _, err := adminClient(b).ConsoleSessionRevoke(ctx, prefix[:4]); err == nil {
			t.Error("a revoke by 4 characters was accepted")
		}
		r, err := adminClient(b).ConsoleSessionRevoke(ctx, prefix)
		if err != nil || len(r.Revoked) != 1 || !strings.HasPrefix(r.Revoked[0], prefix) {
			t.Fatalf("revoke: %+v, %v", r, err)
		}
		if code, _ := body(t, c, b.url+"/"); code != http.StatusUnauthorized {
			t.Errorf("revoked session: HTTP %d", code)
		}
		list, err := adminClient(b).ConsoleSessions(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var found bool
		for _, s := range list {
			if strings.HasPrefix(s.ID, prefix) {
				found = s.RevokedAt != nil && strings.HasPrefix(s.RevokedBy, "choirctl")
			}
		}
		if !found {
			t.Errorf("the session is not listed as revoked by choirctl: %+v", list)
		}
		code, out, errOut := choirctltest.Run(t, b.d.Home, "console", "sessions")
		if code != 0 || !regexp.MustCompile(`(?m)^`+prefix+` +revoked `).MatchString(out) {
			t.Errorf("choirctl console sessions: exit %d\n%s%s", code, out, errOut)
		}
		if code, out, errOut := choirctltest.Run(t, b.d.Home, "console", "sessions", "revoke", prefix); code == 0 ||
			!strings.Contains(errOut, "no live console session") {
			t.Errorf("revoking it again: exit %d\n%s%s", code, out, errOut)
		}
	})

	t.Run("LogoutEndsSession", func(t *testing.T) {
		t.Parallel()
		c, _ := b.loggedIn(t)
		if resp := b.post(t, c, "/logout", url.Values{"csrf": {b.csrf(t, c)}}, nil); resp.StatusCode != http.StatusOK {
			t.Fatalf("logout: HTTP %d", resp.StatusCode)
		}
		if code, _ := body(t, c, b.url+"/"); code != http.StatusUnauthorized {
			t.Errorf("after logout: HTTP %d", code)
		}
	})

	// Not parallel: it counts every token in the database, which the
	// parallel subtests' logins add to (they wait until this one ends).
	t.Run("RegularDMHasNoWayIn", func(t *testing.T) {
		cmds := b.d.NewCommands(func(context.Context, gateway.Command, string) {})
		var before, after int
		pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.console_tokens`).Scan(&before)
		for _, text := range []string{"/console", "/console sessions", "/login"} {
			name, args, rest, _ := gateway.ParseCommand(text, "")
			reply, _ := cmds.Command(ctx, gateway.Command{DM: gateway.DM{Gateway: "console", Name: "alice", UserID: "alice"},
				UpdateID: 1, ChatID: "alice", MessageID: 1, Name: name, Args: args, Text: rest})
			if strings.Contains(reply, "token=") || strings.Contains(reply, b.url) {
				t.Errorf("%s from a regular DM gave a link: %q", text, reply)
			}
		}
		pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.console_tokens`).Scan(&after)
		if after != before {
			t.Errorf("a regular DM's commands issued %d console tokens", after-before)
		}
	})
}

// postBody posts a same-origin form and returns the status and page.
func (b *testBundle) postBody(t *testing.T, c *http.Client, path string, form url.Values) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, b.url+path, strings.NewReader(form.Encode()))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	if _, err := io.Copy(&sb, resp.Body); err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, sb.String()
}
