package audit

import (
	"context"
	"fmt"
	"time"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/sql/seam"
)

// Calls lists tool calls and refused requests to call tools
// (choir_audit.tool_calls), newest first: every agent's for an admin, a
// regular DM only its agent's.
func (r *Reader) Calls(ctx context.Context, sc control.Scope, in admin.AuditRequest) ([]admin.AuditCall, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	if !sc.Admin && in.AgentID == "" {
		in.AgentID = sc.Agent
	}
	if in.AgentID != "" || !sc.Admin {
		if err := sc.Allow(in.AgentID); err != nil {
			return nil, err
		}
		if err := r.Control.KnownAgent(in.AgentID); err != nil {
			return nil, err
		}
	}
	if in.Limit == 0 {
		in.Limit = admin.DefaultAuditRows
	}
	if in.Until.IsZero() {
		in.Until = time.Now().Add(time.Minute)
	}
	if in.Since.IsZero() {
		in.Since = in.Until.Add(-24 * time.Hour)
	}
	rows, err := seam.Queries(r.Pool).AuditToolCalls(ctx, db.AuditToolCallsParams{AgentID: in.AgentID, Tool: in.Tool,
		Outcome: in.Outcome, Since: in.Since, Until: in.Until, MaxRows: int32(in.Limit)})
	if err != nil {
		return nil, fmt.Errorf("list tool calls: %w", err)
	}
	out := make([]admin.AuditCall, len(rows))
	for i, row := range rows {
		out[i] = admin.AuditCall{AgentID: row.AgentID, SessionID: row.SessionID.String(), Lane: row.Lane, CallID: row.CallID,
			Tool: row.Tool, CalledAt: row.CalledAt, DurationMS: row.DurationMs, Outcome: row.Outcome, Error: row.Error,
			Policy: row.Policy, Sources: row.Sources, Rev: row.CallRev}
	}
	return out, nil
}
