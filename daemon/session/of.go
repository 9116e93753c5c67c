package session

import (
	"encoding/json"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
)

// Session is one agent session as choird's features see it: whose it is,
// where it stands, what it is bound to, and the budget it continues. It
// is the sessions row read once at this package's edge (Of); the row's
// replication state (revisions, hashes, snapshot) stays with the queries
// that replicate.
type Session struct {
	ID      uuid.UUID
	AgentID string
	// Status is active, stopping, ended or crashed.
	Status string
	// ResumedFrom is the session this one resumes, if it does.
	ResumedFrom *uuid.UUID
	// Bindings are the session's resources, its DM among them.
	Bindings    rpc.ResourceBindings
	Runtime     string
	ContainerID string
	StartedAt   time.Time
	// HelloAt is when the agent first said hello; nil until it has.
	HelloAt         *time.Time
	LastHeartbeatAt time.Time
	EndedAt         *time.Time
	EndReason       string
	// BaseRev is the revision the session started from (a resume's is
	// its predecessor's acknowledged one); AckedRev is the last choird
	// acknowledged.
	BaseRev  int64
	AckedRev int64
	// RolloverAt is when the session rolls over at its DM's midnight.
	RolloverAt *time.Time
	// BudgetFrom, BudgetBaseTokens and BudgetBaseCostUSD are the
	// session budget it continues (see continueBudget).
	BudgetFrom        *uuid.UUID
	BudgetBaseTokens  int64
	BudgetBaseCostUSD float64
}

// Of is the session a sessions row holds. Bindings that do not parse
// (a row written by hand) read as none.
func Of(r db.ChoirControlSession) Session {
	s := Session{ID: r.SessionID, AgentID: r.AgentID, Status: r.Status, ResumedFrom: r.ResumedFrom, Runtime: r.Runtime,
		ContainerID: r.ContainerID, StartedAt: r.StartedAt, HelloAt: r.HelloAt, LastHeartbeatAt: r.LastHeartbeatAt,
		EndedAt: r.EndedAt, EndReason: r.EndReason, BaseRev: r.BaseRev, AckedRev: r.AckedRev, RolloverAt: r.RolloverAt,
		BudgetFrom: r.BudgetFrom, BudgetBaseTokens: r.BudgetBaseTokens, BudgetBaseCostUSD: r.BudgetBaseCostUsd}
	_ = json.Unmarshal(r.ResourceBindings, &s.Bindings)
	return s
}

// DM is the DM the session is bound to; empty if none.
func (s Session) DM() string { return s.Bindings.DM }
