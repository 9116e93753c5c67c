package sql_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/choirhq/choir/db"
)

// TestAuditToolCallsListRefusals checks that choir_audit.tool_calls shows
// the calls that never ran (refused by the arbiter, or abandoned before
// their locks) beside those that ran, with why.
func TestAuditToolCallsListRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.agent(t, "alpha")
	s := b.session(t, "alpha")
	payloads := []struct{ typ, payload string }{
		{"tool_call_committed", `{"call_id":"ok","tool":"choir.fs.read","input":{"path":"a.go"},"locks":["file:a.go:S"]}`},
		{"tool_result_committed", `{"call_id":"ok","tool":"choir.fs.read","status":"success","duration_ms":7}`},
		{"tool_call_requested", `{"call_id":"esc","tool":"choir.fs.read","input":{"path":"../../etc/passwd"},"status":"rejected",
		  "rejection":{"error":"path_escape","message":"path ../../etc/passwd escapes the workspace","tool":"choir.fs.read"}}`},
		{"tool_call_requested", `{"call_id":"forbid","tool":"choir.fs.write","input":{},"status":"rejected",
		  "rejection":{"error":"tool_not_allowed","message":"choir.fs.write is not available to the edge lane","tool":"choir.fs.write"}}`},
		{"tool_call_requested", `{"call_id":"skill","tool":"choir.skill.transition","input":{"on":"x"},"status":"rejected",
		  "rejection":{"skill":"review","kind":"invalid_transition","message":"no transition x from work"}}`},
		{"tool_call_requested", `{"call_id":"gone","tool":"choir.fs.read","input":{"path":"b.go"},"status":"abandoned","error":"context canceled"}`},
	}
	var evs []db.EventsAppendParams
	prev := genesis
	for i, p := range payloads {
		rev := int64(i + 1)
		hash := chain(prev, rev)
		evs = append(evs, db.EventsAppendParams{SessionID: s.SessionID, CreatedAt: time.Now(), Rev: rev, EventType: p.typ, Lane: "edge",
			HashPrev: prev, Hash: hash, Payload: json.RawMessage(p.payload)})
		prev = hash
	}
	if _, err := b.q.EventsAppend(ctx, evs); err != nil {
		t.Fatal(err)
	}

	rows, err := b.pool.Query(ctx, `SELECT call_id, tool, outcome, coalesce(error, ''), duration_ms, finished_at IS NULL, call_rev
	                                  FROM choir_audit.tool_calls WHERE agent_id = 'alpha' ORDER BY call_rev`)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		callID, tool, outcome, error string
		duration                     *int64
		unfinished                   bool
		rev                          int64
	}
	var got []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.callID, &r.tool, &r.outcome, &r.error, &r.duration, &r.unfinished, &r.rev); err != nil {
			t.Fatal(err)
		}
		got = append(got, r)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	seven := int64(7)
	want := []row{
		{"ok", "choir.fs.read", "success", "", &seven, false, 1},
		{"esc", "choir.fs.read", "rejected", "path_escape: path ../../etc/passwd escapes the workspace", nil, true, 3},
		{"forbid", "choir.fs.write", "rejected", "tool_not_allowed: choir.fs.write is not available to the edge lane", nil, true, 4},
		{"skill", "choir.skill.transition", "rejected", "invalid_transition: no transition x from work", nil, true, 5},
		{"gone", "choir.fs.read", "abandoned", "context canceled", nil, true, 6},
	}
	if !slices.EqualFunc(got, want, func(a, b row) bool {
		return a.callID == b.callID && a.tool == b.tool && a.outcome == b.outcome && a.error == b.error &&
			(a.duration == nil) == (b.duration == nil) && (a.duration == nil || *a.duration == *b.duration) &&
			a.unfinished == b.unfinished && a.rev == b.rev
	}) {
		t.Errorf("tool_calls:\n got %+v\nwant %+v", got, want)
	}
}

// TestAuditInboxWaiting checks that choir_audit.inbox_waiting lists every
// kind of row still to be delivered to an agent (messages, injections,
// scheduled messages and new mail), and neither delivered ones nor the
// rows that are never delivered: a command's once-only record and a
// message for no agent.
func TestAuditInboxWaiting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.agent(t, "alpha")
	alpha := "alpha"
	insert := func(update int64, kind string, agentID *string) int64 {
		t.Helper()
		r, err := b.q.InboxInsert(ctx, db.InboxInsertParams{Gateway: "tg", UpdateID: update, Dm: "owner", AgentID: agentID,
			ChatID: "1", UserID: "1", Kind: kind, Text: "x", Attachments: json.RawMessage(`[]`)})
		if err != nil {
			t.Fatal(err)
		}
		return r.InboxID
	}
	waiting := insert(1, "message", &alpha)
	inject := insert(2, "inject", &alpha)
	delivered := insert(3, "message", &alpha)
	insert(4, "command", nil)
	insert(5, "message", nil)
	scheduled := insert(6, "scheduled", &alpha)
	mail := insert(7, "mail", &alpha)
	if _, err := b.pool.Exec(ctx, "UPDATE choir_control.inbox SET delivered_at = now() WHERE inbox_id = $1", delivered); err != nil {
		t.Fatal(err)
	}

	rows, err := b.pool.Query(ctx, "SELECT inbox_id FROM choir_audit.inbox_waiting ORDER BY inbox_id")
	if err != nil {
		t.Fatal(err)
	}
	var got []int64
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		got = append(got, id)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := []int64{waiting, inject, scheduled, mail}; !slices.Equal(got, want) {
		t.Errorf("inbox_waiting = %v, want %v (the undelivered message, injection, scheduled message and mail only)", got, want)
	}
}
