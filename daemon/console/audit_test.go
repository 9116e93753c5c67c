package console_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// TestAuditPageFiltersToolCalls lists an agent's tool calls (one that
// succeeded, one that failed, one refused by the untrusted-input policy)
// and narrows them by tool and outcome; each links into the session's
// replay at its revision.
func TestAuditPageFiltersToolCalls(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.d.StandIn(t, "assistant", admin.StartOverrides{})
	for _, c := range []struct {
		id, tool, status, err string
	}{{"c1", "web.fetch", "success", ""}, {"c2", "choir.exec", "error", "exit status 2"}} {
		a.AppendOn(t, "core:research", rpc.EventToolCallCommitted, map[string]any{"call_id": c.id, "tool": c.tool,
			"input": map[string]any{"n": 1}, "locks": []string{}, "sources": []string{"web:https://evil.example/"}})
		a.AppendOn(t, "core:research", rpc.EventToolResultCommitted, map[string]any{"call_id": c.id, "tool": c.tool,
			"status": c.status, "duration_ms": 42, "error": c.err})
	}
	a.Append(t, rpc.EventToolCallRequested, map[string]any{"call_id": "c3", "tool": "email.send", "status": "rejected",
		"policy": "refused", "error": "the lane read web:https://evil.example/", "input": map[string]any{}})
	c, _ := b.loggedIn(t)

	code, page := body(t, c, b.url+"/audit")
	if code != http.StatusOK || strings.Count(page, `<tr class="outcome-`) != 3 {
		t.Fatalf("audit: HTTP %d\n%s", code, page)
	}
	for _, want := range []string{
		`<tr class="outcome-error"><td><a href="/sessions/` + a.SessionID + `?from=3">`,
		"<td>choir.exec</td><td>error</td><td></td><td>42 ms</td><td>exit status 2</td>",
		"<td>email.send</td><td>rejected</td><td>refused</td><td></td><td>the lane read web:https://evil.example/</td>",
		`[&#34;web:https://evil.example/&#34;]`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("audit lacks %q", want)
		}
	}
	for _, tc := range []struct {
		query string
		rows  int
		has   string
	}{
		{"?tool=web.fetch", 1, "<td>web.fetch</td><td>success</td>"},
		{"?outcome=rejected&agent=assistant", 1, "<td>email.send</td>"},
		{"?agent=helper", 0, "No tool call matches."},
		{"?since=2000-01-01&until=2000-01-02", 0, "No tool call matches."},
	} {
		code, page := body(t, c, b.url+"/audit"+tc.query)
		if code != http.StatusOK || strings.Count(page, `<tr class="outcome-`) != tc.rows || !strings.Contains(page, tc.has) {
			t.Errorf("audit%s: HTTP %d, want %d rows with %q\n%s", tc.query, code, tc.rows, tc.has, page)
		}
	}
	for _, tc := range []struct{ query, says string }{
		{"?since=yesterday", "want a time like 2026-11-29"},
		{"?limit=9999", "limit must be 1 to 2000"},
		{"?since=2026-11-02&until=2026-11-01", "must come before until"},
		{"?agent=nobody", `Not found: unknown resource: agent &#34;nobody&#34; is not in config.json`},
	} {
		if code, page := body(t, c, b.url+"/audit"+tc.query); code == http.StatusOK || !strings.Contains(page, tc.says) {
			t.Errorf("audit%s: HTTP %d, want a refusal saying %q\n%s", tc.query, code, tc.says, page)
		}
	}
}
