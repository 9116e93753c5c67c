// Package schedule is choird's schedules and reminders: creating them
// (from choirctl, or from an agent's choir.schedule and choir.remind tools,
// waiting for a person's approval when the agent's policy says so),
// listing, pausing, resuming and cancelling them, each with the issuer's
// scope checked and the schedule's River job inserted or removed in the
// transaction that changes its row; firing them (the schedule_fire worker,
// whose message reaches the agent through the inbox); and what follows the
// approval a schedule waits for (registered with daemon/approval). A
// schedule's state machine, which a person's stop also drives, is the
// subpackage state; cron expressions are the subpackage cron.
package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/rivertype"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/schedule/cron"
	"github.com/choirhq/choir/daemon/schedule/state"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Jobs is what schedules need of River: inserting a schedule's job in a
// transaction, and deleting it again (*jobs.Client).
type Jobs interface {
	jobs.Inserter
	JobDeleteTx(ctx context.Context, tx pgx.Tx, id int64) (*rivertype.JobRow, error)
}

// Options configure the schedules.
type Options struct {
	Pool *pgxpool.Pool
	Jobs Jobs
	// Config is the running configuration (agents, DMs and their time
	// zones, approval policies).
	Config func() *config.Config
	Logger *slog.Logger
	// Now is the clock (time.Now when nil), the fire worker's too.
	Now func() time.Time
	// DMAddress locates the DM a fire's message comes from (its chat id).
	DMAddress func(dm string) (gateway, chatID string, ok bool)
	// PushPending pushes an agent's pending inbox rows to its live
	// session, reporting whether it has one (inbox.Inbox.PushPending).
	PushPending func(ctx context.Context, agentID string) bool
	// Starter starts the agent of a start_agent schedule that is not
	// running (the control layer); nil starts none.
	Starter Starter
	// Approvals are the registered approval kinds, with which a schedule
	// that waits for a person asks (nil: asked as a plain approval).
	Approvals *approval.Registry
}

// Starter starts an agent (control.Control implements it).
type Starter interface {
	AgentStart(ctx context.Context, sc control.Scope, agentID string, o admin.StartOverrides) (admin.AgentStatus, error)
}

// Service runs the schedule commands of every front-end.
type Service struct {
	pool   *pgxpool.Pool
	jobs   Jobs
	config func() *config.Config
	logger *slog.Logger
	now    func() time.Time

	dmAddress   func(dm string) (gateway, chatID string, ok bool)
	pushPending func(ctx context.Context, agentID string) bool
	starter     Starter
	approvals   *approval.Registry
}

// New makes the schedules of a choird.
func New(o Options) *Service {
	s := &Service{pool: o.Pool, jobs: o.Jobs, config: o.Config, logger: o.Logger, now: o.Now,
		dmAddress: o.DMAddress, pushPending: o.PushPending, starter: o.Starter, approvals: o.Approvals}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.New(slog.DiscardHandler)
	}
	return s
}

// SetJobs sets the River client that schedules' jobs are inserted with,
// once it exists: the service is made before it, since it registers the
// fire worker.
func (s *Service) SetJobs(j Jobs) { s.jobs = j }

// InputError is a schedule refused for one of its fields; the message
// names the field and shows what it takes.
type InputError struct {
	Field, Msg string
}

func (e *InputError) Error() string { return e.Field + ": " + e.Msg }

func invalid(field, format string, args ...any) error {
	return &InputError{Field: field, Msg: fmt.Sprintf(format, args...)}
}

// MaxOpen bounds the open schedules (pending approval, active or paused)
// of one agent, so that an agent caught in a loop cannot fill choird with
// them.
const MaxOpen = 100

// maxAhead bounds how far ahead a one-shot may be.
const maxAhead = 5 * 366 * 24 * time.Hour

// maxListed bounds one listing.
const maxListed = 500

// plan is a checked request: what to insert.
type plan struct {
	params db.ScheduleInsertParams
	// first is the first run.
	first time.Time
}

// check checks a request against the running configuration and turns it
// into a row: the agent and the DM exist, the zone is an IANA name, the
// cron expression parses, a one-shot is in the future.
func (s *Service) check(req admin.ScheduleAddRequest) (plan, error) {
	if err := req.Validate(); err != nil {
		return plan{}, &InputError{Field: "schedule", Msg: err.Error()}
	}
	cfg := s.config()
	a, ok := cfg.Agents[req.AgentID]
	if !ok {
		return plan{}, fmt.Errorf("%w: agent %q is not in config.json (agents: %s)", session.ErrUnknownResource, req.AgentID,
			strings.Join(slices.Sorted(maps.Keys(cfg.Agents)), ", "))
	}
	dmName := req.DM
	if dmName == "" {
		dmName = a.Defaults.DM
	}
	dm, ok := cfg.DMs[dmName]
	if !ok {
		return plan{}, fmt.Errorf("%w: dm %q is not in config.json (dms: %s)", session.ErrUnknownResource, dmName,
			strings.Join(slices.Sorted(maps.Keys(cfg.DMs)), ", "))
	}
	zone := req.TimeZone
	if zone == "" {
		zone = dm.Zone()
	}
	if err := config.CheckTimeZone(zone); err != nil {
		return plan{}, invalid("time_zone", "%v", strings.TrimPrefix(err.Error(), "time_zone: "))
	}
	loc, _ := time.LoadLocation(zone)
	p := plan{params: db.ScheduleInsertParams{AgentID: req.AgentID, Dm: dmName, TimeZone: zone, Purpose: "task",
		Text: req.Text, Missed: req.Missed, StartAgent: req.StartAgent, Status: state.Active}}
	if req.Reminder {
		p.params.Purpose = "reminder"
	}
	now := s.now()
	switch {
	case req.Cron != "":
		c, err := cron.Parse(req.Cron)
		if err != nil {
			return plan{}, invalid("cron", "%v; e.g. %s", err, cron.Example)
		}
		expr := c.String()
		p.params.Kind, p.params.Cron = "cron", &expr
		p.first = c.Next(now, loc)
		if p.params.Missed == "" {
			p.params.Missed = state.MissedSkip
		}
	default:
		at, err := when(req, now, loc)
		if err != nil {
			return plan{}, err
		}
		at = at.Truncate(time.Microsecond)
		p.params.Kind, p.params.RunAt, p.first = "once", &at, at
		if p.params.Missed == "" {
			p.params.Missed = state.MissedRunOnce
		}
	}
	p.params.NextRunAt = &p.first
	return p, nil
}

// when is a one-shot's time, from at or in.
func when(req admin.ScheduleAddRequest, now time.Time, loc *time.Location) (time.Time, error) {
	if req.In != "" {
		d, err := time.ParseDuration(req.In)
		if err != nil || d < time.Second || d > maxAhead {
			return time.Time{}, invalid("in", "%q is not a delay from now between 1s and 5 years: write a Go duration such as \"90s\", \"45m\" or \"2h30m\"", req.In)
		}
		// Rounded up to the second: never earlier than asked, and shown
		// without a fraction.
		at := now.Add(d)
		if t := at.Truncate(time.Second); !t.Equal(at) {
			at = t.Add(time.Second)
		}
		return at, nil
	}
	at, err := ParseAt(req.At, loc)
	if err != nil {
		return time.Time{}, err
	}
	if !at.After(now) {
		return time.Time{}, invalid("at", "%s is in the past (it is now %s): give a future time", at.In(loc).Format(time.RFC3339),
			now.In(loc).Format(time.RFC3339))
	}
	if at.Sub(now) > maxAhead {
		return time.Time{}, invalid("at", "%s is more than 5 years ahead", at.In(loc).Format(time.RFC3339))
	}
	return at, nil
}

// ParseAt reads a one-shot time: RFC 3339 with its offset, or a wall-clock
// time in loc ("2026-03-01 08:00", seconds and a T allowed). A wall-clock
// time that loc skips or repeats resolves as a cron time does
// (cron.Resolve).
func ParseAt(s string, loc *time.Location) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	for _, layout := range []string{"2006-01-02 15:04", "2006-01-02T15:04", "2006-01-02 15:04:05", "2006-01-02T15:04:05"} {
		if c, err := time.Parse(layout, s); err == nil {
			return cron.Resolve(c.Year(), c.Month(), c.Day(), c.Hour(), c.Minute(), loc).Add(time.Duration(c.Second()) * time.Second), nil
		}
	}
	return time.Time{}, invalid("at", "%q is not a time: write \"2026-03-01 08:00\" (in the time zone, %s) or RFC 3339 "+
		"\"2026-03-01T08:00:00+01:00\"", s, loc)
}

// Add creates a schedule for an operator (choirctl): active at once, its
// first run's job queued with it.
func (s *Service) Add(ctx context.Context, sc control.Scope, req admin.ScheduleAddRequest) (admin.Schedule, error) {
	if err := sc.Allow(req.AgentID); err != nil {
		return admin.Schedule{}, err
	}
	p, err := s.check(req)
	if err != nil {
		return admin.Schedule{}, err
	}
	p.params.CreatedBy = sc.Actor
	var row db.ChoirControlSchedule
	err = pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		if row, err = s.insert(ctx, tx, p.params); err != nil {
			return err
		}
		row, err = state.ArmTx(ctx, tx, s.jobs, row, p.first)
		return err
	})
	if err != nil {
		return admin.Schedule{}, err
	}
	s.logger.InfoContext(ctx, "schedule created", slog.Int64("schedule_id", row.ScheduleID), slog.String("agent_id", row.AgentID),
		slog.String("kind", row.Kind), slog.String("by", sc.Actor))
	return Of(row), nil
}

// insert stores a new schedule, within the agent's limit of open ones.
func (s *Service) insert(ctx context.Context, tx pgx.Tx, p db.ScheduleInsertParams) (db.ChoirControlSchedule, error) {
	q := seam.Queries(tx)
	n, err := q.ScheduleCountOpen(ctx, p.AgentID)
	if err != nil {
		return db.ChoirControlSchedule{}, fmt.Errorf("count the schedules of %s: %w", p.AgentID, err)
	}
	if n >= MaxOpen {
		return db.ChoirControlSchedule{}, invalid("schedule", "agent %s already has %d open schedules, the most it may have: "+
			"cancel some first (choirctl schedule list, then choirctl schedule cancel <id>)", p.AgentID, n)
	}
	row, err := q.ScheduleInsert(ctx, p)
	if err != nil {
		return row, fmt.Errorf("store the schedule: %w", err)
	}
	return row, nil
}

// Of is a schedule row as the admin API shows it.
func Of(r db.ChoirControlSchedule) admin.Schedule {
	out := admin.Schedule{ID: r.ScheduleID, AgentID: r.AgentID, DM: r.Dm, Kind: r.Kind, RunAt: r.RunAt, TimeZone: r.TimeZone,
		Purpose: r.Purpose, Text: r.Text, Missed: r.Missed, StartAgent: r.StartAgent, Status: r.Status, CreatedBy: r.CreatedBy,
		Fires: int(r.Fires), LastFiredAt: r.LastFiredAt, CreatedAt: r.CreatedAt}
	if r.Cron != nil {
		out.Cron = *r.Cron
	}
	if r.ApprovalID != nil {
		out.ApprovalID = r.ApprovalID.String()
	}
	if r.Status == state.Active || r.Status == state.Paused {
		out.NextRunAt = r.NextRunAt
	}
	return out
}

// List lists the open schedules (pending approval, active, paused), oldest
// first. An admin lists every agent's, or agentID's; a regular DM only its
// agent's that come to it.
func (s *Service) List(ctx context.Context, sc control.Scope, agentID string) ([]admin.Schedule, error) {
	return List(ctx, s.pool, s.config(), sc, agentID)
}

// List is Service.List on a pool, for front-ends that hold no Service.
func List(ctx context.Context, pool db.DBTX, cfg *config.Config, sc control.Scope, agentID string) ([]admin.Schedule, error) {
	p := db.ScheduleListOpenParams{MaxRows: maxListed}
	switch {
	case !sc.Admin:
		if agentID == "" {
			agentID = sc.Agent
		}
		if err := sc.Allow(agentID); err != nil {
			return nil, err
		}
		if sc.DM != "" {
			p.Dm = &sc.DM
		}
	case agentID != "":
		if _, ok := cfg.Agents[agentID]; !ok {
			return nil, fmt.Errorf("%w: agent %q is not in config.json (agents: %s)", session.ErrUnknownResource, agentID,
				strings.Join(slices.Sorted(maps.Keys(cfg.Agents)), ", "))
		}
	}
	if agentID != "" {
		p.AgentID = &agentID
	}
	rows, err := seam.Queries(pool).ScheduleListOpen(ctx, p)
	if err != nil {
		return nil, fmt.Errorf("list schedules: %w", err)
	}
	out := make([]admin.Schedule, 0, len(rows))
	for _, r := range rows {
		out = append(out, Of(r))
	}
	return out, nil
}

// change locks schedule id, checks the scope on it, and applies fn in the
// same transaction.
func (s *Service) change(ctx context.Context, sc control.Scope, id int64, what string,
	fn func(tx pgx.Tx, r db.ChoirControlSchedule) (db.ChoirControlSchedule, error)) (admin.Schedule, error) {
	var row db.ChoirControlSchedule
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		r, err := seam.Queries(tx).ScheduleLock(ctx, id)
		if errors.Is(err, choirsql.ErrNotFound) {
			return fmt.Errorf("%w: schedule %d does not exist (see choirctl schedule list)", choirsql.ErrNotFound, id)
		}
		if err != nil {
			return fmt.Errorf("load schedule %d: %w", id, err)
		}
		if err := allowChange(sc, r); err != nil {
			return err
		}
		row, err = fn(tx, r)
		return err
	})
	if errors.Is(err, control.ErrForbidden) {
		s.logger.WarnContext(ctx, "schedule change refused", slog.Int64("schedule_id", id), slog.String("change", what),
			slog.String("by", sc.Actor), slog.String("dm", sc.DM), slog.String("error", err.Error()))
	}
	if err != nil {
		return admin.Schedule{}, err
	}
	s.logger.InfoContext(ctx, "schedule "+what, slog.Int64("schedule_id", id), slog.String("agent_id", row.AgentID),
		slog.String("status", row.Status), slog.String("by", sc.Actor))
	return Of(row), nil
}

// allowChange checks sc on schedule r: a regular scope changes only its
// agent's schedules, and, with a DM, only those that come to that DM.
func allowChange(sc control.Scope, r db.ChoirControlSchedule) error {
	if !sc.Admin && sc.Agent != "" && r.AgentID != sc.Agent {
		return fmt.Errorf("%w: schedule %d belongs to agent %s, not %s", control.ErrForbidden, r.ScheduleID, r.AgentID, sc.Agent)
	}
	if err := sc.Allow(r.AgentID); err != nil {
		return fmt.Errorf("schedule %d belongs to agent %s: %w", r.ScheduleID, r.AgentID, err)
	}
	if !sc.Admin && sc.DM != "" && r.Dm != sc.DM {
		return fmt.Errorf("%w: schedule %d comes to another DM, not to %s, which this session is bound to",
			control.ErrForbidden, r.ScheduleID, sc.DM)
	}
	return nil
}

// unarm deletes a schedule's pending job. A job already running finds the
// row changed when it gets the lock, and does nothing.
func (s *Service) unarm(ctx context.Context, tx pgx.Tx, r db.ChoirControlSchedule) error {
	if r.JobID == nil {
		return nil
	}
	_, err := s.jobs.JobDeleteTx(ctx, tx, *r.JobID)
	if err != nil && !errors.Is(err, rivertype.ErrJobRunning) && !errors.Is(err, rivertype.ErrNotFound) {
		return fmt.Errorf("remove the pending run of schedule %d: %w", r.ScheduleID, err)
	}
	return nil
}

// ErrState refuses a change a schedule's status does not allow.
var ErrState = errors.New("schedule is not in a state for that")

// Cancel ends a schedule for good and removes its pending run.
func (s *Service) Cancel(ctx context.Context, sc control.Scope, id int64) (admin.Schedule, error) {
	return s.change(ctx, sc, id, "cancelled", func(tx pgx.Tx, r db.ChoirControlSchedule) (db.ChoirControlSchedule, error) {
		if r.Status == state.Done || r.Status == state.Cancelled {
			return r, fmt.Errorf("%w: schedule %d is already %s", ErrState, id, r.Status)
		}
		if err := s.unarm(ctx, tx, r); err != nil {
			return r, err
		}
		return seam.Queries(tx).ScheduleSetState(ctx, db.ScheduleSetStateParams{ScheduleID: id,
			Status: state.Cancelled})
	})
}

// Pause stops an active schedule from firing until it is resumed; its
// pending run is removed.
func (s *Service) Pause(ctx context.Context, sc control.Scope, id int64) (admin.Schedule, error) {
	return s.change(ctx, sc, id, "paused", func(tx pgx.Tx, r db.ChoirControlSchedule) (db.ChoirControlSchedule, error) {
		if r.Status != state.Active {
			return r, fmt.Errorf("%w: schedule %d is %s; only an active schedule can be paused", ErrState, id, r.Status)
		}
		if err := s.unarm(ctx, tx, r); err != nil {
			return r, err
		}
		return seam.Queries(tx).ScheduleSetState(ctx, db.ScheduleSetStateParams{ScheduleID: id,
			Status: state.Paused, NextRunAt: r.NextRunAt})
	})
}

// Resume makes a paused schedule active again. A cron schedule runs next
// at its first time from now: the times that passed while it was paused
// are not made up. A one-shot keeps its time; one that passed while it
// was paused fires at once if its missed policy is run_once, and ends
// without firing if it is skip.
func (s *Service) Resume(ctx context.Context, sc control.Scope, id int64) (admin.Schedule, error) {
	return s.change(ctx, sc, id, "resumed", func(tx pgx.Tx, r db.ChoirControlSchedule) (db.ChoirControlSchedule, error) {
		if r.Status != state.Paused {
			return r, fmt.Errorf("%w: schedule %d is %s; only a paused schedule can be resumed", ErrState, id, r.Status)
		}
		next, err := state.Next(r, s.now())
		if err != nil {
			return r, err
		}
		return state.ArmTx(ctx, tx, s.jobs, r, next)
	})
}

// Caller is the agent's tool call that asks for a schedule.
// Key is the call's idempotency key (empty from an older agent): the
// schedule is kept under it, so the call run again after a restart finds
// it.
type Caller struct {
	AgentID   string
	SessionID uuid.UUID
	CallID    string
	Key       string
	// Sources are the untrusted sources of the lane that calls: a
	// schedule it makes keeps them, and each fire carries them back.
	Sources []string
}

// byCall is the lookup of the schedule c made, if it made one.
func (c Caller) byCall() db.ScheduleGetByCallParams {
	p := db.ScheduleGetByCallParams{SessionID: &c.SessionID, CallID: &c.CallID, AgentID: c.AgentID}
	if c.Key != "" {
		p.IdempotencyKey = &c.Key
	}
	return p
}
