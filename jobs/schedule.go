package jobs

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs/cron"
	choirsql "github.com/choirhq/choir/sql"
)

// Schedules (DESIGN.md: ours). An active schedule has exactly one pending
// schedule_fire job, scheduled at its next_run_at, and names it in job_id:
// every change of the schedule (arming, firing, pausing, cancelling,
// approving) happens with its row locked and its job inserted or deleted in
// the same transaction, so a schedule never has two jobs, and a job the
// row no longer names is stale and does nothing.

// QueueSchedule runs schedule fires. A fire may start its agent, which
// takes seconds: never on the control queue, whose crash detection must
// not wait.
const QueueSchedule = "schedule"

// ScheduleGateway is the inbox's gateway column for scheduled messages;
// their update id is the fire's id.
const ScheduleGateway = "schedule"

// InboxScheduled is the inbox kind of a scheduled message.
const InboxScheduled = "scheduled"

// ScheduleApprovalType is the request type of the approval a schedule
// made by an agent waits for, when its agent's policy says so.
const ScheduleApprovalType = "choir.schedule"

// ScheduleMissedAfter is how late a fire may run and still count as on
// time: later than that, choird (or River) was down at the due time, and
// the schedule's missed-run policy decides.
const ScheduleMissedAfter = time.Minute

// The schedule statuses and missed-run policies, as stored.
const (
	ScheduleActive          = "active"
	SchedulePaused          = "paused"
	ScheduleDone            = "done"
	ScheduleCancelled       = "cancelled"
	SchedulePendingApproval = "pending_approval"

	MissedSkip    = "skip"
	MissedRunOnce = "run_once"
)

// ScheduleFireArgs fires schedule ScheduleID, due at Due.
type ScheduleFireArgs struct {
	ScheduleID int64     `json:"schedule_id"`
	Due        time.Time `json:"due"`
}

// Kind implements river.JobArgs.
func (ScheduleFireArgs) Kind() string { return "schedule_fire" }

// InsertOpts puts fires on their own queue.
func (ScheduleFireArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueSchedule, MaxAttempts: 10}
}

// ScheduleQueue is the schedule queue's name and configuration.
func ScheduleQueue() (string, river.QueueConfig) {
	return QueueSchedule, river.QueueConfig{MaxWorkers: 4, FetchCooldown: 20 * time.Millisecond,
		FetchPollInterval: 200 * time.Millisecond}
}

// ScheduleNext is the first run of s after after: the next time of its
// cron expression in its zone, or its run_at for a one-shot (whatever
// after is).
func ScheduleNext(s db.ChoirControlSchedule, after time.Time) (time.Time, error) {
	if s.Kind == "once" {
		if s.RunAt == nil {
			return time.Time{}, fmt.Errorf("schedule %d is a one-shot without run_at", s.ScheduleID)
		}
		return *s.RunAt, nil
	}
	if s.Cron == nil {
		return time.Time{}, fmt.Errorf("schedule %d is a cron schedule without an expression", s.ScheduleID)
	}
	c, err := cron.Parse(*s.Cron)
	if err != nil {
		return time.Time{}, err
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		return time.Time{}, fmt.Errorf("schedule %d: time zone %q: %w", s.ScheduleID, s.TimeZone, err)
	}
	next := c.Next(after, loc)
	if next.IsZero() {
		return time.Time{}, fmt.Errorf("schedule %d: %q names no time in the next nine years", s.ScheduleID, *s.Cron)
	}
	return next, nil
}

// ScheduleArmTx makes s active with its next run at next: it inserts the
// fire job, scheduled then, and records it, in the caller's transaction
// (which holds s's row). The time is kept to the microsecond, which is
// what Postgres stores.
func ScheduleArmTx(ctx context.Context, tx pgx.Tx, ins Inserter, s db.ChoirControlSchedule, next time.Time) (db.ChoirControlSchedule, error) {
	next = next.Truncate(time.Microsecond)
	res, err := ins.InsertTx(ctx, tx, ScheduleFireArgs{ScheduleID: s.ScheduleID, Due: next}, &river.InsertOpts{ScheduledAt: next})
	if err != nil {
		return s, fmt.Errorf("queue the next run of schedule %d: %w", s.ScheduleID, err)
	}
	row, err := db.New(choirsql.Interpreted(tx)).ScheduleSetState(ctx, db.ScheduleSetStateParams{ScheduleID: s.ScheduleID,
		Status: ScheduleActive, NextRunAt: &next, JobID: &res.Job.ID})
	if err != nil {
		return s, fmt.Errorf("record the next run of schedule %d: %w", s.ScheduleID, err)
	}
	return row, nil
}

// ScheduleFired is a fire that queued a message, as the worker reports it
// after its commit.
type ScheduleFired struct {
	ScheduleID int64
	AgentID    string
	DM         string
	InboxID    int64
	// StartAgent asks for the agent to be started if it is not running.
	StartAgent bool
}

// scheduleFire is what one fire did.
type scheduleFire struct {
	// Outcome is "fired", "fired_late" or "skipped"; empty when the job
	// was stale and did nothing.
	Outcome string
	Fired   ScheduleFired
	Next    *time.Time
}

// ScheduleFireDeps are what a fire needs besides its transaction.
type ScheduleFireDeps struct {
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// MissedAfter is ScheduleMissedAfter unless set.
	MissedAfter time.Duration
	// DMAddress locates the DM a message comes from (its chat id).
	DMAddress func(dm string) (gateway, chatID string, ok bool)
}

// scheduleFireTx runs one fire of job in tx: the fire's row; unless the
// missed-run policy skips it, the inbox row of its message; and the next
// run's job (or, for a one-shot, the end of the schedule). A job the
// schedule no longer names (paused, cancelled, re-armed) does nothing.
func scheduleFireTx(ctx context.Context, tx pgx.Tx, ins Inserter, job *river.Job[ScheduleFireArgs], deps ScheduleFireDeps) (scheduleFire, error) {
	q := db.New(choirsql.Interpreted(tx))
	s, err := q.ScheduleLock(ctx, job.Args.ScheduleID)
	if errors.Is(err, choirsql.ErrNotFound) {
		return scheduleFire{}, nil
	}
	if err != nil {
		return scheduleFire{}, fmt.Errorf("lock schedule %d: %w", job.Args.ScheduleID, err)
	}
	if s.Status != ScheduleActive || s.JobID == nil || *s.JobID != job.ID {
		return scheduleFire{}, nil
	}
	now := deps.Now()
	due := job.Args.Due
	f := scheduleFire{Outcome: "fired"}
	if now.Sub(due) > deps.MissedAfter {
		f.Outcome = "fired_late"
		if s.Missed == MissedSkip {
			f.Outcome = "skipped"
		}
	}
	fire, err := q.ScheduleFireInsert(ctx, db.ScheduleFireInsertParams{ScheduleID: s.ScheduleID, DueAt: due, FiredAt: now,
		Outcome: f.Outcome})
	if errors.Is(err, choirsql.ErrNotFound) {
		return scheduleFire{}, nil // fired for this time already
	}
	if err != nil {
		return scheduleFire{}, fmt.Errorf("record the fire of schedule %d: %w", s.ScheduleID, err)
	}
	if f.Outcome != "skipped" {
		_, chat, _ := deps.DMAddress(s.Dm)
		row, err := q.InboxInsert(ctx, db.InboxInsertParams{Gateway: ScheduleGateway, UpdateID: fire.FireID, Dm: s.Dm,
			AgentID: &s.AgentID, ChatID: chat, UserID: chat, Kind: InboxScheduled, Text: ScheduleMessage(s, due, now, f.Outcome),
			Attachments: []byte("[]")})
		if err != nil {
			return scheduleFire{}, fmt.Errorf("queue the message of schedule %d: %w", s.ScheduleID, err)
		}
		f.Fired = ScheduleFired{ScheduleID: s.ScheduleID, AgentID: s.AgentID, DM: s.Dm, InboxID: row.InboxID, StartAgent: s.StartAgent}
	}
	p := db.ScheduleFiredParams{ScheduleID: s.ScheduleID, Counted: f.Outcome != "skipped", Status: ScheduleDone}
	if s.Kind == "cron" {
		// The next run is in the future even after downtime: the times
		// missed meanwhile are this one fire, or none.
		next, err := ScheduleNext(s, later(now, due))
		if err != nil {
			return scheduleFire{}, err
		}
		armed, err := ScheduleArmTx(ctx, tx, ins, s, next)
		if err != nil {
			return scheduleFire{}, err
		}
		p.Status, p.NextRunAt, p.JobID, f.Next = ScheduleActive, armed.NextRunAt, armed.JobID, armed.NextRunAt
	}
	if _, err := q.ScheduleFired(ctx, p); err != nil {
		return scheduleFire{}, fmt.Errorf("record the fire of schedule %d: %w", s.ScheduleID, err)
	}
	return f, nil
}

// ScheduleMessage is the text of a fire's message: a bracketed header
// that marks it as scheduled (what, when due, and whether late), then the
// schedule's text. A reminder's header asks the agent to pass it on.
func ScheduleMessage(s db.ChoirControlSchedule, due, now time.Time, outcome string) string {
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	const layout = "Mon 2 Jan 2006 15:04 MST"
	head := fmt.Sprintf("scheduled #%d", s.ScheduleID)
	if s.Cron != nil {
		head += fmt.Sprintf(" (cron %q, %s)", *s.Cron, s.TimeZone)
	}
	if s.Purpose == "reminder" {
		head = fmt.Sprintf("reminder #%d for the user; tell them", s.ScheduleID)
	}
	head += ", due " + due.In(loc).Format(layout)
	if outcome == "fired_late" {
		head += ", late: choird was down at the due time, it is now " + now.In(loc).Format(layout)
	}
	return "[" + head + "] " + s.Text
}

// ScheduleFireWorker fires schedules, in one transaction with the job's
// completion, then tells choird of the message it queued.
type ScheduleFireWorker struct {
	river.WorkerDefaults[ScheduleFireArgs]
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	Deps   ScheduleFireDeps
	// Fired is told of a fire's message after the commit: choird pushes it
	// to the agent's live session, or starts the agent. Nil: the inbox
	// sweep delivers it.
	Fired func(ctx context.Context, f ScheduleFired)
}

// Timeout bounds one run, which may start an agent after its commit.
func (w *ScheduleFireWorker) Timeout(*river.Job[ScheduleFireArgs]) time.Duration {
	return 2 * time.Minute
}

// Work implements river.Worker.
func (w *ScheduleFireWorker) Work(ctx context.Context, job *river.Job[ScheduleFireArgs]) error {
	var f scheduleFire
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var err error
		if f, err = scheduleFireTx(ctx, tx, river.ClientFromContext[pgx.Tx](ctx), job, w.Deps); err != nil {
			return err
		}
		if _, err := river.JobCompleteTx[*riverpgxv5.Driver](ctx, tx, job); err != nil {
			return fmt.Errorf("complete schedule fire job: %w", err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if f.Outcome == "" {
		w.Logger.DebugContext(ctx, "stale schedule job: nothing to fire", slog.Int64("schedule_id", job.Args.ScheduleID))
		return nil
	}
	attrs := []any{slog.Int64("schedule_id", job.Args.ScheduleID), slog.String("outcome", f.Outcome),
		slog.Time("due", job.Args.Due)}
	if f.Next != nil {
		attrs = append(attrs, slog.Time("next_run_at", *f.Next))
	}
	w.Logger.InfoContext(ctx, "schedule fired", attrs...)
	if f.Fired.InboxID != 0 && w.Fired != nil {
		w.Fired(ctx, f.Fired)
	}
	return nil
}

// scheduleApprovalResolvedTx applies an approval's outcome to the schedule
// waiting for it, in the transaction that resolved the approval: approved,
// it is armed (a one-shot whose time passed meanwhile fires at once, on
// time: the wait was a person's, not downtime); rejected or timed out, it
// is cancelled. Other approvals are not its business.
func scheduleApprovalResolvedTx(ctx context.Context, tx pgx.Tx, ins Inserter, a db.ChoirControlPendingApproval, now time.Time) error {
	if a.RequestType != ScheduleApprovalType {
		return nil
	}
	q := db.New(choirsql.Interpreted(tx))
	s, err := q.ScheduleLockByApproval(ctx, &a.ApprovalID)
	if errors.Is(err, choirsql.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lock the schedule of approval %s: %w", a.ApprovalID, err)
	}
	if s.Status != SchedulePendingApproval {
		return nil
	}
	if a.Status != "approved" {
		_, err := q.ScheduleSetState(ctx, db.ScheduleSetStateParams{ScheduleID: s.ScheduleID, Status: ScheduleCancelled})
		return err
	}
	next, err := ScheduleNext(s, now)
	if err != nil {
		return err
	}
	_, err = ScheduleArmTx(ctx, tx, ins, s, later(next, now))
	return err
}

// ScheduleHoldTx pauses agentID's active start_agent schedules, marked
// held, in the transaction that records a person's stop of the agent: a
// schedule does not start an agent a person stopped. Their pending jobs
// become stale. It returns the schedules held.
func ScheduleHoldTx(ctx context.Context, tx pgx.Tx, agentID string) ([]db.ChoirControlSchedule, error) {
	rows, err := db.New(choirsql.Interpreted(tx)).ScheduleHoldStartAgent(ctx, agentID)
	if err != nil {
		return nil, fmt.Errorf("pause the start_agent schedules of %s: %w", agentID, err)
	}
	return rows, nil
}

// ScheduleReleaseTx resumes the schedules a person's stop held, in the
// transaction that records that a person started agentID again: each is
// armed as a resumed schedule is (a cron schedule at its next time from
// now; a one-shot at its time, which the missed-run policy judges if it
// passed). It returns the schedules resumed.
func ScheduleReleaseTx(ctx context.Context, tx pgx.Tx, ins Inserter, agentID string, now time.Time) ([]db.ChoirControlSchedule, error) {
	held, err := db.New(choirsql.Interpreted(tx)).ScheduleListHeld(ctx, agentID)
	if err != nil {
		return nil, fmt.Errorf("load the held schedules of %s: %w", agentID, err)
	}
	out := make([]db.ChoirControlSchedule, 0, len(held))
	for _, r := range held {
		next, err := ScheduleNext(r, now)
		if err != nil {
			return nil, err
		}
		armed, err := ScheduleArmTx(ctx, tx, ins, r, next)
		if err != nil {
			return nil, err
		}
		out = append(out, armed)
	}
	return out, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// AddScheduleWorker registers the schedule_fire worker.
func AddScheduleWorker(workers *river.Workers, w *ScheduleFireWorker) error {
	if w.Deps.Now == nil {
		w.Deps.Now = time.Now
	}
	if w.Deps.MissedAfter <= 0 {
		w.Deps.MissedAfter = ScheduleMissedAfter
	}
	if w.Deps.DMAddress == nil {
		w.Deps.DMAddress = func(string) (string, string, bool) { return "", "", false }
	}
	if w.Logger == nil {
		w.Logger = slog.New(slog.DiscardHandler)
	}
	if err := river.AddWorkerSafely(workers, w); err != nil {
		return fmt.Errorf("register schedule worker: %w", err)
	}
	return nil
}
