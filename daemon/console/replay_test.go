package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestReplayPageVerifiesTheChain opens a session's replay in the
// console: its events on their lanes' tracks, the chain verified, pages
// linked; then an event rewritten with SQL, as an intruder would, shows
// as the break it is.
func TestReplayPageVerifiesTheChain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.d.StandIn(t, "assistant", admin.StartOverrides{})
	for _, e := range choirdtest.ReplayEvents {
		a.AppendOn(t, e.Lane, e.Type, json.RawMessage(e.Payload))
	}
	c, _ := b.loggedIn(t)

	code, page := body(t, c, b.url+"/sessions")
	if code != http.StatusOK || !strings.Contains(page, `<a href="/sessions/`+a.SessionID+`">`) {
		t.Fatalf("sessions: HTTP %d\n%s", code, page)
	}
	code, page = body(t, c, b.url+"/sessions/"+a.SessionID)
	for _, want := range []string{
		`<p class="chain-ok" id="chain">Hash chain verified for revisions 1 to 10:`,
		"<th>edge</th><th>core:research</th>",
		"local · 1200 prompt &#43; 80 completion tokens · $0.0123 · tools deferred (640 schema tokens)",
		`web.search → ok · {&#34;results&#34;:[&#34;Riga Cathedral Choir&#34;]}`,
	} {
		if code != http.StatusOK || !strings.Contains(page, want) {
			t.Errorf("replay: HTTP %d: no %q in\n%s", code, want, page)
		}
	}
	// The tool call sits on the core job's track, the second column of
	// the lanes.
	row := page[strings.Index(page, `<tr id="rev-4">`):]
	row = row[:strings.Index(row, "</tr>")]
	if cells := strings.Split(row, "<td>"); len(cells) != 5 || strings.TrimSpace(cells[3]) != "</td>" ||
		!strings.Contains(cells[4], "tool_call_committed") {
		t.Errorf("rev 4 is not on the core job's track: %s", row)
	}

	code, page = body(t, c, b.url+"/sessions/"+a.SessionID+"?from=4&limit=3")
	if code != http.StatusOK || !strings.Contains(page, "verified for revisions 4 to 6") ||
		!strings.Contains(page, `href="/sessions/`+a.SessionID+`?from=7&amp;limit=3" id="later"`) ||
		!strings.Contains(page, `href="/sessions/`+a.SessionID+`?from=1&amp;limit=3" id="earlier"`) ||
		strings.Contains(page, `id="rev-7"`) {
		t.Errorf("a middle page: HTTP %d\n%s", code, page)
	}

	pool := b.d.OwnPool(t)
	for _, sql := range []string{
		`ALTER TABLE choir_control.session_events DISABLE TRIGGER session_events_immutable`,
		`UPDATE choir_control.session_events SET payload = '{"text":"The Riga Cathedral Choir never sings."}'
		  WHERE session_id = '` + a.SessionID + `' AND rev = 8`,
		`ALTER TABLE choir_control.session_events ENABLE TRIGGER session_events_immutable`,
	} {
		if _, err := pool.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	code, page = body(t, c, b.url+"/sessions/"+a.SessionID)
	if code != http.StatusOK || !strings.Contains(page, `id="chain" role="alert">Hash chain BROKEN at revision 8:`) ||
		!strings.Contains(page, `<tr id="rev-8" class="broken">`) || strings.Count(page, `class="broken"`) != 1 ||
		!strings.Contains(page, "does not match its contents") {
		t.Errorf("forged event: HTTP %d\n%s", code, page)
	}

	for _, tc := range []struct {
		path string
		code int
		says string
	}{
		{"/sessions/not-a-session", http.StatusBadRequest, "is no session id"},
		{"/sessions/" + a.SessionID + "?from=x", http.StatusBadRequest, "?from=&#34;x&#34; is no number"},
		{"/sessions/" + a.SessionID + "?limit=5000", http.StatusBadRequest, "--limit must be 1 to 1000"},
		{"/sessions/" + uuid.NewString(), http.StatusNotFound, "no session"},
	} {
		if code, page := body(t, c, b.url+tc.path); code != tc.code || !strings.Contains(page, tc.says) {
			t.Errorf("GET %s: HTTP %d, want %d saying %q\n%s", tc.path, code, tc.code, tc.says, page)
		}
	}
}
