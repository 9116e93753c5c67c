package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// QueueDelivery runs outbound message delivery. It is latency-sensitive and
// never shares a queue with bulk work.
const QueueDelivery = "delivery"

// DeliveryMaxAttempts bounds retries of a message that keeps failing with a
// transient error. River's default backoff (attempt⁴ seconds) spreads ten
// attempts over about four hours; then the row is marked failed.
const DeliveryMaxAttempts = 10

// DeliveryQueue is the delivery queue's name and configuration, for
// river.Config.Queues. A short fetch cooldown starts a job within a few
// milliseconds of its insert notification. The inserting client sends at
// most one insert notification per queue per river.Config.FetchCooldown
// (River's default 100 ms): set that to 1 ms (queues that want a longer
// cooldown set their own), or a message queued within the cooldown of the
// previous one waits for this queue's 50 ms poll instead.
func DeliveryQueue() (string, river.QueueConfig) {
	return QueueDelivery, river.QueueConfig{
		MaxWorkers:        16,
		FetchCooldown:     5 * time.Millisecond,
		FetchPollInterval: 50 * time.Millisecond,
	}
}

// DeliverArgs is the job that sends one outbox row.
type DeliverArgs struct {
	OutboxID int64 `json:"outbox_id"`
}

// Kind implements river.JobArgs.
func (DeliverArgs) Kind() string { return "deliver_outbound" }

// InsertOpts puts delivery on its own queue.
func (DeliverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueDelivery, MaxAttempts: DeliveryMaxAttempts}
}

// Sender is what the delivery worker needs of a gateway
// (daemon/gateway implements it for Telegram).
//
// Send returns the channel's id of the message it sent. An error with a
// RetryAfter() time.Duration method means the channel asked to wait that
// long (Telegram's 429 retry_after): the job is snoozed without using an
// attempt. An error with a Temporary() bool method reporting false can
// never succeed (the user blocked the bot, the file is gone): the row is
// marked failed at once. Any other error is retried with backoff.
//
// Send's context carries a send gate (message.SendGateFrom): a sender
// whose send has an effect outside choird must pass it, through
// message.GateBody, before its request can take effect, and must not send
// when it fails.
type Sender interface {
	// Parts cuts a queued message into the messages the channel sends, in
	// order (a long text into several, say). It must be deterministic:
	// after a crash the worker resumes at the first part whose id is not
	// recorded in the row.
	Parts(msg message.Part) []message.Part
	Send(ctx context.Context, part message.Part) (int64, error)
}

// Pacer is what the delivery worker needs of a send limiter
// (daemon/gateway.SendLimiter paces Telegram's bots): a booking per message
// sent, and a pause for a chat the channel asked to wait.
type Pacer interface {
	// Reserve books one message to chatID through gateway. The caller
	// waits delay before sending, or calls cancel to give the booking
	// back when it will not send.
	Reserve(gateway, chatID string) (delay time.Duration, cancel func())
	// Backoff blocks chatID for d, after the channel answered "too many
	// requests, retry after d".
	Backoff(gateway, chatID string, d time.Duration)
}

// Delivery is the delivery worker as choird runs it (a jobs.Feature): what
// it needs from choird.
type Delivery struct {
	Pool   *pgxpool.Pool
	Sender Sender
	// Limiter paces sends; it is required. Share one limiter between the
	// worker and anything else that sends through the same bots (command
	// replies), so the limits hold per process.
	Limiter Pacer
	Logger  *slog.Logger
	// MaxWait is the longest the worker sleeps in process for the limiter
	// before it snoozes the job instead (default 5 s).
	MaxWait time.Duration
	// RunBudget is how long one run keeps sending parts of a long
	// message before it snoozes to let other jobs in (default 20 s).
	RunBudget time.Duration
	// Workspaces returns the configured workspaces, name to directory
	// (config.json's, as it stands when a file is sent). Files are
	// opened and removed only inside them; nil means none, so no file
	// can be sent.
	Workspaces func() map[string]string
}

// AddDeliveryWorker registers the deliver_outbound worker.
func AddDeliveryWorker(workers *river.Workers, deps Delivery) error {
	if deps.Pool == nil || deps.Sender == nil {
		return errors.New("delivery worker needs a pool and a sender")
	}
	if deps.Limiter == nil {
		return errors.New("delivery worker needs a limiter")
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	if deps.MaxWait <= 0 {
		deps.MaxWait = 5 * time.Second
	}
	if deps.RunBudget <= 0 {
		deps.RunBudget = 20 * time.Second
	}
	if err := river.AddWorkerSafely(workers, &DeliveryWorker{deps: deps, instance: uuid.New()}); err != nil {
		return fmt.Errorf("register delivery worker: %w", err)
	}
	return nil
}

// Params is one outbound message to queue.
type Params struct {
	AgentID   string
	SessionID *uuid.UUID
	// MessageID is the agent's idempotency key: queuing the same
	// (AgentID, MessageID) again returns the first row.
	MessageID string
	Gateway   string
	DM        string
	ChatID    string
	// Kind is one of package message's kinds (message.Text, ...).
	Kind string
	Text string
	// Workspace names the workspace (in config.json) that holds the
	// file, and FilePath is the file's path relative to it, below
	// .choirtmp/send (see message.FilePath); both are required for every
	// kind but text. The file is deleted once delivered.
	Workspace string
	FilePath  string
	// ApprovalID puts the approval's buttons under the message: the
	// notification of a pending approval.
	ApprovalID *uuid.UUID
	// ResendOf puts a [Send again] button under the message, which sends
	// the unconfirmed text message ResendOf again: the notice that it
	// may not have arrived (see Resends).
	ResendOf *int64
	// MaxPending, when above zero, refuses the message with
	// ErrFull while SessionID already has that many messages
	// pending. An agent's own messages are bounded so (see
	// AgentMaxPending); what choird queues itself (approval
	// notifications, crash notices) leaves it zero and is never refused.
	MaxPending int
}

// AgentMaxPending bounds the messages one session of an agent may
// have waiting for delivery. Telegram sends about one message a second to
// a chat, so a hundred is more than a minute and a half of backlog: an
// agent answering its user never gets near it, and an agent caught in a
// loop is stopped before it fills the outbox (and the user's chat).
const AgentMaxPending = 100

// ErrFull refuses a message while its session has
// Params.MaxPending messages waiting for delivery.
var ErrFull = errors.New("outbox full")

// Queued is the result of EnqueueTx.
type Queued struct {
	Row db.ChoirControlOutbox
	// Created is false when the message was already queued; then no job
	// was inserted.
	Created bool
}

// EnqueueTx queues an outbound message: it inserts the outbox row
// and its deliver_outbound job in the caller's transaction, so the message
// is sent if and only if the transaction commits. A message already queued
// under the same (AgentID, MessageID) is returned as it stands, with no
// second job, even when the session's outbox is full (see
// Params.MaxPending): idempotency comes first.
func EnqueueTx(ctx context.Context, tx pgx.Tx, client jobs.Inserter, p Params) (Queued, error) {
	if err := p.validate(); err != nil {
		return Queued{}, err
	}
	q := seam.Queries(tx)
	row, err := q.OutboxInsert(ctx, db.OutboxInsertParams{AgentID: p.AgentID, SessionID: p.SessionID,
		MessageID: p.MessageID, Gateway: p.Gateway, Dm: p.DM, ChatID: p.ChatID, Kind: p.Kind, Text: p.Text,
		Workspace: p.Workspace, FilePath: p.FilePath, ApprovalID: p.ApprovalID, ResendOf: p.ResendOf,
		MaxPending: int32(p.MaxPending)})
	if errors.Is(err, choirsql.ErrNotFound) {
		// Either the message is already queued, or the outbox is full.
		row, err = q.OutboxGetByMessageID(ctx, db.OutboxGetByMessageIDParams{AgentID: p.AgentID, MessageID: p.MessageID})
		if errors.Is(err, choirsql.ErrNotFound) && p.MaxPending > 0 {
			return Queued{}, fmt.Errorf("message %s: session %s already has %d messages waiting for delivery, the most it may have: %w",
				p.MessageID, p.SessionID, p.MaxPending, ErrFull)
		}
		if err != nil {
			return Queued{}, fmt.Errorf("load queued message %s of agent %s: %w", p.MessageID, p.AgentID, err)
		}
		return Queued{Row: row}, nil
	}
	if err != nil {
		return Queued{}, fmt.Errorf("queue message %s of agent %s: %w", p.MessageID, p.AgentID, err)
	}
	if _, err := client.InsertTx(ctx, tx, DeliverArgs{OutboxID: row.OutboxID}, nil); err != nil {
		return Queued{}, fmt.Errorf("insert delivery job for message %s: %w", p.MessageID, err)
	}
	return Queued{Row: row, Created: true}, nil
}

func (p Params) validate() error {
	switch {
	case p.ResendOf != nil && (p.Kind != message.Text || p.ApprovalID != nil):
		return errors.New("queue outbound message: a [Send again] button goes under a text with no other buttons")
	case p.MaxPending > 0 && p.SessionID == nil:
		return errors.New("queue outbound message: a bound on pending messages needs a session")
	case p.AgentID == "" || p.MessageID == "" || p.Gateway == "" || p.DM == "" || p.ChatID == "":
		return errors.New("queue outbound message: agent, message id, gateway, dm and chat are required")
	case p.Kind == message.Text:
		if p.FilePath != "" || p.Workspace != "" {
			return errors.New("queue outbound message: a text message takes no file")
		}
		if strings.TrimSpace(p.Text) == "" {
			return errors.New("queue outbound message: empty text")
		}
	case p.Kind == message.Document || p.Kind == message.Photo || p.Kind == message.Voice || p.Kind == message.Video:
		if p.Workspace == "" {
			return fmt.Errorf("queue outbound message: file %q names no workspace", p.FilePath)
		}
		if !message.InSendDir(p.FilePath) {
			return fmt.Errorf("queue outbound message: file %q is not a path inside the workspace's %s directory", p.FilePath, message.SendDir)
		}
	default:
		return fmt.Errorf("queue outbound message: unknown kind %q", p.Kind)
	}
	return nil
}

// DeliveryWorker sends outbox rows; Work documents its guarantees.
type DeliveryWorker struct {
	river.WorkerDefaults[DeliverArgs]
	deps Delivery
	// instance names this process in the attempt marks it makes: a mark
	// of another instance was left by a choird that is gone.
	instance uuid.UUID
}

// Timeout bounds one run: the run budget plus one slow upload. It stays
// below River's rescue threshold (one minute in NewClient).
func (w *DeliveryWorker) Timeout(*river.Job[DeliverArgs]) time.Duration {
	return w.deps.RunBudget + 25*time.Second
}

// Work sends the job's outbox row.
//
// Delivery is idempotent by row: a row that is no longer pending is
// skipped. A chat's rows go out in queue order: each run first sends the
// oldest pending row of its chat queued no later than its own (usually its
// own row; otherwise it helps the one ahead). Every Telegram message is
// recorded (sent_ids, and status sent after the last part) in its own short
// transaction that holds the row lock across the send, so two runs never
// send the same part and a restarted run resumes at the first unrecorded
// part. The last part's transaction also completes the job.
//
// A message is sent at most once, whatever dies when. The Bot API has no
// idempotency key, so a part whose send was under way when choird died
// may or may not have reached the user, and sending it again could send
// it twice. Each part is therefore marked as being sent, in a committed
// row, when its request is complete but for its last byte (the send gate,
// message.WithSendGate), and the mark is cleared with the outcome; a run
// that finds a mark its own process did not leave (or one older than a run
// can last) records the part as sent, with message id 0, marks the message
// unconfirmed and moves on, with a warning in the log. A part is lost only
// if choird dies between the mark's commit and the write of that last
// byte: microseconds, against a duplicate on every crash mid-send. Even
// then it is not lost for good: the same transaction queues a notice to
// the chat that the message may not have arrived, with a [Send again]
// button (see Resends), so the person, who alone knows, decides.
func (w *DeliveryWorker) Work(ctx context.Context, job *river.Job[DeliverArgs]) error {
	start := time.Now()
	q := seam.Queries(w.deps.Pool)
	for {
		row, err := q.OutboxGetByID(ctx, job.Args.OutboxID)
		if errors.Is(err, choirsql.ErrNotFound) {
			return river.JobCancel(fmt.Errorf("outbox row %d does not exist", job.Args.OutboxID))
		}
		if err != nil {
			return fmt.Errorf("load outbox row %d: %w", job.Args.OutboxID, err)
		}
		if row.Status != "pending" {
			return pgx.BeginFunc(ctx, w.deps.Pool, func(tx pgx.Tx) error { return completeDelivery(ctx, tx, job) })
		}

		// One reservation per Telegram message, taken before the row
		// lock so no lock is held while waiting.
		if d, cancel := w.deps.Limiter.Reserve(row.Gateway, row.ChatID); d > 0 {
			if d > w.deps.MaxWait || time.Since(start)+d > w.deps.RunBudget {
				cancel()
				return river.JobSnooze(d)
			}
			t := time.NewTimer(d)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				cancel()
				return ctx.Err()
			}
		}
		done, err := w.sendHead(ctx, job, row)
		if err != nil || done {
			return err
		}
	}
}

// sendHead sends the next part of the chat's head row and reports whether
// the job's own row is finished (sent or failed).
func (w *DeliveryWorker) sendHead(ctx context.Context, job *river.Job[DeliverArgs], own db.ChoirControlOutbox) (bool, error) {
	tx, err := w.deps.Pool.Begin(ctx)
	if err != nil {
		return false, fmt.Errorf("begin delivery of outbox row %d: %w", own.OutboxID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit this is a no-op
	q := seam.Queries(tx)

	head, err := q.OutboxLockChatHead(ctx, db.OutboxLockChatHeadParams{Gateway: own.Gateway, ChatID: own.ChatID,
		OutboxID: own.OutboxID})
	if errors.Is(err, choirsql.ErrNotFound) {
		// Another run finished the row while this one waited.
		if err := completeDelivery(ctx, tx, job); err != nil {
			return false, err
		}
		return true, commit(ctx, tx, own.OutboxID)
	}
	if err != nil {
		return false, fmt.Errorf("lock outbox row %d: %w", own.OutboxID, err)
	}
	isOwn := head.OutboxID == own.OutboxID
	logger := w.deps.Logger.With(slog.Int64("outbox_id", head.OutboxID), slog.String("agent_id", head.AgentID),
		slog.String("message_id", head.MessageID), slog.String("gateway", head.Gateway), slog.String("dm", head.Dm))

	parts, file, fileErr := w.partsOf(head)
	idx := len(head.SentIds)
	var sendErr error
	var sentID int64
	switch {
	case fileErr != nil:
		sendErr = permanentError{fileErr}
	case idx >= len(parts):
		sendErr = permanentError{fmt.Errorf("message has %d parts but %d are recorded sent", len(parts), idx)}
	default:
		interrupted, busy := w.attemptOf(head, idx)
		switch {
		case busy:
			// Another run of this process is sending the part now.
			return false, river.JobSnooze(time.Second)
		case interrupted:
			logger.WarnContext(ctx, "a send of this part was cut off when choird stopped; it may have reached the user, "+
				"so it is recorded as sent and not sent again, and the user is offered to have it again", slog.Int("part", idx))
			return w.recordSent(ctx, tx, job, head, isOwn, sent{part: idx, last: idx == len(parts)-1, unconfirmed: true}, file, logger)
		}
		// The row is unlocked: no lock and no connection is held while
		// the channel takes its time. The part is marked as being sent by
		// the send gate, when the request is complete but for its last
		// byte (see message.WithSendGate).
		if err := commit(ctx, tx, head.OutboxID); err != nil {
			return false, err
		}
		var lost bool
		if sentID, sendErr, lost = w.sendPart(ctx, head.OutboxID, idx, parts[idx]); lost {
			// Another run marked the part first; this run's request was
			// abandoned incomplete.
			return false, river.JobSnooze(time.Second)
		}
		var err error
		if tx, err = w.deps.Pool.Begin(ctx); err != nil {
			return false, fmt.Errorf("begin recording the send of outbox row %d: %w", head.OutboxID, err)
		}
		defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit this is a no-op
	}

	if sendErr != nil {
		return w.recordSendError(ctx, tx, job, head, isOwn, idx, sendErr, logger)
	}

	// Telegram has the message: record it before anything else.
	return w.recordSent(ctx, tx, job, head, isOwn, sent{part: idx, id: sentID, last: idx == len(parts)-1}, file, logger)
}

// partsOf cuts the locked row head into the messages the channel sends,
// with the approval's buttons under the last; a file that cannot be sent
// is reported as fileErr.
func (w *DeliveryWorker) partsOf(head db.ChoirControlOutbox) (parts []message.Part, file message.File, fileErr error) {
	if head.FilePath != "" {
		file, fileErr = sendFileOf(head, w.workspaces())
	}
	parts = w.deps.Sender.Parts(message.Part{Gateway: head.Gateway, ChatID: head.ChatID, Kind: head.Kind,
		Text: head.Text, File: file})
	if head.ApprovalID != nil && len(parts) > 0 {
		parts[len(parts)-1].ApprovalID = head.ApprovalID.String()
	}
	if head.ResendOf != nil && len(parts) > 0 {
		parts[len(parts)-1].ResendOf = *head.ResendOf
	}
	return parts, file, fileErr
}

// sendPart sends part idx of outbox row outboxID through the channel,
// behind the part's send gate. It reports lost when another run had
// marked the part first: then the request was abandoned incomplete, and
// nothing was sent.
//
// Every run of a chat's job helps the chat's head, and the mark is made
// only at the gate, after the row lock is released, so two runs of this
// process may both start a request for the same part: the channel then
// sees the loser's request cut off before its last bytes.
func (w *DeliveryWorker) sendPart(ctx context.Context, outboxID int64, idx int, part message.Part) (sentID int64,
	sendErr error, lost bool) {
	claim := w.newClaim(outboxID, idx)
	sentID, sendErr = w.deps.Sender.Send(message.WithSendGate(ctx, claim.pass), part)
	return sentID, sendErr, claim.lost()
}

// recordSendError records a failed send of part idx of head and says what
// comes next: a snooze for as long as the channel asked (a rate limit),
// the row marked failed (an error retrying cannot fix, or the job's last
// attempt), or a retry with backoff. It reports whether the job's own row
// is finished.
func (w *DeliveryWorker) recordSendError(ctx context.Context, tx pgx.Tx, job *river.Job[DeliverArgs],
	head db.ChoirControlOutbox, isOwn bool, idx int, sendErr error, logger *slog.Logger) (bool, error) {
	q := seam.Queries(tx)
	var ra interface{ RetryAfter() time.Duration }
	switch {
	case errors.As(sendErr, &ra):
		d := max(ra.RetryAfter(), time.Second)
		w.deps.Limiter.Backoff(head.Gateway, head.ChatID, d)
		if err := q.OutboxSendFailed(ctx, db.OutboxSendFailedParams{OutboxID: head.OutboxID,
			LastError: sendErr.Error()}); err != nil {
			return false, fmt.Errorf("record rate limit of outbox row %d: %w", head.OutboxID, err)
		}
		if err := commit(ctx, tx, head.OutboxID); err != nil {
			return false, err
		}
		logger.InfoContext(ctx, "delivery rate limited by the channel", slog.Duration("retry_after", d))
		return false, river.JobSnooze(d)
	case !deliveryTemporary(sendErr) || (isOwn && job.Attempt >= job.MaxAttempts):
		if _, err := q.OutboxMarkFailed(ctx, db.OutboxMarkFailedParams{OutboxID: head.OutboxID,
			LastError: sendErr.Error()}); err != nil {
			return false, fmt.Errorf("mark outbox row %d failed: %w", head.OutboxID, err)
		}
		if isOwn && !deliveryTemporary(sendErr) {
			if err := completeDelivery(ctx, tx, job); err != nil {
				return false, err
			}
		}
		if err := commit(ctx, tx, head.OutboxID); err != nil {
			return false, err
		}
		logger.ErrorContext(ctx, "outbound message undeliverable", slog.Int("part", idx),
			slog.String("error", sendErr.Error()))
		if isOwn && deliveryTemporary(sendErr) {
			// The last attempt: River discards the job.
			return true, fmt.Errorf("send outbox row %d: %w", head.OutboxID, sendErr)
		}
		return isOwn, nil
	default:
		if err := q.OutboxSendFailed(ctx, db.OutboxSendFailedParams{OutboxID: head.OutboxID,
			LastError: sendErr.Error()}); err != nil {
			return false, fmt.Errorf("record failed send of outbox row %d: %w", head.OutboxID, err)
		}
		if err := commit(ctx, tx, head.OutboxID); err != nil {
			return false, err
		}
		return false, fmt.Errorf("send outbox row %d part %d: %w", head.OutboxID, idx, sendErr)
	}
}

// attemptOf reports what the mark on part idx of the locked row head
// says: a send of the part was interrupted (a mark left by another
// process, or one older than a run can last), or a run of this process is
// sending it now.
func (w *DeliveryWorker) attemptOf(head db.ChoirControlOutbox, idx int) (interrupted, busy bool) {
	if head.AttemptPart == nil || int(*head.AttemptPart) != idx {
		return false, false
	}
	mine := head.AttemptBy != nil && *head.AttemptBy == w.instance
	if !mine || head.AttemptAt == nil || time.Since(*head.AttemptAt) > w.Timeout(nil) {
		return true, false
	}
	return false, true
}

// claim is the send gate of one part: it marks the part as being sent by
// this process in a statement of its own, once, and only if no run has
// marked it since the row was checked.
type claim struct {
	w        *DeliveryWorker
	outboxID int64
	part     int
	once     sync.Once
	err      error
	taken    atomic.Bool // another run had marked the part
}

func (w *DeliveryWorker) newClaim(outboxID int64, part int) *claim {
	return &claim{w: w, outboxID: outboxID, part: part}
}

func (c *claim) pass(ctx context.Context) error {
	c.once.Do(func() {
		n, err := seam.Queries(c.w.deps.Pool).OutboxAttemptBegin(ctx, db.OutboxAttemptBeginParams{OutboxID: c.outboxID,
			Part: int32(c.part), AttemptBy: c.w.instance})
		switch {
		case err != nil:
			c.err = fmt.Errorf("mark part %d of outbox row %d as being sent: %w", c.part, c.outboxID, err)
		case n != 1:
			c.taken.Store(true)
			c.err = fmt.Errorf("part %d of outbox row %d is being sent by another run", c.part, c.outboxID)
		}
	})
	return c.err
}

func (c *claim) lost() bool { return c.taken.Load() }

// sent is the outcome of one part's send: part number part went out as the
// channel's message id, or, unconfirmed, its send was cut off and it may
// or may not have reached the user (id 0).
type sent struct {
	part        int
	id          int64
	last        bool
	unconfirmed bool
}

// recordSent records part s.part of head as sent, completes the job with
// the row's last part, commits, and then removes a sent file. A part whose
// send is unconfirmed marks the row so, and queues the notice that offers
// it again (queueNoticeTx) in the same transaction. It reports whether the
// job's own row is finished.
func (w *DeliveryWorker) recordSent(ctx context.Context, tx pgx.Tx, job *river.Job[DeliverArgs], head db.ChoirControlOutbox,
	isOwn bool, s sent, file message.File, logger *slog.Logger) (bool, error) {
	idx, last := s.part, s.last
	row, err := seam.Queries(tx).OutboxPartSent(ctx, db.OutboxPartSentParams{OutboxID: head.OutboxID, SentID: s.id,
		Last: last, Part: int32(idx), Unconfirmed: s.unconfirmed})
	if err != nil {
		return false, fmt.Errorf("record part %d of outbox row %d sent: %w", idx, head.OutboxID, err)
	}
	if s.unconfirmed && offersResend(row) {
		ins, err := river.ClientFromContextSafely[pgx.Tx](ctx)
		if err != nil {
			return false, fmt.Errorf("queue the notice about unconfirmed outbox row %d: %w", head.OutboxID, err)
		}
		if err := queueNoticeTx(ctx, tx, ins, row); err != nil {
			return false, err
		}
	}
	if last && isOwn {
		if err := completeDelivery(ctx, tx, job); err != nil {
			return false, err
		}
	}
	if err := commit(ctx, tx, head.OutboxID); err != nil {
		return false, err
	}
	if last && head.FilePath != "" {
		// Only after the commit: a file removed before it would be lost
		// if the commit failed and the send had to be retried.
		if err := file.Remove(); err != nil && !errors.Is(err, os.ErrNotExist) {
			logger.WarnContext(ctx, "remove delivered file", slog.String("error", err.Error()))
		}
	}
	return last && isOwn, nil
}

// workspaces returns the configured workspaces, name to directory.
func (w *DeliveryWorker) workspaces() map[string]string {
	if w.deps.Workspaces == nil {
		return nil
	}
	return w.deps.Workspaces()
}

func commit(ctx context.Context, tx pgx.Tx, outboxID int64) error {
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit delivery of outbox row %d: %w", outboxID, err)
	}
	return nil
}

func completeDelivery(ctx context.Context, tx pgx.Tx, job *river.Job[DeliverArgs]) error {
	if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
		return fmt.Errorf("complete delivery job %d: %w", job.ID, err)
	}
	return nil
}

// permanentError marks an error retrying cannot fix.
type permanentError struct{ err error }

func (e permanentError) Error() string   { return e.err.Error() }
func (e permanentError) Unwrap() error   { return e.err }
func (e permanentError) Temporary() bool { return false }

// deliveryTemporary reports whether a send may succeed on retry: false only
// for errors that say so through a Temporary() bool method.
func deliveryTemporary(err error) bool {
	var t interface{ Temporary() bool }
	if errors.As(err, &t) {
		return t.Temporary()
	}
	return true
}
