package outbox

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/verbatim"
	"github.com/choirhq/choir/jobs"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Replies the send gate could not confirm (issue 31).
//
// A part whose send was cut off inside the send gate may or may not have
// reached the user, and the delivery worker never sends it again on its
// own (Work). It records the message as unconfirmed instead, and in the
// same transaction queues a notice to the message's chat, once per message
// (NoticeMessageID), saying that it may not have arrived, with a [Send
// again] button under it for a text. A press of the button or /resend
// (daemon/dmcmd) calls Resends.Resend: one UPDATE ... WHERE resent_at IS
// NULL (OutboxResendClaim) and the new row with the same text, in one
// transaction, so that two presses, or a press and a /resend, send it once.
// Notices and resends are outbox rows like any other: crash-safe, paced,
// in the chat's order.

// NoticeMessageID is the message id of the notice about unconfirmed
// message outboxID; ResendMessageID is the id of its resend.
func NoticeMessageID(outboxID int64) string { return "unconfirmed:" + strconv.FormatInt(outboxID, 10) }

// ResendMessageID is the message id under which an unconfirmed message
// is sent again: one resend per message, whoever asks and however often.
func ResendMessageID(outboxID int64) string { return "resend:" + strconv.FormatInt(outboxID, 10) }

// noticeExcerpt bounds how much of the reply a notice quotes.
const noticeExcerpt = 200

// noticeText is the notice about unconfirmed message row.
func noticeText(row db.ChoirControlOutbox) string {
	if row.Kind != message.Text {
		name := path.Base(row.FilePath)
		return fmt.Sprintf("A %s (%s) may not have arrived: choird stopped while sending it. "+
			"choird does not keep a file once it has tried to send it, so ask the agent to send it again.",
			row.Kind, verbatim.Escape(name))
	}
	excerpt := row.Text
	if r := []rune(excerpt); len(r) > noticeExcerpt {
		excerpt = string(r[:noticeExcerpt]) + "…"
	}
	return fmt.Sprintf("A reply may not have arrived: choird stopped while sending it, so it is not sent again on its own. "+
		"It began:\n%s\n\nPress Send again to have it again, or send /resend %d.", verbatim.Lines(excerpt), row.OutboxID)
}

// offersResend reports whether an interrupted row gets a notice: every
// message but a notice itself (its reply stays listed by /resend) and an
// approval's question (/approvals lists what is pending).
func offersResend(row db.ChoirControlOutbox) bool {
	return row.ResendOf == nil && row.ApprovalID == nil
}

// queueNoticeTx queues the notice about unconfirmed message row, in the
// transaction that records it unconfirmed; once per message.
func queueNoticeTx(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, row db.ChoirControlOutbox) error {
	p := Params{AgentID: row.AgentID, SessionID: row.SessionID, MessageID: NoticeMessageID(row.OutboxID),
		Gateway: row.Gateway, DM: row.Dm, ChatID: row.ChatID, Kind: message.Text, Text: noticeText(row)}
	if row.Kind == message.Text {
		p.ResendOf = &row.OutboxID
	}
	if _, err := EnqueueTx(ctx, tx, ins, p); err != nil {
		return fmt.Errorf("queue the notice about unconfirmed outbox row %d: %w", row.OutboxID, err)
	}
	return nil
}

// Chat is the chat of one DM through one gateway: whose unconfirmed
// messages it may see and have sent again.
type Chat struct {
	Gateway string
	DM      string
	ChatID  string
}

// The ways a resend is refused.
var (
	// ErrResent: the message was already sent again (or is being).
	ErrResent = errors.New("already sent again")
	// ErrNotYours: the message went to another DM or chat.
	ErrNotYours = errors.New("not a message to this chat")
	// ErrConfirmed: the message's send was confirmed: there is nothing
	// to send again.
	ErrConfirmed = errors.New("not a reply that may have been lost")
	// ErrNotText: the message is a file, which choird removes once it
	// has tried to send it; only the agent can send it again.
	ErrNotText = errors.New("a file cannot be sent again by choird")
)

// Resends sends again the messages whose send could not be confirmed, on
// a person's request.
type Resends struct {
	pool *pgxpool.Pool
	// river is set once, before choird serves (SetJobs).
	river jobs.Inserter
}

// NewResends makes the resends of a choird.
func NewResends(pool *pgxpool.Pool) *Resends { return &Resends{pool: pool} }

// SetJobs sets the job queue resends are queued on.
func (r *Resends) SetJobs(ins jobs.Inserter) { r.river = ins }

// maxUnconfirmedListed bounds Unconfirmed.
const maxUnconfirmedListed = 20

// Unconfirmed lists the chat's unconfirmed messages that nobody has asked
// to send again, newest first.
func (r *Resends) Unconfirmed(ctx context.Context, c Chat) ([]db.ChoirControlOutbox, error) {
	rows, err := seam.Queries(r.pool).OutboxUnconfirmedList(ctx, db.OutboxUnconfirmedListParams{Gateway: c.Gateway,
		ChatID: c.ChatID, Dm: c.DM, MaxRows: maxUnconfirmedListed})
	if err != nil {
		return nil, fmt.Errorf("list unconfirmed messages of dm %s: %w", c.DM, err)
	}
	return rows, nil
}

// Resend queues unconfirmed message outboxID again, with exactly its
// text, to chat c, which must be the chat it was sent to; by says who
// asked ("telegram:<dm>"). It returns the original row. Only the first
// request wins: later ones get ErrResent; a message of another chat
// ErrNotYours; a confirmed one ErrConfirmed; a file ErrNotText; an
// unknown one choirsql.ErrNotFound.
func (r *Resends) Resend(ctx context.Context, c Chat, outboxID int64, by string) (db.ChoirControlOutbox, error) {
	if r.river == nil {
		return db.ChoirControlOutbox{}, errors.New("resend: choird's job queue is not running yet; try again in a moment")
	}
	var row db.ChoirControlOutbox
	err := pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		q := seam.Queries(tx)
		var err error
		row, err = q.OutboxResendClaim(ctx, db.OutboxResendClaimParams{OutboxID: outboxID, Gateway: c.Gateway,
			ChatID: c.ChatID, Dm: c.DM, ResentBy: by})
		if errors.Is(err, choirsql.ErrNotFound) {
			return whyNotResent(ctx, q, c, outboxID)
		}
		if err != nil {
			return fmt.Errorf("claim the resend of outbox row %d: %w", outboxID, err)
		}
		_, err = EnqueueTx(ctx, tx, r.river, Params{AgentID: row.AgentID, SessionID: row.SessionID,
			MessageID: ResendMessageID(row.OutboxID), Gateway: row.Gateway, DM: row.Dm, ChatID: row.ChatID,
			Kind: message.Text, Text: row.Text})
		return err
	})
	return row, err
}

// whyNotResent names why outboxID could not be claimed for chat c.
func whyNotResent(ctx context.Context, q *db.Queries, c Chat, outboxID int64) error {
	row, err := q.OutboxGetByID(ctx, outboxID)
	switch {
	case errors.Is(err, choirsql.ErrNotFound):
		return fmt.Errorf("message %d: %w", outboxID, err)
	case err != nil:
		return fmt.Errorf("load outbox row %d: %w", outboxID, err)
	case row.Gateway != c.Gateway || row.ChatID != c.ChatID || row.Dm != c.DM:
		return fmt.Errorf("message %d: %w", outboxID, ErrNotYours)
	case row.ResentAt != nil:
		return fmt.Errorf("message %d was sent again at %s: %w", outboxID, row.ResentAt.UTC().Format("15:04:05 MST"), ErrResent)
	case row.Kind != message.Text && row.UnconfirmedAt != nil:
		return fmt.Errorf("message %d: %w", outboxID, ErrNotText)
	}
	return fmt.Errorf("message %d: %w", outboxID, ErrConfirmed)
}

// Excerpt is the start of an unconfirmed message's text as /resend lists
// it: one quoted line.
func Excerpt(row db.ChoirControlOutbox) string {
	text := strings.TrimSpace(row.Text)
	if r := []rune(text); len(r) > 80 {
		text = string(r[:80]) + "…"
	}
	return verbatim.Line(text)
}
