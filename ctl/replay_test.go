package ctl

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// replayedSession starts a session on a real choird and replicates ten
// events of two lanes through the agent protocol, as an agent does.
func replayedSession(t *testing.T) (*choirdtest.Choird, string) {
	t.Helper()
	c := choirdtest.Start(t, choirdtest.Options{})
	a := c.StandIn(t, "assistant", admin.StartOverrides{})
	for _, e := range choirdtest.ReplayEvents {
		a.AppendOn(t, e.Lane, e.Type, json.RawMessage(e.Payload))
	}
	return c, a.SessionID
}

// TestSessionReplayVerifiesTheChain replays a session through choirctl:
// page by page, each event verified, and an event altered in the table
// afterwards (as an intruder with psql would) shows as the one break,
// with exit status 1.
func TestSessionReplayVerifiesTheChain(t *testing.T) {
	t.Parallel()
	c, id := replayedSession(t)
	code, out, errs := runSessionCommands(c.Home, "session", "replay", id)
	if code != ExitOK || strings.Contains(out, "BREAK") || !strings.Contains(out, "chain verified for revisions 1-10\n") {
		t.Fatalf("replay: exit %d: %s%s", code, out, errs)
	}
	for _, want := range []string{
		"local · 1200 prompt + 80 completion tokens · $0.0123 · tools deferred (640 schema tokens)",
		`web.search {"q":"Riga choir"}`,
		`web.search → ok · {"results":["Riga Cathedral Choir"]}`,
		"core:research", "find me a choir in Riga",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("replay lacks %q:\n%s", want, out)
		}
	}

	code, out, errs = runSessionCommands(c.Home, "session", "replay", id, "--limit", "3")
	if code != ExitOK || !strings.Contains(out, "chain verified for revisions 1-3\n") ||
		!strings.Contains(out, "more: choirctl session replay "+id+" --from 4\n") {
		t.Errorf("first page: exit %d: %s%s", code, out, errs)
	}
	code, out, errs = runSessionCommands(c.Home, "session", "replay", id, "--from", "4", "--limit", "3", "--json")
	var page admin.SessionReplay
	if code != ExitOK || json.Unmarshal([]byte(out), &page) != nil || page.From != 4 || page.Next != 7 || !page.Verified ||
		len(page.Events) != 3 || page.Events[0].Rev != 4 || page.FirstRev != 1 || page.LastRev != 10 ||
		strings.Join(page.Lanes, ",") != "edge,core:research" {
		t.Errorf("second page --json: exit %d: %+v %s", code, page, errs)
	}
	code, out, errs = runSessionCommands(c.Home, "session", "replay", id, "--all", "--limit", "4")
	if code != ExitOK || !strings.Contains(out, "chain verified for revisions 1-10\n") || strings.Contains(out, "more:") ||
		strings.Count(out, "\nok ") != 10 {
		t.Errorf("--all: exit %d: %s%s", code, out, errs)
	}

	// The intruder: the guard trigger off, one message rewritten, the
	// guard back on.
	conn := c.OwnPool(t)
	for _, sql := range []string{
		`ALTER TABLE choir_control.session_events DISABLE TRIGGER session_events_immutable`,
		fmt.Sprintf(`UPDATE choir_control.session_events SET payload = '{"text":"The Riga Cathedral Choir never sings."}'
		  WHERE session_id = '%s' AND rev = 8`, id),
		`ALTER TABLE choir_control.session_events ENABLE TRIGGER session_events_immutable`,
	} {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errs = runSessionCommands(c.Home, "session", "replay", id, "--all", "--limit", "4")
	if code != ExitError || !strings.Contains(out, "chain BROKEN at revision 8\n") || strings.Count(out, "BREAK") != 1 ||
		!strings.Contains(out, "event rev 8: hash ") || !strings.Contains(out, "does not match its contents") ||
		!strings.Contains(errs, "breaks at revision 8") {
		t.Errorf("forged event: exit %d: %s%s", code, out, errs)
	}
	code, out, _ = runSessionCommands(c.Home, "session", "replay", id, "--from", "8", "--json")
	if code != ExitError || json.Unmarshal([]byte(out), &page) != nil || page.Verified || page.FirstBreak != 8 ||
		page.Events[0].Break == "" || page.Events[1].Break != "" {
		t.Errorf("forged event --json: exit %d: %+v", code, page)
	}

	code, _, errs = runSessionCommands(c.Home, "session", "replay", "not-a-session")
	if code != ExitUsage || !strings.Contains(errs, `"not-a-session" is no session id`) {
		t.Errorf("bad id: exit %d: %s", code, errs)
	}
	code, _, errs = runSessionCommands(c.Home, "session", "replay", "00000000-0000-0000-0000-000000000001")
	if code != ExitError || !strings.Contains(errs, "no session 00000000-0000-0000-0000-000000000001") {
		t.Errorf("unknown session: exit %d: %s", code, errs)
	}
	code, _, errs = runSessionCommands(c.Home, "session", "replay", id, "--limit", "5000")
	if code != ExitUsage || !strings.Contains(errs, "--limit must be 1 to 1000") {
		t.Errorf("limit: exit %d: %s", code, errs)
	}
}
