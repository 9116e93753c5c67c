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
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/agent/proposal"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/verbatim"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Who resolved an approval that nobody answered in time.
const ResolvedByTimeout = "timeout"

// TimeoutArgs rejects an approval still pending at its expiry.
type TimeoutArgs struct {
	ApprovalID uuid.UUID `json:"approval_id"`
}

// Kind implements river.JobArgs.
func (TimeoutArgs) Kind() string { return "approval_timeout" }

// InsertOpts runs timeouts on the control queue.
func (TimeoutArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: jobs.QueueControl, MaxAttempts: 25}
}

// Address is where an approval's messages go: the DM bound to the
// requesting session, or the console.
type Address struct {
	Gateway, DM, ChatID string
}

// ErrTooLong reports a request too long to show whole in a chat:
// it is refused before anyone is asked, since a person approves only what
// they were shown.
var ErrTooLong = errors.New("the request is too long to show whole in a chat")

// RequestMessageID is the outbox message id of an approval's question,
// the message with its [Approve] [Reject] buttons: where its outcome goes,
// and whose buttons are cleared once it is decided.
func RequestMessageID(id uuid.UUID) string { return "approval:" + id.String() + ":request" }

// RequestTx queues, in the caller's transaction with the pending row, the
// whole request in numbered parts, then the question with its [Approve]
// [Reject] buttons, and the job that rejects the approval at its expiry
// (spec 19.6). All are keyed by the approval, so running it twice for one
// approval queues nothing more. A kind that shows its own parts
// (Kind.OwnParts: a proposal's are queued by its checker,
// propose.RecordTx) gets only the question; every other request shows its
// stored payload, which is what runs once approved, rendered whole with
// every model-written line quoted (internal/verbatim).
func (r *Registry) RequestTx(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, a Approval, to Address) error {
	var parts []string
	k := r.kind(a.Type)
	if !k.OwnParts {
		var err error
		if parts, err = approvalParts(a); err != nil {
			return err
		}
		for i, part := range parts {
			head := fmt.Sprintf("Approval %s from %s, part %d of %d:\n", shortID(a.ID), a.AgentID, i+1, len(parts))
			if _, err := outbox.EnqueueTx(ctx, tx, ins, outbox.Params{AgentID: a.AgentID, SessionID: &a.SessionID,
				MessageID: fmt.Sprintf("approval:%s:detail:%d", a.ID, i+1), Gateway: to.Gateway, DM: to.DM,
				ChatID: to.ChatID, Kind: message.Text, Text: head + part}); err != nil {
				return fmt.Errorf("queue approval %s part %d: %w", a.ID, i+1, err)
			}
		}
	}
	q, err := outbox.EnqueueTx(ctx, tx, ins, outbox.Params{AgentID: a.AgentID, SessionID: &a.SessionID,
		MessageID: RequestMessageID(a.ID), Gateway: to.Gateway, DM: to.DM, ChatID: to.ChatID,
		Kind: message.Text, Text: approvalQuestion(a, len(parts), k), ApprovalID: &a.ID})
	if err != nil {
		return fmt.Errorf("queue notification of approval %s: %w", a.ID, err)
	}
	if !q.Created {
		return nil
	}
	if _, err := ins.InsertTx(ctx, tx, TimeoutArgs{ApprovalID: a.ID},
		&river.InsertOpts{ScheduledAt: a.ExpiresAt}); err != nil {
		return fmt.Errorf("schedule timeout of approval %s: %w", a.ID, err)
	}
	return nil
}

// approvalParts renders a request's payload whole, in chat-sized parts.
func approvalParts(a Approval) ([]string, error) {
	text := "Everything this approval lets " + verbatim.Escape(a.AgentID) + " do, in full (" +
		verbatim.Escape(a.Type) + "); text between │ bars was written by the agent, not by Choir:\n" +
		verbatim.Payload(a.Payload)
	parts := proposal.Split(text)
	if len(parts) > proposal.MaxParts {
		return nil, fmt.Errorf("%w: %d bytes rendered, at most %d messages of %d bytes; nobody was asked, make the request smaller",
			ErrTooLong, len(text), proposal.MaxParts, proposal.PartBytes)
	}
	return parts, nil
}

// approvalQuestion is the message with the buttons: what asks, its one
// line in the agent's words (quoted), where the whole request is, and
// what approving it does when its kind says (Kind.Will), and how to
// approve it for good when its kind can (Kind.Remember).
func approvalQuestion(a Approval, parts int, k Kind) string {
	where := "The whole request is in the message(s) above."
	if parts > 0 {
		where = fmt.Sprintf("The whole request is in the %d message(s) above, marked \"Approval %s\".", parts, shortID(a.ID))
	}
	return fmt.Sprintf("Approval %s requested by %s (%s). In the agent's words:\n%s\n%s%s%s\n\n"+
		"Approve or reject with the buttons, or reply /approve or /reject.%s Unanswered, it is rejected at %s.",
		shortID(a.ID), a.AgentID, verbatim.Escape(a.Type), verbatim.Line(a.Summary), where,
		willLine(k.Will), sourcesLine(a.Sources), alwaysLine(a, k.Remember), a.ExpiresAt.UTC().Format("15:04 MST"))
}

// sourcesLine warns, on the card of a call asked by a lane that read
// strangers' words (issue 30), whose words they were: what the agent read
// may be what asks for this.
func sourcesLine(srcs []string) string {
	if len(srcs) == 0 {
		return ""
	}
	return "\n⚠ Asked after the agent read what others wrote, which may be what asks for this: " +
		verbatim.Escape(admin.DescribeSources(srcs)) + "."
}

// alwaysLine offers /always on the card of a kind that can be approved
// for good.
func alwaysLine(a Approval, r *Remember) string {
	if r == nil {
		return ""
	}
	return " Reply /always to approve it and " + r.Will(a) + "."
}

func willLine(will string) string {
	if will == "" {
		return ""
	}
	return "\n" + will
}

// shortID is the first eight hex digits of an approval id, as a person
// reads it.
func shortID(id uuid.UUID) string { return id.String()[:8] }

// errUnknown reports an approval id that names no approval.
var errUnknown = errors.New("no such approval")

// ResolveTx approves or rejects an approval with the one conditional
// UPDATE that approve, reject and timeout share, so exactly one of them
// wins. The winner also runs what its kind registered to follow the
// outcome (Kind.ResolvedTx), and queues the outcome's message to the chat
// that got the request, in the same transaction. won is false when the
// approval was already resolved; row is then as the winner left it.
func (r *Registry) ResolveTx(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, id uuid.UUID, approve bool, by string) (row Approval, won bool, err error) {
	q := seam.Queries(tx)
	resolved, err := q.ApprovalResolve(ctx, db.ApprovalResolveParams{ApprovalID: id, Approve: approve, ResolvedBy: &by})
	if errors.Is(err, choirsql.ErrNotFound) {
		cur, err := q.ApprovalGet(ctx, id)
		if errors.Is(err, choirsql.ErrNotFound) {
			return row, false, fmt.Errorf("approval %s: %w", id, errUnknown)
		}
		if err != nil {
			return row, false, fmt.Errorf("load approval %s: %w", id, err)
		}
		return Of(cur), false, nil
	}
	if err != nil {
		return row, false, fmt.Errorf("resolve approval %s: %w", id, err)
	}
	row = Of(resolved)
	// What waited for the approval follows its outcome in this
	// transaction.
	k := r.kind(row.Type)
	if k.ResolvedTx != nil {
		if err := k.ResolvedTx(ctx, tx, ins, row); err != nil {
			return row, false, err
		}
	}
	text, err := outcomeText(ctx, tx, k, row, approve, by)
	if err != nil {
		return row, false, err
	}
	to := Address{Gateway: outbox.ConsoleGateway, DM: outbox.ConsoleDM, ChatID: outbox.ConsoleChat}
	if req, err := q.OutboxGetByMessageID(ctx, db.OutboxGetByMessageIDParams{AgentID: row.AgentID,
		MessageID: RequestMessageID(id)}); err == nil {
		to = Address{Gateway: req.Gateway, DM: req.Dm, ChatID: req.ChatID}
	} else if !errors.Is(err, choirsql.ErrNotFound) {
		return row, false, fmt.Errorf("load notification of approval %s: %w", id, err)
	}
	if _, err := outbox.EnqueueTx(ctx, tx, ins, outbox.Params{AgentID: row.AgentID, SessionID: &row.SessionID,
		MessageID: "approval:" + id.String() + ":resolved", Gateway: to.Gateway, DM: to.DM, ChatID: to.ChatID,
		Kind: message.Text, Text: text}); err != nil {
		return row, false, fmt.Errorf("queue outcome of approval %s: %w", id, err)
	}
	return row, true, nil
}

// outcomeText is what the chat is told of an outcome: a timeout's own
// words, else the kind's (Kind.OutcomeText), else the plain ones. A plain
// approval is a gated call of the agent's (an MCP tool, an email): the
// agent, told of the approval, runs exactly the approved call at once (or
// when it is back, if it is down) and its edge lane tells the chat what
// came of it. A rejection or timeout is told here, once; the lane only
// takes note of it.
func outcomeText(ctx context.Context, tx pgx.Tx, k Kind, row Approval, approve bool, by string) (string, error) {
	if by == ResolvedByTimeout {
		return fmt.Sprintf("Approval timed out: %s. Rejected automatically.", row.Summary), nil
	}
	if k.OutcomeText != nil {
		text, err := k.OutcomeText(ctx, tx, row)
		if text != "" || err != nil {
			return text, err
		}
	}
	if approve {
		return fmt.Sprintf("Approved: %s. It runs now (or as soon as %s is back), and %s reports what came of it.",
			row.Summary, row.AgentID, row.AgentID), nil
	}
	return fmt.Sprintf("Rejected: %s.", row.Summary), nil
}

// TimeoutWorker rejects an approval nobody answered, in one
// transaction with the job's completion; an approval already resolved
// makes it a no-op.
type TimeoutWorker struct {
	river.WorkerDefaults[TimeoutArgs]
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Kinds are the registered kinds, whose follow-ups a timeout runs.
	Kinds *Registry
	// Resolved is told of a timeout after its commit (choird pushes the
	// outcome to the agent and clears the buttons).
	Resolved func(ctx context.Context, a Approval)
}

// Timeout bounds one run.
func (w *TimeoutWorker) Timeout(*river.Job[TimeoutArgs]) time.Duration {
	return 10 * time.Second
}

// Work implements river.Worker.
func (w *TimeoutWorker) Work(ctx context.Context, job *river.Job[TimeoutArgs]) error {
	var row Approval
	var won bool
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var err error
		row, won, err = w.Kinds.ResolveTx(ctx, tx, river.ClientFromContext[pgx.Tx](ctx), job.Args.ApprovalID, false, ResolvedByTimeout)
		if errors.Is(err, errUnknown) {
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
		w.Logger.InfoContext(ctx, "approval timed out; rejected", slog.String("approval_id", row.ID.String()),
			slog.String("agent_id", row.AgentID))
		if w.Resolved != nil {
			w.Resolved(ctx, row)
		}
	}
	return nil
}
