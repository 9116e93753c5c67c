package admin

import (
	"encoding/json"
	"fmt"
	"time"
)

// Bounds of an audit listing.
const (
	DefaultAuditRows = 200
	MaxAuditRows     = 2000
)

// AuditRequest filters the audit of tool calls: each filter is optional.
type AuditRequest struct {
	AgentID string `json:"agent_id,omitempty"`
	Tool    string `json:"tool,omitempty"`
	// Outcome is a call's outcome (ok, error, running, rejected,
	// abandoned...).
	Outcome string `json:"outcome,omitempty"`
	// Since and Until bound when the calls were made (zero: the last
	// day, until now).
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// Limit is the most calls listed, newest first (0: DefaultAuditRows).
	Limit int `json:"limit,omitempty"`
}

// Validate checks the filters, naming what is wrong.
func (r AuditRequest) Validate() error {
	if r.Limit < 0 || r.Limit > MaxAuditRows {
		return fmt.Errorf("limit must be 1 to %d, not %d", MaxAuditRows, r.Limit)
	}
	if !r.Since.IsZero() && !r.Until.IsZero() && !r.Since.Before(r.Until) {
		return fmt.Errorf("since (%s) must come before until (%s)", r.Since.Format(time.RFC3339), r.Until.Format(time.RFC3339))
	}
	return nil
}

// AuditCall is one tool call, or one refused request to call a tool.
type AuditCall struct {
	AgentID   string    `json:"agent_id"`
	SessionID string    `json:"session_id"`
	Lane      string    `json:"lane"`
	CallID    string    `json:"call_id"`
	Tool      string    `json:"tool"`
	CalledAt  time.Time `json:"called_at"`
	// DurationMS is -1 while the call runs, or for a refused request.
	DurationMS int64  `json:"duration_ms"`
	Outcome    string `json:"outcome"`
	Error      string `json:"error,omitempty"`
	// Policy is how the untrusted-input policy took the call: held
	// (for approval), refused, or empty.
	Policy  string          `json:"policy,omitempty"`
	Sources json.RawMessage `json:"sources"`
	Rev     int64           `json:"rev"`
}
