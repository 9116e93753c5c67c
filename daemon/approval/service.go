package approval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Pusher is what approvals need of the agent protocol's server: a push of
// an outcome to a session's agent.
type Pusher interface {
	Push(sessionID string, p rpc.Push) (uint64, error)
}

// Buttons is the port through which a decided approval's [Approve]
// [Reject] buttons are taken off its request message: the channel that
// sent it implements it (daemon/gateway), so approvals import no channel.
type Buttons interface {
	// Serves reports whether gateway is one of the channel's.
	Serves(gateway string) bool
	// ClearButtons removes the buttons under a sent message.
	ClearButtons(ctx context.Context, gateway, chatID string, messageID int64) error
}

// Service is the approvals of a running choird: the commands every
// front-end calls with its scope (list, show, decide), and the kinds that
// features registered (Registry). It is a jobs.Feature: it runs the
// approval_timeout worker.
type Service struct {
	*Registry
	pool   *pgxpool.Pool
	logger *slog.Logger
	// river, rpc and buttons are set once, before choird serves (SetJobs,
	// SetRPC, SetButtons); buttons stays nil when no channel has them.
	river   jobs.Inserter
	rpc     Pusher
	buttons Buttons
}

// New makes the approvals of a choird, with no kind registered yet.
func New(pool *pgxpool.Pool, logger *slog.Logger) *Service {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Service{Registry: &Registry{}, pool: pool, logger: logger}
}

// SetJobs sets the job queue decisions enqueue on.
func (d *Service) SetJobs(ins jobs.Inserter) { d.river = ins }

// SetRPC sets the agent protocol's server, which outcomes are pushed to.
func (d *Service) SetRPC(p Pusher) { d.rpc = p }

// SetButtons sets the channel whose approval buttons are cleared.
func (d *Service) SetButtons(b Buttons) { d.buttons = b }

var _ jobs.Feature = (*Service)(nil)

// AddWorkers registers the approval_timeout worker, which tells the agent
// of a timeout after its commit (Resolved).
func (d *Service) AddWorkers(workers *river.Workers) error {
	if err := river.AddWorkerSafely(workers, &TimeoutWorker{Pool: d.pool, Logger: d.logger, Kinds: d.Registry,
		Resolved: d.Resolved}); err != nil {
		return fmt.Errorf("register approval timeout worker: %w", err)
	}
	return nil
}

// ErrResolved reports a decision on an approval that an earlier
// decision, or its timeout, already resolved.
var ErrResolved = errors.New("approval already resolved")

// ErrNotRemembered reports /always on an approval whose kind has no
// lasting form (Kind.Remember).
var ErrNotRemembered = errors.New("this approval cannot be given for good")

// ParseID checks that id is an approval id, as choirctl approval
// list shows them.
func ParseID(id string) (uuid.UUID, error) {
	u, err := uuid.Parse(id)
	if err != nil || len(id) != 36 {
		return uuid.UUID{}, fmt.Errorf("%q is not an approval id (a UUID, as choirctl approval list shows): %w", id, choirsql.ErrNotFound)
	}
	return u, nil
}

// maxApprovalsListed bounds one listing.
const maxApprovalsListed = 200

// List lists pending approvals, oldest first: of agentID, or of
// every agent when agentID is empty. A regular DM sees only its agent's,
// whatever agentID says.
func (d *Service) List(ctx context.Context, sc control.Scope, agentID string) ([]admin.Approval, error) {
	switch {
	case !sc.Admin && agentID == "":
		agentID = sc.Agent
	}
	if agentID != "" || !sc.Admin {
		if err := sc.Allow(agentID); err != nil {
			return nil, err
		}
	}
	var filter *string
	if agentID != "" {
		filter = &agentID
	}
	rows, err := seam.Queries(d.pool).ApprovalListPending(ctx, db.ApprovalListPendingParams{AgentID: filter, MaxRows: maxApprovalsListed})
	if err != nil {
		return nil, fmt.Errorf("list approvals: %w", err)
	}
	out := make([]admin.Approval, 0, len(rows))
	onDM := map[uuid.UUID]error{}
	for _, row := range rows {
		r := Of(row)
		err, seen := onDM[r.SessionID]
		if !seen {
			err = d.approvalOnDM(ctx, sc, r)
			onDM[r.SessionID] = err
		}
		if errors.Is(err, control.ErrForbidden) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r.Admin())
	}
	return out, nil
}

// FiledSince lists the approvals of any status filed since a
// time that the scope may see, oldest first: of its agent for a regular
// DM, of every agent for an admin.
func (d *Service) FiledSince(ctx context.Context, sc control.Scope, since time.Time) ([]admin.Approval, error) {
	var filter *string
	if !sc.Admin {
		if err := sc.Allow(sc.Agent); err != nil {
			return nil, err
		}
		filter = &sc.Agent
	}
	rows, err := seam.Queries(d.pool).ApprovalListFiledSince(ctx, db.ApprovalListFiledSinceParams{
		Since: since, AgentID: filter, MaxRows: maxApprovalsListed})
	if err != nil {
		return nil, fmt.Errorf("list recent approvals: %w", err)
	}
	var out []admin.Approval
	for _, row := range rows {
		r := Of(row)
		err := d.approvalOnDM(ctx, sc, r)
		if errors.Is(err, control.ErrForbidden) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, r.Admin())
	}
	return out, nil
}

// approvalOnDM checks that a regular DM sees or decides only approvals
// requested by a session bound to it: another DM's approvals are part of
// that DM's conversation, even once the agent is back on this DM.
func (d *Service) approvalOnDM(ctx context.Context, sc control.Scope, r Approval) error {
	if sc.Admin || sc.DM == "" {
		return nil
	}
	s, err := seam.Queries(d.pool).SessionGetByID(ctx, r.SessionID)
	if err != nil {
		return fmt.Errorf("load the session of approval %s: %w", r.ID, err)
	}
	if session.Of(s).DM() != sc.DM {
		return fmt.Errorf("%w: approval %s of %s was requested on another DM, so only that DM or an admin decides it",
			control.ErrForbidden, r.ID, r.AgentID)
	}
	return nil
}

// Show returns one approval, pending or not.
func (d *Service) Show(ctx context.Context, sc control.Scope, id string) (admin.Approval, error) {
	r, err := d.approvalInScope(ctx, sc, id)
	if err != nil {
		return admin.Approval{}, err
	}
	return r.Admin(), nil
}

// approvalInScope loads an approval by id, refusing one outside the scope.
func (d *Service) approvalInScope(ctx context.Context, sc control.Scope, id string) (Approval, error) {
	u, err := ParseID(id)
	if err != nil {
		return Approval{}, err
	}
	row, err := seam.Queries(d.pool).ApprovalGet(ctx, u)
	r := Of(row)
	if errors.Is(err, choirsql.ErrNotFound) {
		return r, fmt.Errorf("approval %s: %w", id, choirsql.ErrNotFound)
	}
	if err != nil {
		return r, fmt.Errorf("load approval %s: %w", id, err)
	}
	if err := sc.Allow(r.AgentID); err != nil {
		return r, fmt.Errorf("approval %s belongs to agent %s: %w", id, r.AgentID, err)
	}
	if err := d.approvalOnDM(ctx, sc, r); err != nil {
		return r, err
	}
	return r, nil
}

// ForMessage finds the approval whose request is the given
// message of a chat: a /approve or /reject sent in reply to it.
func (d *Service) ForMessage(ctx context.Context, sc control.Scope, gateway, chatID string, messageID int64) (admin.Approval, error) {
	row, err := seam.Queries(d.pool).ApprovalForMessage(ctx, db.ApprovalForMessageParams{Gateway: gateway, ChatID: chatID, MessageID: messageID})
	r := Of(row)
	if errors.Is(err, choirsql.ErrNotFound) {
		return admin.Approval{}, fmt.Errorf("the message you replied to is not an approval request: %w", choirsql.ErrNotFound)
	}
	if err != nil {
		return admin.Approval{}, fmt.Errorf("find the approval of message %d: %w", messageID, err)
	}
	if err := sc.Allow(r.AgentID); err != nil {
		return admin.Approval{}, fmt.Errorf("approval %s belongs to agent %s: %w", r.ID, r.AgentID, err)
	}
	if err := d.approvalOnDM(ctx, sc, r); err != nil {
		return admin.Approval{}, err
	}
	return r.Admin(), nil
}

// Decide approves or rejects a pending approval. Approve, reject
// and the timeout are one conditional UPDATE each, so exactly one wins: a
// decision that comes second gets the approval as the winner left it and
// an error wrapping ErrResolved that says "already <outcome>". The
// winner's outcome message is queued in the same transaction, and the
// agent is told by push after the commit.
func (d *Service) Decide(ctx context.Context, sc control.Scope, id string, approve bool) (admin.Approval, error) {
	return d.decide(ctx, sc, id, approve, false)
}

// Always approves a pending approval for good: as Decide, and what its
// kind remembers (Kind.Remember: the egress gateway allows the host from
// then on) is recorded in the same transaction. An approval whose kind
// cannot be remembered is refused, untouched.
func (d *Service) Always(ctx context.Context, sc control.Scope, id string) (admin.Approval, error) {
	return d.decide(ctx, sc, id, true, true)
}

func (d *Service) decide(ctx context.Context, sc control.Scope, id string, approve, always bool) (admin.Approval, error) {
	// The scope is checked on the row before anything is written.
	cur, err := d.approvalInScope(ctx, sc, id)
	if err != nil {
		return admin.Approval{}, err
	}
	remember := d.kind(cur.Type).Remember
	if always && remember == nil {
		return admin.Approval{}, fmt.Errorf("%w: approval %s (%s) is for its one request only; approve it with /approve "+
			"(choirctl approval approve)", ErrNotRemembered, cur.ID, cur.Type)
	}
	if what := d.kind(cur.Type).AdminOnly; what != "" && !sc.Admin {
		d.logger.WarnContext(ctx, "approval decision refused: not an admin", slog.String("approval_id", cur.ID.String()),
			slog.String("agent_id", cur.AgentID), slog.String("dm", sc.DM), slog.String("request_type", cur.Type))
		return admin.Approval{}, fmt.Errorf("%w: approval %s is %s, which only an admin DM or choirctl decides",
			control.ErrForbidden, cur.ID, what)
	}
	by := sc.Actor
	if by == "" {
		by = "unknown"
	}
	var row Approval
	var won bool
	err = pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		row, won, err = d.ResolveTx(ctx, tx, d.river, cur.ID, approve, by)
		if err != nil || !won || !always {
			return err
		}
		return remember.Tx(ctx, tx, row)
	})
	if errors.Is(err, errUnknown) {
		return admin.Approval{}, fmt.Errorf("approval %s: %w", id, choirsql.ErrNotFound)
	}
	if err != nil {
		return admin.Approval{}, err
	}
	a := row.Admin()
	if !won {
		return a, fmt.Errorf("%w: already %s by %s at %s", ErrResolved, a.Status, a.ResolvedBy,
			a.ResolvedAt.UTC().Format(time.RFC3339))
	}
	d.logger.InfoContext(ctx, "approval resolved", slog.String("approval_id", a.ID), slog.String("agent_id", a.AgentID),
		slog.String("status", a.Status), slog.String("by", a.ResolvedBy))
	d.Resolved(context.WithoutCancel(ctx), row)
	return a, nil
}

// Resolved tells the agent the outcome, and takes the buttons off
// the request message. The outcome goes to the agent's live session, which
// may be a later one than the requester's; an agent that is down, or that
// ends before its log shows the outcome taken, is told at its next
// session's hello (PushOutcomes). The buttons are best effort.
func (d *Service) Resolved(ctx context.Context, r Approval) {
	a := r.Admin()
	if d.kind(r.Type).ChoirdOnly {
		// choird waits on the outcome itself; the agent has nothing to take.
	} else if s, err := seam.Queries(d.pool).SessionGetLiveByAgent(ctx, r.AgentID); err != nil || s.HelloAt == nil {
		d.logger.InfoContext(ctx, "approval outcome kept for the agent's next session: it is not running",
			slog.String("approval_id", a.ID), slog.String("agent_id", a.AgentID))
	} else {
		d.pushOutcome(ctx, s.SessionID, r)
	}
	if d.buttons == nil {
		return
	}
	req, err := seam.Queries(d.pool).OutboxGetByMessageID(ctx, db.OutboxGetByMessageIDParams{AgentID: a.AgentID,
		MessageID: RequestMessageID(r.ID)})
	if err != nil || len(req.SentIds) == 0 || !d.buttons.Serves(req.Gateway) {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := d.buttons.ClearButtons(cctx, req.Gateway, req.ChatID, req.SentIds[len(req.SentIds)-1]); err != nil {
		d.logger.InfoContext(ctx, "approval buttons not cleared", slog.String("approval_id", a.ID), slog.String("error", err.Error()))
	}
}

// pushOutcome pushes one approval's outcome to a session and records when.
// The push carries what was approved (the request type and its stored
// payload), so that the agent runs exactly that. Only the agent's
// replicated log shows the outcome taken (HeartbeatApply sets
// outcome_taken_at); until it does, every hello pushes it again.
func (d *Service) pushOutcome(ctx context.Context, sessionID uuid.UUID, r Approval) {
	a := r.Admin()
	_, err := d.rpc.Push(sessionID.String(), rpc.Push{Kind: rpc.PushApprovalResolved, ApprovalResolved: &rpc.ApprovalResolved{
		ApprovalID: a.ID, Status: rpc.ApprovalStatus(a.Status), ResolvedBy: a.ResolvedBy, ResolvedAt: *a.ResolvedAt,
		RequestType: r.Type, Payload: r.Payload}})
	if err == nil {
		err = seam.Queries(d.pool).ApprovalOutcomePushed(ctx, r.ID)
	}
	if err != nil {
		d.logger.WarnContext(ctx, "approval outcome not pushed", slog.String("approval_id", a.ID),
			slog.String("session_id", sessionID.String()), slog.String("error", err.Error()))
	}
}

// PushOutcomes tells a new session of the agent the outcomes its log does
// not show taken: resolved while no session of it was there to hear them,
// or pushed to a session that ended before it acted on them. The agent
// drops an outcome it already took.
func (d *Service) PushOutcomes(ctx context.Context, agentID string, sessionID uuid.UUID) {
	rows, err := seam.Queries(d.pool).ApprovalOutcomesUntaken(ctx, agentID)
	if err != nil {
		d.logger.WarnContext(ctx, "list approval outcomes to push", slog.String("agent_id", agentID), slog.String("error", err.Error()))
		return
	}
	for _, r := range rows {
		d.pushOutcome(ctx, sessionID, Of(r))
	}
}
