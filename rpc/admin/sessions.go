package admin

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"time"
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
