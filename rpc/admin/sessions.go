package admin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/google/uuid"
)

// SessionStatuses are a session's statuses, as choir_control.sessions
// keeps them.
var SessionStatuses = []string{"active", "stopping", "ended", "crashed"}

// MaxSessionsListed caps a session listing.
const MaxSessionsListed = 1000

// SessionListRequest is the body of POST PathSessionList: every filter is
// optional.
type SessionListRequest struct {
	AgentID string `json:"agent_id,omitempty"`
	Status  string `json:"status,omitempty"`
	// Limit is the most sessions listed, newest first (0: 100).
	Limit int `json:"limit,omitempty"`
}

// Validate checks the filters, naming what is wrong and the values that
// would do.
func (r SessionListRequest) Validate() error {
	if r.Status != "" && !slices.Contains(SessionStatuses, r.Status) {
		return fmt.Errorf("unknown session status %q: want one of %v", r.Status, SessionStatuses)
	}
	if r.Limit < 0 || r.Limit > MaxSessionsListed {
		return fmt.Errorf("--limit must be 1 to %d, not %d", MaxSessionsListed, r.Limit)
	}
	return nil
}

// SessionInfo is one session in a listing.
type SessionInfo struct {
	SessionID string     `json:"session_id"`
	AgentID   string     `json:"agent_id"`
	Status    string     `json:"status"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	EndReason string     `json:"end_reason,omitempty"`
	Events    int64      `json:"events"`
}

// SessionList lists sessions, newest first.
func (c *Client) SessionList(ctx context.Context, in SessionListRequest) ([]SessionInfo, error) {
	return call[[]SessionInfo](ctx, c, http.MethodPost, PathSessionList, in)
}

// Bounds of a session replay's page.
const (
	DefaultReplayPage = 200
	MaxReplayPage     = 1000
)

// SessionReplayRequest is the body of POST PathSessionReplay: a page of
// one session's log, from revision From (0: its first).
type SessionReplayRequest struct {
	SessionID string `json:"session_id"`
	From      int64  `json:"from,omitempty"`
	// Limit is the most events on the page (0: DefaultReplayPage).
	Limit int `json:"limit,omitempty"`
}

// Validate checks the request, naming what is wrong and what would do.
func (r SessionReplayRequest) Validate() error {
	if r.SessionID == "" {
		return fmt.Errorf("a replay needs a session id: choirctl session list shows them")
	}
	if _, err := uuid.Parse(r.SessionID); err != nil {
		return fmt.Errorf("%q is no session id: choirctl session list shows them", r.SessionID)
	}
	if r.From < 0 {
		return fmt.Errorf("--from must be a revision, 1 or more, not %d", r.From)
	}
	if r.Limit < 0 || r.Limit > MaxReplayPage {
		return fmt.Errorf("--limit must be 1 to %d, not %d", MaxReplayPage, r.Limit)
	}
	return nil
}

// SessionReplay is a page of a session's log, each event checked
// against the hash chain: its hash recomputed from its contents, and its
// hash_prev against its predecessor's stored hash (or, for the session's
// first event, the session's base hash).
type SessionReplay struct {
	AgentID   string     `json:"agent_id"`
	SessionID string     `json:"session_id"`
	Status    string     `json:"status"`
	StartedAt time.Time  `json:"started_at"`
	EndedAt   *time.Time `json:"ended_at,omitempty"`
	// FirstRev and LastRev bound the whole session's log (0 when it
	// logged nothing).
	FirstRev int64 `json:"first_rev"`
	LastRev  int64 `json:"last_rev"`
	// From is the page's first revision; Next the next page's, 0 at the
	// end of the log.
	From int64 `json:"from"`
	Next int64 `json:"next,omitempty"`
	// Lanes are the lanes the page's events ran on, edge first: the
	// tracks a replay shows side by side.
	Lanes  []string      `json:"lanes"`
	Events []ReplayEvent `json:"events"`
	// Verified says every event on the page verified; FirstBreak is the
	// revision of the first that did not, 0 when none.
	Verified   bool  `json:"verified"`
	FirstBreak int64 `json:"first_break,omitempty"`
}

// ReplayEvent is one event of a replay.
type ReplayEvent struct {
	Rev       int64           `json:"rev"`
	CreatedAt time.Time       `json:"created_at"`
	Lane      string          `json:"lane"`
	Type      string          `json:"type"`
	Summary   string          `json:"summary"`
	Payload   json.RawMessage `json:"payload"`
	Hash      string          `json:"hash"`
	HashPrev  string          `json:"hash_prev"`
	// Break says why the event does not verify; empty when it does.
	Break string `json:"break,omitempty"`
}

// SessionReplay reads a page of a session's log, verified.
func (c *Client) SessionReplay(ctx context.Context, in SessionReplayRequest) (SessionReplay, error) {
	return call[SessionReplay](ctx, c, http.MethodPost, PathSessionReplay, in)
}
