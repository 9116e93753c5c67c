package jobs

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
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/agent/proposal"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/verbatim"
	choirsql "github.com/choirhq/choir/sql"
)

// Who resolved an approval that nobody answered in time.
const ResolvedByTimeout = "timeout"

// The console channel: messages of agents bound to no Telegram DM, read by
// choirctl chat from the outbox. Its sender only marks them sent.
const (
	ConsoleGateway = "console"
	ConsoleDM      = "console"
	ConsoleChat    = "operator"
)

// ApprovalTimeoutArgs rejects an approval still pending at its expiry.
type ApprovalTimeoutArgs struct {
	ApprovalID uuid.UUID `json:"approval_id"`
}

// Kind implements river.JobArgs.
func (ApprovalTimeoutArgs) Kind() string { return "approval_timeout" }

// InsertOpts runs timeouts on the control queue.
func (ApprovalTimeoutArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueControl, MaxAttempts: 25}
}

// ApprovalAddress is where an approval's messages go: the DM bound to the
// requesting session, or the console.
type ApprovalAddress struct {
	Gateway, DM, ChatID string
}

// ErrApprovalTooLong reports a request too long to show whole in a chat:
// it is refused before anyone is asked, since a person approves only what
// they were shown.
var ErrApprovalTooLong = errors.New("the request is too long to show whole in a chat")

// RequestApprovalTx queues, in the caller's transaction with the pending
// row, the whole request in numbered parts, then the question with its
// [Approve] [Reject] buttons, and the job that rejects the approval at its
// expiry (spec 19.6). All are keyed by the approval, so running it twice
// for one approval queues nothing more. A proposal's parts are queued by
// its checker (propose.RecordTx) instead; every other request shows its
// stored payload, which is what runs once approved, rendered whole with
// every model-written line quoted (internal/verbatim).
func RequestApprovalTx(ctx context.Context, tx pgx.Tx, ins Inserter, a db.ChoirControlPendingApproval, to ApprovalAddress) error {
	var parts []string
	if !proposal.IsProposal(a.RequestType) {
		var err error
		if parts, err = approvalParts(a); err != nil {
			return err
		}
		for i, part := range parts {
			head := fmt.Sprintf("Approval %s from %s, part %d of %d:\n", shortID(a.ApprovalID), a.AgentID, i+1, len(parts))
			if _, err := EnqueueOutboundTx(ctx, tx, ins, OutboundParams{AgentID: a.AgentID, SessionID: &a.SessionID,
				MessageID: fmt.Sprintf("approval:%s:detail:%d", a.ApprovalID, i+1), Gateway: to.Gateway, DM: to.DM,
				ChatID: to.ChatID, Kind: OutboundText, Text: head + part}); err != nil {
				return fmt.Errorf("queue approval %s part %d: %w", a.ApprovalID, i+1, err)
			}
		}
	}
	q, err := EnqueueOutboundTx(ctx, tx, ins, OutboundParams{AgentID: a.AgentID, SessionID: &a.SessionID,
		MessageID: "approval:" + a.ApprovalID.String() + ":request", Gateway: to.Gateway, DM: to.DM, ChatID: to.ChatID,
		Kind: OutboundText, Text: approvalQuestion(a, len(parts)), ApprovalID: &a.ApprovalID})
	if err != nil {
		return fmt.Errorf("queue notification of approval %s: %w", a.ApprovalID, err)
	}
	if !q.Created {
		return nil
	}
	if _, err := ins.InsertTx(ctx, tx, ApprovalTimeoutArgs{ApprovalID: a.ApprovalID},
		&river.InsertOpts{ScheduledAt: a.ExpiresAt}); err != nil {
		return fmt.Errorf("schedule timeout of approval %s: %w", a.ApprovalID, err)
	}
	return nil
}

// approvalParts renders a request's payload whole, in chat-sized parts.
func approvalParts(a db.ChoirControlPendingApproval) ([]string, error) {
	text := "Everything this approval lets " + verbatim.Escape(a.AgentID) + " do, in full (" +
		verbatim.Escape(a.RequestType) + "); text between │ bars was written by the agent, not by Choir:\n" +
		verbatim.Payload(a.Payload)
	parts := proposal.Split(text)
	if len(parts) > proposal.MaxParts {
		return nil, fmt.Errorf("%w: %d bytes rendered, at most %d messages of %d bytes; nobody was asked, make the request smaller",
			ErrApprovalTooLong, len(text), proposal.MaxParts, proposal.PartBytes)
	}
	return parts, nil
}

// approvalQuestion is the message with the buttons: what asks, its one
// line in the agent's words (quoted), and where the whole request is.
func approvalQuestion(a db.ChoirControlPendingApproval, parts int) string {
	where := "The whole request is in the message(s) above."
	if parts > 0 {
		where = fmt.Sprintf("The whole request is in the %d message(s) above, marked \"Approval %s\".", parts, shortID(a.ApprovalID))
	}
	return fmt.Sprintf("Approval %s requested by %s (%s). In the agent's words:\n%s\n%s%s\n\n"+
		"Approve or reject with the buttons, or reply /approve or /reject. Unanswered, it is rejected at %s.",
		shortID(a.ApprovalID), a.AgentID, verbatim.Escape(a.RequestType), verbatim.Line(a.Summary), where,
		proposalWill(a.RequestType), a.ExpiresAt.UTC().Format("15:04 MST"))
}

// shortID is the first eight hex digits of an approval id, as a person
// reads it.
func shortID(id uuid.UUID) string { return id.String()[:8] }

// ErrApprovalNotFound reports an approval id that names no approval.
var ErrApprovalNotFound = errors.New("no such approval")

// ResolveApprovalTx approves or rejects an approval with the one
// conditional UPDATE that approve, reject and timeout share, so exactly one
// of them wins. The winner also queues the outcome's message to the chat
// that got the request. won is false when the approval was already
// resolved; row is then as the winner left it.
func ResolveApprovalTx(ctx context.Context, tx pgx.Tx, ins Inserter, id uuid.UUID, approve bool, by string) (row db.ChoirControlPendingApproval, won bool, err error) {
	q := db.New(choirsql.Interpreted(tx))
	row, err = q.ApprovalResolve(ctx, db.ApprovalResolveParams{ApprovalID: id, Approve: approve, ResolvedBy: &by})
	if errors.Is(err, choirsql.ErrNotFound) {
		row, err = q.ApprovalGet(ctx, id)
		if errors.Is(err, choirsql.ErrNotFound) {
			return row, false, fmt.Errorf("approval %s: %w", id, ErrApprovalNotFound)
		}
		if err != nil {
			return row, false, fmt.Errorf("load approval %s: %w", id, err)
		}
		return row, false, nil
	}
	if err != nil {
		return row, false, fmt.Errorf("resolve approval %s: %w", id, err)
	}
	// What waited for the approval follows its outcome in this
	// transaction.
	if err := scheduleApprovalResolvedTx(ctx, tx, ins, row, time.Now()); err != nil {
		return row, false, err
	}
	if err := proposalApprovedTx(ctx, tx, ins, row); err != nil {
		return row, false, err
	}
	var text string
	switch {
	case by == ResolvedByTimeout:
		text = fmt.Sprintf("Approval timed out: %s. Rejected automatically.", row.Summary)
	case proposal.IsProposal(row.RequestType):
		text = proposalOutcomeText(row, approve)
	case approve:
		if text, err = approvedText(ctx, q, row); err != nil {
			return row, false, err
		}
	default:
		text = fmt.Sprintf("Rejected: %s.", row.Summary)
	}
	to := ApprovalAddress{Gateway: ConsoleGateway, DM: ConsoleDM, ChatID: ConsoleChat}
	if req, err := q.OutboxGetByMessageID(ctx, db.OutboxGetByMessageIDParams{AgentID: row.AgentID,
		MessageID: "approval:" + id.String() + ":request"}); err == nil {
		to = ApprovalAddress{Gateway: req.Gateway, DM: req.Dm, ChatID: req.ChatID}
	} else if !errors.Is(err, choirsql.ErrNotFound) {
		return row, false, fmt.Errorf("load notification of approval %s: %w", id, err)
	}
	if _, err := EnqueueOutboundTx(ctx, tx, ins, OutboundParams{AgentID: row.AgentID, SessionID: &row.SessionID,
		MessageID: "approval:" + id.String() + ":resolved", Gateway: to.Gateway, DM: to.DM, ChatID: to.ChatID,
		Kind: OutboundText, Text: text}); err != nil {
		return row, false, fmt.Errorf("queue outcome of approval %s: %w", id, err)
	}
	return row, true, nil
}

// approvedText says what happens next once an approval that is not a
// proposal is approved: nothing runs at the moment of the approval. A
// schedule is armed and runs when it fires; any other approved call runs
// only when the agent, told of the approval, makes it again.
func approvedText(ctx context.Context, q *db.Queries, row db.ChoirControlPendingApproval) (string, error) {
	if row.RequestType != ScheduleApprovalType {
		return fmt.Sprintf("Approved: %s. Nothing has run yet: the agent is told, and the call runs when it makes it again.",
			row.Summary), nil
	}
	s, err := q.ScheduleLockByApproval(ctx, &row.ApprovalID)
	switch {
	case errors.Is(err, choirsql.ErrNotFound):
		return fmt.Sprintf("Approved: %s. Nothing runs now.", row.Summary), nil
	case err != nil:
		return "", fmt.Errorf("load the schedule of approval %s: %w", row.ApprovalID, err)
	case s.Status != ScheduleActive || s.NextRunAt == nil:
		return fmt.Sprintf("Approved: %s. Nothing runs now: the schedule is %s.", row.Summary, s.Status), nil
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	return fmt.Sprintf("Approved: %s. Armed: nothing runs until it fires, next at %s.", row.Summary,
		s.NextRunAt.In(loc).Format("Mon 2 Jan 2006 15:04 MST")), nil
}

// ApprovalTimeoutWorker rejects an approval nobody answered, in one
// transaction with the job's completion; an approval already resolved
// makes it a no-op.
type ApprovalTimeoutWorker struct {
	river.WorkerDefaults[ApprovalTimeoutArgs]
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Resolved is told of a timeout after its commit (choird pushes the
	// outcome to the agent and clears the buttons).
	Resolved func(ctx context.Context, a db.ChoirControlPendingApproval)
}

// Timeout bounds one run.
func (w *ApprovalTimeoutWorker) Timeout(*river.Job[ApprovalTimeoutArgs]) time.Duration {
	return 10 * time.Second
}

// Work implements river.Worker.
func (w *ApprovalTimeoutWorker) Work(ctx context.Context, job *river.Job[ApprovalTimeoutArgs]) error {
	var row db.ChoirControlPendingApproval
	var won bool
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var err error
		row, won, err = ResolveApprovalTx(ctx, tx, river.ClientFromContext[pgx.Tx](ctx), job.Args.ApprovalID, false, ResolvedByTimeout)
		if errors.Is(err, ErrApprovalNotFound) {
			return river.JobCancel(err)
		}
		if err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete approval timeout job: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if won {
		w.Logger.InfoContext(ctx, "approval timed out; rejected", slog.String("approval_id", row.ApprovalID.String()),
			slog.String("agent_id", row.AgentID))
		if w.Resolved != nil {
			w.Resolved(ctx, row)
		}
	}
	return nil
}
