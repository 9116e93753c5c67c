package egress

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// RequestType is the approval asked for a connection to a host the
// agent's egress.allow does not name (egress.unknown approve).
const RequestType = "egress.connect"

// RegisterApprovals registers the egress approval's kind: choird's own
// (the waiting connection reads the outcome; the agent is never pushed
// it), marked taken as it is resolved.
func RegisterApprovals(r *approval.Registry) {
	r.Register(RequestType, approval.Kind{
		ChoirdOnly: true,
		Will:       "Approving lets this one connection through, now; refusing, or no answer in time, refuses it.",
		ResolvedTx: func(ctx context.Context, tx pgx.Tx, _ jobs.Inserter, a approval.Approval) error {
			return seam.Queries(tx).EgressApprovalTaken(ctx, a.ID)
		},
		Remember: &approval.Remember{
			Will: func(a approval.Approval) string {
				p, _ := payloadOf(a)
				return "let " + a.AgentID + " reach " + net.JoinHostPort(p.Host, strconv.Itoa(p.Port)) +
					" from now on without asking (choirctl egress grants lists such hosts, choirctl egress revoke takes one back)"
			},
			// The grant is the host and port the card named; the
			// gateway finds it before it would ask again.
			Tx: func(ctx context.Context, tx pgx.Tx, a approval.Approval) error {
				p, err := payloadOf(a)
				if err != nil {
					return err
				}
				return seam.Queries(tx).EgressGrantAdd(ctx, db.EgressGrantAddParams{AgentID: a.AgentID, Host: p.Host,
					Port: int32(p.Port)})
			},
		},
	})
}

// payloadOf reads the host and port an egress approval asked about.
func payloadOf(a approval.Approval) (approvalPayload, error) {
	var p approvalPayload
	if err := json.Unmarshal(a.Payload, &p); err != nil || p.Host == "" {
		return p, fmt.Errorf("egress approval %s names no host: %v", a.ID, err)
	}
	return p, nil
}

// Approvals asks the agent's DM about a connection and waits for the
// answer: the gateway's ApproveFunc.
type Approvals struct {
	Pool       *pgxpool.Pool
	Registry   *approval.Registry
	Jobs       jobs.Inserter
	ConfigFunc func() *config.Config
	Logger     *slog.Logger
	// Poll is how often the waiting connection looks at the approval's
	// row (default 500 ms).
	Poll time.Duration
}

// approvalPayload is what the person is shown, whole.
type approvalPayload struct {
	Host    string   `json:"host"`
	Port    int      `json:"port"`
	Lane    string   `json:"lane,omitempty"`
	Sources []string `json:"lane_sources,omitempty"`
}

// Ask files the approval in the DM bound to the caller's session and waits
// until it is decided, or ctx ends (the tool gave up).
func (a *Approvals) Ask(ctx context.Context, r ApprovalRequest) (Approval, error) {
	sid, err := uuid.Parse(r.Caller.SessionID)
	if err != nil {
		return Approval{}, fmt.Errorf("session %q: %w", r.Caller.SessionID, err)
	}
	q := seam.Queries(a.Pool)
	s, err := q.SessionGetByID(ctx, sid)
	if err != nil {
		return Approval{}, fmt.Errorf("load session %s: %w", sid, err)
	}
	b := session.Of(s).Bindings
	cfg := a.ConfigFunc()
	gw, chat, err := control.OutboundAddress(cfg, b)
	if err != nil {
		return Approval{}, err
	}
	hp := net.JoinHostPort(r.Host, strconv.Itoa(r.Port))
	payload, _ := json.Marshal(approvalPayload{Host: r.Host, Port: r.Port, Lane: r.Lane, Sources: r.Sources})
	var id uuid.UUID
	err = pgx.BeginFunc(ctx, a.Pool, func(tx pgx.Tx) error {
		tq := seam.Queries(tx)
		row, err := tq.ApprovalCreate(ctx, db.ApprovalCreateParams{SessionID: sid, AgentID: r.Caller.AgentID,
			RequestID: "egress:" + uuid.NewString(), RequestType: RequestType,
			Summary: "open a connection to " + hp + " (a command or tool of the agent asks)", Payload: payload,
			ExpiresAt: time.Now().Add(cfg.ApprovalTimeout()), Sources: r.Sources})
		if err != nil {
			return fmt.Errorf("record approval: %w", err)
		}
		full, err := tq.ApprovalGet(ctx, row.ApprovalID)
		if err != nil {
			return err
		}
		id = row.ApprovalID
		return a.Registry.RequestTx(ctx, tx, a.Jobs, approval.Of(full), approval.Address{Gateway: gw, DM: b.DM, ChatID: chat})
	})
	if err != nil {
		return Approval{}, err
	}
	a.logger().InfoContext(ctx, "egress connection waits for approval", slog.String("agent_id", r.Caller.AgentID),
		slog.String("host", hp), slog.String("approval_id", id.String()))
	return a.wait(ctx, id)
}

// wait polls the approval's row until it is decided.
func (a *Approvals) wait(ctx context.Context, id uuid.UUID) (Approval, error) {
	poll := a.Poll
	if poll <= 0 {
		poll = 500 * time.Millisecond
	}
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		row, err := seam.Queries(a.Pool).ApprovalGet(ctx, id)
		if err != nil {
			return Approval{}, fmt.Errorf("approval %s: %w", id, err)
		}
		if row.Status != "pending" {
			return Approval{Allow: row.Status == "approved"}, nil
		}
		select {
		case <-ctx.Done():
			return Approval{}, fmt.Errorf("the connection ended while approval %s was pending: %w", id, ctx.Err())
		case <-t.C:
		}
	}
}

func (a *Approvals) logger() *slog.Logger {
	if a.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return a.Logger
}
