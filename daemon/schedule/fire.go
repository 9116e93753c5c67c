package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/inbox"
	"github.com/choirhq/choir/daemon/schedule/state"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Firing. A schedule's schedule_fire job (package state) runs at its next
// run: in one transaction with the job's completion, the fire's row, the
// inbox row of its message (unless the missed-run policy skips it) and the
// next run's job. After the commit the message is pushed to the agent, or
// the agent is started for it (Service.Fired).

// InboxSource is the inbox's gateway column for scheduled messages; their
// update id is the fire's id.
const InboxSource = "schedule"

// MissedAfter is how late a fire may run and still count as on time:
// later than that, choird (or River) was down at the due time, and the
// schedule's missed-run policy decides.
const MissedAfter = time.Minute

// Fired is a fire that queued a message, as the worker reports it
// after its commit.
type Fired struct {
	ScheduleID int64
	AgentID    string
	DM         string
	InboxID    int64
	// StartAgent asks for the agent to be started if it is not running.
	StartAgent bool
}

// fireResult is what one fire did.
type fireResult struct {
	// Outcome is "fired", "fired_late" or "skipped"; empty when the job
	// was stale and did nothing.
	Outcome string
	Fired   Fired
	Next    *time.Time
}

// FireDeps are what a fire needs besides its transaction.
type FireDeps struct {
	// Now is the clock (time.Now when nil).
	Now func() time.Time
	// MissedAfter is the package's MissedAfter unless set.
	MissedAfter time.Duration
	// DMAddress locates the DM a message comes from (its chat id).
	DMAddress func(dm string) (gateway, chatID string, ok bool)
}

// fireTx runs one fire of job in tx: the fire's row; unless the
// missed-run policy skips it, the inbox row of its message; and the next
// run's job (or, for a one-shot, the end of the schedule). A job the
// schedule no longer names (paused, cancelled, re-armed) does nothing.
func fireTx(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, job *river.Job[state.FireArgs], deps FireDeps) (fireResult, error) {
	q := seam.Queries(tx)
	s, err := q.ScheduleLock(ctx, job.Args.ScheduleID)
	if errors.Is(err, choirsql.ErrNotFound) {
		return fireResult{}, nil
	}
	if err != nil {
		return fireResult{}, fmt.Errorf("lock schedule %d: %w", job.Args.ScheduleID, err)
	}
	if s.Status != state.Active || s.JobID == nil || *s.JobID != job.ID {
		return fireResult{}, nil
	}
	now := deps.Now()
	due := job.Args.Due
	f := fireResult{Outcome: "fired"}
	if now.Sub(due) > deps.MissedAfter {
		f.Outcome = "fired_late"
		if s.Missed == state.MissedSkip {
			f.Outcome = "skipped"
		}
	}
	fire, err := q.ScheduleFireInsert(ctx, db.ScheduleFireInsertParams{ScheduleID: s.ScheduleID, DueAt: due, FiredAt: now,
		Outcome: f.Outcome})
	if errors.Is(err, choirsql.ErrNotFound) {
		return fireResult{}, nil // fired for this time already
	}
	if err != nil {
		return fireResult{}, fmt.Errorf("record the fire of schedule %d: %w", s.ScheduleID, err)
	}
	if f.Outcome != "skipped" {
		_, chat, _ := deps.DMAddress(s.Dm)
		row, err := inbox.AddNotice(ctx, tx, inbox.Notice{Source: InboxSource, UpdateID: fire.FireID, DM: s.Dm,
			AgentID: s.AgentID, ChatID: chat, Kind: inbox.KindScheduled, Text: Message(s, due, now, f.Outcome),
			Sources: s.Sources})
		if err != nil {
			return fireResult{}, fmt.Errorf("queue the message of schedule %d: %w", s.ScheduleID, err)
		}
		f.Fired = Fired{ScheduleID: s.ScheduleID, AgentID: s.AgentID, DM: s.Dm, InboxID: row.InboxID, StartAgent: s.StartAgent}
	}
	p := db.ScheduleFiredParams{ScheduleID: s.ScheduleID, Counted: f.Outcome != "skipped", Status: state.Done}
	if s.Kind == "cron" {
		// The next run is in the future even after downtime: the times
		// missed meanwhile are this one fire, or none.
		next, err := state.Next(s, state.Later(now, due))
		if err != nil {
			return fireResult{}, err
		}
		armed, err := state.ArmTx(ctx, tx, ins, s, next)
		if err != nil {
			return fireResult{}, err
		}
		p.Status, p.NextRunAt, p.JobID, f.Next = state.Active, armed.NextRunAt, armed.JobID, armed.NextRunAt
	}
	if _, err := q.ScheduleFired(ctx, p); err != nil {
		return fireResult{}, fmt.Errorf("record the fire of schedule %d: %w", s.ScheduleID, err)
	}
	return f, nil
}

// Message is the text of a fire's message: a bracketed header
// that marks it as scheduled (what, when due, and whether late), then the
// schedule's text. A reminder's header asks the agent to pass it on.
func Message(s db.ChoirControlSchedule, due, now time.Time, outcome string) string {
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
	head += ", due " + due.In(loc).Format(layout) + ", made by " + creator(s.CreatedBy)
	if outcome == "fired_late" {
		head += ", late: choird was down at the due time, it is now " + now.In(loc).Format(layout)
	}
	return "[" + head + "] " + s.Text
}

// creator says who made a schedule, from its created_by: the agent itself
// ("agent:<id>"), or a person through choirctl or the DM.
func creator(createdBy string) string {
	if id, ok := strings.CutPrefix(createdBy, "agent:"); ok {
		return "you (agent " + id + ")"
	}
	if createdBy == "" {
		return "a person"
	}
	return createdBy
}

// FireWorker fires schedules, in one transaction with the job's
// completion, then tells choird of the message it queued.
type FireWorker struct {
	river.WorkerDefaults[state.FireArgs]
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	Deps   FireDeps
	// Fired is told of a fire's message after the commit: choird pushes it
	// to the agent's live session, or starts the agent. Nil: the inbox
	// sweep delivers it.
	Fired func(ctx context.Context, f Fired)
}

// Timeout bounds one run, which may start an agent after its commit.
func (w *FireWorker) Timeout(*river.Job[state.FireArgs]) time.Duration {
	return 2 * time.Minute
}

// Work implements river.Worker.
func (w *FireWorker) Work(ctx context.Context, job *river.Job[state.FireArgs]) error {
	var f fireResult
	err := pgx.BeginFunc(ctx, w.Pool, func(tx pgx.Tx) error {
		var err error
		if f, err = fireTx(ctx, tx, river.ClientFromContext[pgx.Tx](ctx), job, w.Deps); err != nil {
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

// AddFireWorker registers the schedule_fire worker.
func AddFireWorker(workers *river.Workers, w *FireWorker) error {
	if w.Deps.Now == nil {
		w.Deps.Now = time.Now
	}
	if w.Deps.MissedAfter <= 0 {
		w.Deps.MissedAfter = MissedAfter
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

var _ jobs.QueueFeature = (*Service)(nil)

// AddWorkers registers the schedule_fire worker (jobs.Feature), which
// tells the service of each fire's message (Fired).
func (s *Service) AddWorkers(workers *river.Workers) error {
	return AddFireWorker(workers, &FireWorker{Pool: s.pool, Logger: s.logger, Fired: s.Fired,
		Deps: FireDeps{Now: s.now, DMAddress: s.dmAddress}})
}

// Queues is the schedule queue (jobs.QueueFeature).
func (s *Service) Queues() map[string]river.QueueConfig {
	name, qc := state.FireQueue()
	return map[string]river.QueueConfig{name: qc}
}

// Fired hands a fire's message, committed to the inbox, to its agent:
// pushed at once to a live session; for an agent that is not running,
// kept for its next session, or, when the schedule says so, the agent is
// started with its defaults (its hello pushes the message). That start is
// choird's own: refused while a person's stop holds the agent, and its
// session continues the budget of the one before (session.ByChoird).
func (s *Service) Fired(ctx context.Context, f Fired) {
	if (s.pushPending != nil && s.pushPending(ctx, f.AgentID)) || !f.StartAgent || s.starter == nil {
		return
	}
	by := fmt.Sprintf("schedule:%d", f.ScheduleID)
	if _, err := s.starter.AgentStart(ctx, control.Scope{Admin: true, Actor: by, Unattended: true}, f.AgentID, admin.StartOverrides{}); err != nil {
		s.logger.WarnContext(ctx, "schedule could not start its agent; its message waits for the next session",
			slog.Int64("schedule_id", f.ScheduleID), slog.String("agent_id", f.AgentID), slog.String("error", err.Error()))
		return
	}
	s.logger.InfoContext(ctx, "agent started by its schedule", slog.Int64("schedule_id", f.ScheduleID),
		slog.String("agent_id", f.AgentID))
}
