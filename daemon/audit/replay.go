// Package audit reads, for the operator, what the agents' replicated
// logs and the audit views hold: a session's replay, verified against its
// hash chain as it is read, and the tool calls with their outcomes. The
// admin API (choirctl) and the console read through it alike, with the
// caller's control.Scope.
package audit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Reader reads the logs and the audit views.
type Reader struct {
	Pool    *pgxpool.Pool
	Control *control.Control
}

// SessionReplay reads a page of a session's log and verifies it as it
// goes: every event's hash is computed again from its contents, and its
// hash_prev must be the stored hash of the event before it (for the
// session's first event, the session's base hash). An event altered in
// the table, or removed, or put in out of order, shows as a break at the
// first event it touches. Only the page is read (an index range on the
// session and revision), so a long session opens as fast as a short one.
func (r *Reader) SessionReplay(ctx context.Context, sc control.Scope, in admin.SessionReplayRequest) (admin.SessionReplay, error) {
	if err := in.Validate(); err != nil {
		return admin.SessionReplay{}, err
	}
	sid, err := uuid.Parse(in.SessionID) // checked by Validate
	if err != nil {
		return admin.SessionReplay{}, err
	}
	q := seam.Queries(r.Pool)
	s, err := q.SessionGetByID(ctx, sid)
	if errors.Is(err, choirsql.ErrNotFound) {
		return admin.SessionReplay{}, fmt.Errorf("%w: no session %s (choirctl session list shows them)", choirsql.ErrNotFound, sid)
	}
	if err != nil {
		return admin.SessionReplay{}, fmt.Errorf("load session %s: %w", sid, err)
	}
	sess := session.Of(s)
	if err := sc.AllowSession(sess); err != nil {
		return admin.SessionReplay{}, err
	}
	bounds, err := q.SessionEventRevBounds(ctx, sid)
	if err != nil {
		return admin.SessionReplay{}, fmt.Errorf("read the revisions of session %s: %w", sid, err)
	}
	limit := in.Limit
	if limit == 0 {
		limit = admin.DefaultReplayPage
	}
	from := max(in.From, bounds.FirstRev)
	out := admin.SessionReplay{AgentID: s.AgentID, SessionID: sid.String(), Status: s.Status, StartedAt: s.StartedAt,
		EndedAt: s.EndedAt, FirstRev: bounds.FirstRev, LastRev: bounds.LastRev, From: from, Lanes: []string{},
		Events: []admin.ReplayEvent{}, Verified: true}
	if bounds.LastRev == 0 || from > bounds.LastRev {
		return out, nil
	}
	// One more than the page: whether a next page exists.
	rows, err := q.SessionEventsFrom(ctx, db.SessionEventsFromParams{SessionID: sid, FromRev: from, MaxRows: int32(limit + 1)})
	if err != nil {
		return admin.SessionReplay{}, fmt.Errorf("read the events of session %s: %w", sid, err)
	}
	if len(rows) > limit {
		out.Next, rows = rows[limit].Rev, rows[:limit]
	}
	prev, prevRev, err := replayStart(ctx, q, sess, s.BaseHash, from)
	if err != nil {
		return admin.SessionReplay{}, err
	}
	for _, row := range rows {
		ev := admin.ReplayEvent{Rev: row.Rev, CreatedAt: row.CreatedAt, Lane: row.Lane, Type: row.EventType,
			Summary: replaySummary(row.EventType, row.Payload), Payload: row.Payload}
		ev.Break = verifyEvent(row, prev, prevRev)
		hash, _ := rpc.HashFromBytes(row.Hash)
		prevHash, _ := rpc.HashFromBytes(row.HashPrev)
		ev.Hash, ev.HashPrev = hash.String(), prevHash.String()
		if ev.Break != "" && out.Verified {
			out.Verified, out.FirstBreak = false, row.Rev
		}
		if !slices.Contains(out.Lanes, row.Lane) {
			out.Lanes = append(out.Lanes, row.Lane)
		}
		out.Events = append(out.Events, ev)
		// The next event continues what is stored, so that one altered
		// event shows as one break, not as every event after it.
		prev, prevRev = row.Hash, row.Rev
	}
	slices.SortStableFunc(out.Lanes, func(a, b string) int { return laneOrder(a) - laneOrder(b) })
	return out, nil
}

// replayStart is the hash the event at rev from must continue: the
// session's base hash (baseHash) at its first revision, else the stored
// hash of the event before it.
func replayStart(ctx context.Context, q *db.Queries, s session.Session, baseHash []byte, from int64) ([]byte, int64, error) {
	if from <= s.BaseRev+1 {
		return baseHash, s.BaseRev, nil
	}
	h, err := q.SessionEventHashAt(ctx, db.SessionEventHashAtParams{SessionID: s.ID, Rev: from - 1})
	if errors.Is(err, choirsql.ErrNotFound) {
		return nil, from - 1, nil // a gap: the first event shows it
	}
	if err != nil {
		return nil, 0, fmt.Errorf("read the event before revision %d: %w", from, err)
	}
	return h, from - 1, nil
}

// verifyEvent says why r does not continue the chain at prev (the hash
// of revision prevRev), or "" when it does.
func verifyEvent(r db.SessionEventsFromRow, prev []byte, prevRev int64) string {
	if r.Rev != prevRev+1 {
		return fmt.Sprintf("revision %d follows %d: events are missing", r.Rev, prevRev)
	}
	if prev == nil {
		return fmt.Sprintf("the event before revision %d is missing", r.Rev)
	}
	ev := rpc.Event{Rev: r.Rev, Type: rpc.EventType(r.EventType), Lane: r.Lane, Payload: r.Payload, CreatedAt: r.CreatedAt}
	var err error
	if ev.HashPrev, err = rpc.HashFromBytes(r.HashPrev); err != nil {
		return err.Error()
	}
	if ev.Hash, err = rpc.HashFromBytes(r.Hash); err != nil {
		return err.Error()
	}
	p, err := rpc.HashFromBytes(prev)
	if err != nil {
		return "the previous hash: " + err.Error()
	}
	if err := ev.Verify(p); err != nil {
		return err.Error()
	}
	return ""
}

// laneOrder puts the edge first, then the core jobs, then the system
// lane.
func laneOrder(lane string) int {
	switch {
	case lane == "edge":
		return 0
	case strings.HasPrefix(lane, "core:"):
		return 1
	}
	return 2
}

// replaySummary is an event's one line: what a person reads first.
func replaySummary(typ string, payload json.RawMessage) string {
	var p map[string]any
	if json.Unmarshal(payload, &p) != nil {
		return clip(string(payload))
	}
	str := func(k string) string { s, _ := p[k].(string); return s }
	num := func(k string) float64 { n, _ := p[k].(float64); return n }
	compact := func(k string) string {
		if p[k] == nil {
			return ""
		}
		b, _ := json.Marshal(p[k])
		return string(b)
	}
	var parts []string
	add := func(s string) {
		if s != "" {
			parts = append(parts, s)
		}
	}
	switch rpc.EventType(typ) {
	case rpc.EventLLMCallCommitted:
		add(str("model"))
		add(fmt.Sprintf("%s prompt + %s completion tokens", itoa(num("prompt_tokens")), itoa(num("completion_tokens"))))
		if c := num("cost_usd"); c > 0 {
			add(fmt.Sprintf("$%.4f", c))
		}
		if m := str("tool_mode"); m != "" {
			add(fmt.Sprintf("tools %s (%s schema tokens)", m, itoa(num("tool_schema_tokens"))))
		}
		add(str("purpose"))
		if j := str("job_id"); j != "" {
			add("job " + j)
		}
	case rpc.EventToolCallRequested, rpc.EventToolCallCommitted:
		add(str("tool") + " " + compact("input"))
	case rpc.EventToolResultCommitted:
		add(str("tool") + " → " + str("status"))
		add(str("error"))
		add(compact("output"))
	default:
		for _, k := range []string{"summary", "text", "reason", "job_name", "name", "status", "tool", "model"} {
			add(str(k))
		}
		if len(parts) == 0 {
			add(string(payload))
		}
	}
	return clip(strings.Join(parts, " · "))
}

func itoa(f float64) string { return strconv.FormatInt(int64(f), 10) }

// clip keeps a summary to one line of at most 300 characters.
func clip(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > 300 {
		return string(r[:299]) + "…"
	}
	return s
}
