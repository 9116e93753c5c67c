package session

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/sql/seam"
)

// The daily rollover (issue 31). A session that choird resumes across its
// restarts would otherwise live for weeks, and its per-session budgets
// (total_session_tokens, max_tool_calls_per_session, session_cost_usd)
// would become lifetime budgets: the agent would stop working one day. So
// a session lasts at most a day: at its DM's local midnight (the DM's
// time_zone, UTC by default), or at its first idle moment after that, the
// session rolls over. choird ends it through the graceful stop (the
// agent's session summary, the final heartbeat, the chunking into memory)
// and starts its successor with the same bindings and overrides, which
// resumes the chain (the conversation, the summary, open work) with fresh
// per-session budgets. Day caps count per day in the same zone anyway.
//
// A session is idle when its edge lane is IDLE, no core job runs, and no
// message from its DM of the last RolloverPendingWindow waits undelivered:
// a turn in progress and a job running across midnight are never cut off,
// the rollover waits for them. A message that arrives as the rollover
// begins is answered by the old session, whose shutdown lets the turn
// finish (rpc.Shutdown.AfterTurn), or, not yet taken, is delivered to the
// successor, as after any restart.
//
// The successor is owed from the moment the stop begins (successor_due):
// if its start fails, or choird stops between the stop and the start, the
// next run starts it. The same mark brings back, at the midnight after, an
// agent that ended its session with a per-session budget used up.

// DefaultRolloverInterval is how often the rollover job looks for
// sessions due: a session rolls over within about a minute of midnight,
// or of its first idle moment after it.
const DefaultRolloverInterval = time.Minute

// RolloverPendingWindow is how recent an undelivered message must be to
// hold a rollover back: an older one is stuck, not on its way.
const RolloverPendingWindow = 10 * time.Minute

// QueueRollover runs the rollover: one session at a time, each a graceful
// stop and a start that may take a minute, kept off the control queue so
// crash detection never waits behind it.
const QueueRollover = "rollover"

// Rollover is the daily rollover as choird runs it (a jobs.Feature).
type Rollover struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Now is choird's clock; nil is time.Now. Tests move it past a
	// midnight instead of waiting for one.
	Now func() time.Time
	// ZoneFunc returns the time zone of a DM (UTC for one config.json no
	// longer names).
	ZoneFunc func(dm string) *time.Location
	// Interval is how often sessions are looked at (default
	// DefaultRolloverInterval).
	Interval time.Duration
	// RolloverFunc ends the live session from of agentID and starts its
	// successor (control.Control.AgentRollover). It returns false, nil when
	// there was nothing to roll over (the session ended meanwhile).
	RolloverFunc func(ctx context.Context, agentID string, from uuid.UUID) (bool, error)
	// RestartFunc starts the successor of ended session from of agentID,
	// which owes one (control.Control.AgentRolloverStart); nil starts
	// none.
	RestartFunc func(ctx context.Context, agentID string, from uuid.UUID) error
}

// AddWorkers registers the rollover worker.
func (r Rollover) AddWorkers(workers *river.Workers) error {
	if err := river.AddWorkerSafely(workers, &RolloverWorker{Rollover: r}); err != nil {
		return fmt.Errorf("register session rollover worker: %w", err)
	}
	return nil
}

// Queues is the rollover's queue: one worker, so that two rollovers never
// race for the same agent.
func (r Rollover) Queues() map[string]river.QueueConfig {
	return map[string]river.QueueConfig{QueueRollover: {MaxWorkers: 1, FetchCooldown: 50 * time.Millisecond,
		FetchPollInterval: 200 * time.Millisecond}}
}

// PeriodicJobs is the rollover's look at the live sessions, every
// Interval.
func (r Rollover) PeriodicJobs() []*river.PeriodicJob {
	interval := r.Interval
	if interval <= 0 {
		interval = DefaultRolloverInterval
	}
	return []*river.PeriodicJob{river.NewPeriodicJob(river.PeriodicInterval(interval),
		func() (river.JobArgs, *river.InsertOpts) { return RolloverArgs{}, nil },
		&river.PeriodicJobOpts{ID: "session_rollover", RunOnStart: true})}
}

// RolloverArgs is the periodic rollover job.
type RolloverArgs struct{}

// Kind implements river.JobArgs.
func (RolloverArgs) Kind() string { return "session_rollover" }

// InsertOpts puts the rollover on its queue. A failed run is not retried:
// the next periodic run looks again.
func (RolloverArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: QueueRollover, MaxAttempts: 1}
}

// RolloverWorker arms each new session's rollover and rolls over the
// sessions that are due and idle.
type RolloverWorker struct {
	river.WorkerDefaults[RolloverArgs]
	Rollover
}

// Timeout bounds one run: a few graceful stops and starts.
func (w *RolloverWorker) Timeout(*river.Job[RolloverArgs]) time.Duration { return 10 * time.Minute }

// Work implements river.Worker.
func (w *RolloverWorker) Work(ctx context.Context, _ *river.Job[RolloverArgs]) error {
	logger := w.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	now := time.Now
	if w.Now != nil {
		now = w.Now
	}
	if err := w.startDue(ctx, logger, now); err != nil {
		return err
	}
	q := seam.Queries(w.Pool)
	rows, err := q.SessionsRolloverCandidates(ctx, RolloverPendingWindow.Seconds())
	if err != nil {
		return fmt.Errorf("list sessions for the rollover: %w", err)
	}
	for _, s := range rows {
		t := now()
		if s.RolloverAt == nil {
			at := NextMidnight(t, w.zone(s.Dm))
			if _, err := q.SessionRolloverArm(ctx, db.SessionRolloverArmParams{SessionID: s.SessionID, RolloverAt: &at}); err != nil {
				return fmt.Errorf("arm the rollover of session %s: %w", s.SessionID, err)
			}
			continue
		}
		if t.Before(*s.RolloverAt) {
			continue
		}
		if why := busy(s); why != "" {
			logger.DebugContext(ctx, "session due to roll over waits: "+why, slog.String("agent_id", s.AgentID),
				slog.String("session_id", s.SessionID.String()))
			continue
		}
		done, err := w.RolloverFunc(ctx, s.AgentID, s.SessionID)
		if err != nil {
			// The next run tries again; the others are not held back.
			logger.ErrorContext(ctx, "session not rolled over", slog.String("agent_id", s.AgentID),
				slog.String("session_id", s.SessionID.String()), slog.String("error", err.Error()))
			continue
		}
		if done {
			logger.InfoContext(ctx, "session rolled over", slog.String("agent_id", s.AgentID),
				slog.String("session_id", s.SessionID.String()), slog.Time("due", *s.RolloverAt))
		}
	}
	return nil
}

// startDue starts the successor of each session that ended owing one
// (successor_due), once its time has come: at once after a rollover whose
// start did not happen (choird stopped in between, or the start failed),
// at the midnight after the end for a session whose budget was used up (a
// per-session budget is a day's: the agent works again the next day).
func (w *RolloverWorker) startDue(ctx context.Context, logger *slog.Logger, now func() time.Time) error {
	if w.RestartFunc == nil {
		return nil
	}
	rows, err := seam.Queries(w.Pool).SessionsSuccessorDue(ctx)
	if err != nil {
		return fmt.Errorf("list sessions owed a successor: %w", err)
	}
	for _, s := range rows {
		due := s.RolloverAt
		if due == nil {
			at := NextMidnight(*s.EndedAt, w.zone(s.Dm))
			due = &at
		}
		if now().Before(*due) {
			continue
		}
		if err := w.RestartFunc(ctx, s.AgentID, s.SessionID); err != nil {
			logger.ErrorContext(ctx, "successor not started; the next run tries again", slog.String("agent_id", s.AgentID),
				slog.String("session_id", s.SessionID.String()), slog.String("error", err.Error()))
			continue
		}
		logger.InfoContext(ctx, "successor started with a fresh budget", slog.String("agent_id", s.AgentID),
			slog.String("from", s.SessionID.String()))
	}
	return nil
}

func (w *RolloverWorker) zone(dm string) *time.Location {
	if w.ZoneFunc != nil {
		if loc := w.ZoneFunc(dm); loc != nil {
			return loc
		}
	}
	return time.UTC
}

// busy says why a session is not idle, or "" when it is: its edge lane is
// in a turn, a core job runs, or a message is on its way to it.
func busy(s db.SessionsRolloverCandidatesRow) string {
	if s.InboxPending {
		return "a message is on its way to the agent"
	}
	lanes := map[string]admin.LaneStatus{}
	if err := json.Unmarshal(s.LaneStatus, &lanes); err != nil {
		return "its lanes' states are unreadable"
	}
	for name, l := range lanes {
		if name == "edge" && l.State != "EDGE_IDLE" && l.State != "IDLE" {
			return "the edge lane is " + admin.StateText(l.State)
		}
		if job, ok := admin.CoreJobName(name); ok && !admin.CoreDone(l.State) {
			return "core job " + job + " is " + admin.StateText(l.State)
		}
	}
	if _, ok := lanes["edge"]; !ok {
		return "the edge lane has not reported yet"
	}
	return ""
}

// NextMidnight is the first midnight in loc after t: when a session that
// starts at t rolls over.
func NextMidnight(t time.Time, loc *time.Location) time.Time {
	l := t.In(loc)
	return time.Date(l.Year(), l.Month(), l.Day()+1, 0, 0, 0, 0, loc)
}
