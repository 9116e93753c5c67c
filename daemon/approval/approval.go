// Package approval is choird's approvals (spec 19.6): a request asked of a
// person in a chat, decided by a button, a DM command or choirctl, or
// rejected by its timeout. It owns the pending_approvals rows, the words
// the chat is shown, the approval_timeout job, the one conditional UPDATE
// by which approve, reject and timeout race (exactly one wins), and
// telling the agent the outcome until its replicated log shows it taken.
// What follows an outcome (a schedule armed, a proposal applied) is not
// hard-coded here: the feature that owns a request type registers a Kind
// for it at wiring time, and its ResolvedTx runs in the transaction that
// resolved the approval.
package approval

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc/admin"
)

// A Kind is what the feature owning a request type registers for its
// approvals. The zero Kind is a plain approval, a gated call of the
// agent's: its payload is shown whole, and approving it runs nothing in
// choird (the agent, told with the payload, runs exactly that call).
type Kind struct {
	// OwnParts says the feature queues the request's parts itself (a
	// proposal's checker does), so RequestTx queues only the question.
	OwnParts bool
	// ChoirdOnly says the outcome is choird's own (a connection of the
	// egress gateway waits on it): the agent is never pushed it, and
	// ResolvedTx marks it taken.
	ChoirdOnly bool
	// Will is what approving does, shown under the question; empty shows
	// nothing.
	Will string
	// AdminOnly, when set, keeps the decision to an admin DM or
	// choirctl, and says what the approval is in the refusal ("a change
	// to choird's configuration").
	AdminOnly string
	// ResolvedTx runs in the transaction that resolved the approval
	// (approved, rejected or timed out), before the outcome's message is
	// queued: what waited for the approval follows its outcome.
	ResolvedTx func(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, a Approval) error
	// OutcomeText is what the chat is told of a decision (a timeout has
	// its own words); "" keeps the plain "Approved: ..." or "Rejected:
	// ...".
	OutcomeText func(ctx context.Context, tx pgx.Tx, a Approval) (string, error)
	// Remember, when set, lets a person approve for good (/always): the
	// egress gateway's "always allow this host". Nil: an approval is
	// for its one request only.
	Remember *Remember
}

// Remember is a kind's lasting approval.
type Remember struct {
	// Will says what approving for good does, on the card ("allow
	// example.com:443 for good").
	Will func(a Approval) string
	// Tx records it, in the transaction that approved.
	Tx func(ctx context.Context, tx pgx.Tx, a Approval) error
}

// Registry holds the registered kinds, by request type. Kinds are
// registered at wiring time, before choird serves; it is read-only after.
type Registry struct {
	kinds map[string]Kind
}

// Register registers k for requestType. Registering a type twice is a
// wiring mistake, and panics.
func (r *Registry) Register(requestType string, k Kind) {
	if r.kinds == nil {
		r.kinds = map[string]Kind{}
	}
	if _, dup := r.kinds[requestType]; dup {
		panic(fmt.Sprintf("approval kind %q registered twice", requestType))
	}
	r.kinds[requestType] = k
}

// kind is the kind registered for requestType, or the plain one.
func (r *Registry) kind(requestType string) Kind {
	if r == nil {
		return Kind{}
	}
	return r.kinds[requestType]
}

// Approval is one approval as choird's features see it: what was asked,
// by which agent and session, and how it ended. It is the row of
// pending_approvals read once at this package's edge (Of), so that the
// features that register kinds depend on approvals, not on their table.
type Approval struct {
	ID        uuid.UUID
	SessionID uuid.UUID
	AgentID   string
	// RequestID is the agent's id for the request (for a proposal, the
	// call's idempotency key), unique per agent.
	RequestID string
	// Type is the request type, which names the Kind that follows it.
	Type    string
	Summary string
	// Payload is exactly what runs once approved, as shown.
	Payload   json.RawMessage
	Status    string
	CreatedAt time.Time
	ExpiresAt time.Time
	// ResolvedAt and ResolvedBy are set once decided or timed out.
	ResolvedAt *time.Time
	ResolvedBy string
	// Sources are the untrusted sources the requesting lane had read.
	Sources []string
}

// Of is the approval a pending_approvals row holds.
func Of(r db.ChoirControlPendingApproval) Approval {
	a := Approval{ID: r.ApprovalID, SessionID: r.SessionID, AgentID: r.AgentID, RequestID: r.RequestID,
		Type: r.RequestType, Summary: r.Summary, Payload: r.Payload, Status: r.Status, CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt, ResolvedAt: r.ResolvedAt, Sources: r.Sources}
	if r.ResolvedBy != nil {
		a.ResolvedBy = *r.ResolvedBy
	}
	return a
}

// Admin is a as the admin API shows it.
func (a Approval) Admin() admin.Approval {
	return admin.Approval{ID: a.ID.String(), AgentID: a.AgentID, SessionID: a.SessionID.String(),
		RequestType: a.Type, Summary: a.Summary, Payload: a.Payload, Status: a.Status,
		CreatedAt: a.CreatedAt, ExpiresAt: a.ExpiresAt, ResolvedAt: a.ResolvedAt, ResolvedBy: a.ResolvedBy}
}
