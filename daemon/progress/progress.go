// Package progress shows the live progress of agents' core jobs in their
// DMs (spec 7.4): one Telegram message per job of a session, sent when the
// job first reports (REPORT_STATUS on lane core:<job>) and edited in place
// as it advances, saying its state, steps, last progress line and the
// budgets it has left. A job's message is edited at most once per Interval,
// and every send and edit waits for the gateway's shared pacing of the
// chat; reports that arrive meanwhile are coalesced, so the latest state
// always lands, and the final one (completed or terminated) too. The
// message id is kept in Postgres per session and job, so that a restarted
// choird, or a session resumed in a successor, edits the message it
// already sent instead of sending another. Progress is best effort, outside
// the outbox's exactly-once promise: a failed edit is retried a few times
// and then left to the job's next report, and a choird killed between
// Telegram's answer to a send and the write of its id leaves that message
// orphaned. A message whose job will report no more (its session ended,
// or choird stopped before showing its end) is settled by a periodic job
// (settle.go): edited to the job's end, or to "interrupted", never left
// saying the job runs.
package progress

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// DefaultInterval is the shortest time between two changes of one job's
// message: Telegram allows about one message a second in a chat, and a
// job's progress shares the chat with the agent's replies and its other
// jobs.
const DefaultInterval = 3 * time.Second

// Messenger sends and edits the progress messages (the Telegram gateway).
// Both calls wait for the chat's pacing; EditText returns an error wrapping
// gateway.ErrMessageGone when the message cannot be edited any more.
type Messenger interface {
	// Serves reports whether gateway is one the messenger sends through.
	Serves(gateway string) bool
	SendText(ctx context.Context, gateway, chatID, text string) ([]int64, error)
	EditText(ctx context.Context, gateway, chatID string, messageID int64, text string) error
}

// Options configure a Reporter.
type Options struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// Messenger shows the messages; nil (no Telegram gateway) makes
	// Report a no-op.
	Messenger Messenger
	// DMAddress locates a DM of the running configuration: its gateway
	// and chat.
	DMAddress func(dm string) (gateway, chatID string, ok bool)
	// Interval is the shortest time between two changes of a job's
	// message (default DefaultInterval).
	Interval time.Duration
	// MaxAttempts bounds the tries at showing one state that keeps
	// failing (default 5); the job's next report tries again.
	MaxAttempts int
	// SettleAfter is how long a job's session must have ended before its
	// message, left saying it runs, is settled (default
	// DefaultSettleAfter); SettleInterval is how often settling runs
	// (default DefaultSettleInterval). See settle.go.
	SettleAfter    time.Duration
	SettleInterval time.Duration
}

// Reporter keeps each running core job's progress message up to date.
type Reporter struct {
	opts   Options
	logger *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
	jobs   map[key]*job

	// settling is true while a settling run is under way (settle.go).
	settling atomic.Bool
}

// key names a core job of a session.
type key struct {
	session uuid.UUID
	name    string
}

// job is one core job whose progress is shown. Its fields under "runner"
// are used only by the goroutine showing it; at most one runs per job, and
// the next one starts under mu after the last has finished.
type job struct {
	key
	// Under Reporter.mu.
	status   admin.LaneStatus
	seq      uint64 // reports received
	shownSeq uint64 // the report the message shows
	running  bool
	// notBefore is when the message may change next.
	notBefore time.Time
	idleSince time.Time

	// Runner.
	loaded bool
	msg    message
}

// message is where a job's progress is shown and what it shows.
type message struct {
	// gateway is empty when the session's DM is not on a gateway the
	// messenger serves (a console DM): nothing is shown.
	gateway, chat string
	id            int64
	shown         string
	final         bool
}

// New makes a Reporter; Close stops it.
func New(o Options) *Reporter {
	o.Interval = cmp.Or(o.Interval, DefaultInterval)
	o.MaxAttempts = cmp.Or(o.MaxAttempts, 5)
	o.SettleAfter = cmp.Or(o.SettleAfter, DefaultSettleAfter)
	o.SettleInterval = cmp.Or(o.SettleInterval, DefaultSettleInterval)
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Reporter{opts: o, logger: o.Logger.With(slog.String("component", "progress")), ctx: ctx, cancel: cancel,
		jobs: map[key]*job{}}
}

// Close stops showing progress: calls to Telegram under way are abandoned,
// and later reports are ignored.
func (r *Reporter) Close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
	r.cancel()
	r.wg.Wait()
}

// maxIdleJobs is how many jobs are kept before idle ones are forgotten
// (their messages stay known in Postgres).
const maxIdleJobs = 1024

// Report takes a lane's status from a live session. A core job's is shown
// in the session's DM, at once for a new job and otherwise when the job's
// interval allows; it never blocks.
func (r *Reporter) Report(sessionID uuid.UUID, st rpc.ReportStatusRequest) {
	name, ok := admin.CoreJobName(st.Lane)
	if !ok || r.opts.Messenger == nil {
		return
	}
	l := admin.LaneStatus{Lane: st.Lane, State: st.State, Skill: st.Skill, Step: st.Step,
		BudgetRemaining: st.BudgetRemaining, Steps: st.Steps, Progress: st.Progress}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return
	}
	k := key{sessionID, name}
	j := r.jobs[k]
	if j == nil {
		if len(r.jobs) >= maxIdleJobs {
			r.forgetIdleLocked()
		}
		j = &job{key: k}
		r.jobs[k] = j
	}
	j.status = l
	j.seq++
	if !j.running {
		j.running = true
		r.wg.Add(1)
		go r.run(j)
	}
}

// forgetIdleLocked drops the jobs nothing has happened to for a while.
func (r *Reporter) forgetIdleLocked() {
	for k, j := range r.jobs {
		if !j.running && time.Since(j.idleSince) > 10*r.opts.Interval {
			delete(r.jobs, k)
		}
	}
}

// run shows j's latest status until its message is up to date, waiting
// out the interval between two changes; reports that come meanwhile are
// shown together, as the latest.
func (r *Reporter) run(j *job) {
	defer r.wg.Done()
	failures := 0
	for {
		r.mu.Lock()
		if j.shownSeq == j.seq || r.ctx.Err() != nil {
			j.running, j.idleSince = false, time.Now()
			if j.shownSeq == j.seq && admin.CoreDone(j.status.State) {
				// Its last state is shown: a job of the same name later
				// is a new job, found anew.
				delete(r.jobs, j.key)
			}
			r.mu.Unlock()
			return
		}
		wait := time.Until(j.notBefore)
		r.mu.Unlock()
		if wait > 0 && !sleep(r.ctx, wait) {
			continue
		}
		r.mu.Lock()
		st, seq := j.status, j.seq
		r.mu.Unlock()

		err := r.show(j, st)

		r.mu.Lock()
		j.notBefore = time.Now().Add(r.opts.Interval)
		switch {
		case err == nil:
			j.shownSeq, failures = seq, 0
		case r.ctx.Err() != nil:
		case failures+1 < r.opts.MaxAttempts && retryable(err):
			failures++
			j.notBefore = time.Now().Add(retryDelay(err, failures))
		default:
			r.logger.Warn("core job progress not shown; its next report tries again", slog.String("session_id", j.session.String()),
				slog.String("job", j.name), slog.Int("attempts", failures+1), slog.String("error", err.Error()))
			j.shownSeq, failures = seq, 0
		}
		r.mu.Unlock()
	}
}

// show makes j's message show st: sent if the job has none yet, edited if
// it shows something else.
func (r *Reporter) show(j *job, st admin.LaneStatus) error {
	ctx := r.ctx
	if !j.loaded {
		m, err := r.load(ctx, j.key)
		if err != nil {
			return err
		}
		j.msg, j.loaded = m, true
	}
	if j.msg.gateway == "" {
		return nil
	}
	text := strings.Join(admin.ProgressLines(j.name, st), "\n")
	final := admin.CoreDone(st.State)
	if j.msg.final && !final {
		// The job of this name had finished: this is a new one, with a
		// message of its own.
		j.msg.id = 0
	}
	if j.msg.id != 0 && j.msg.shown == text {
		return nil
	}
	if j.msg.id != 0 {
		err := r.opts.Messenger.EditText(ctx, j.msg.gateway, j.msg.chat, j.msg.id, text)
		switch {
		case errors.Is(err, gateway.ErrMessageGone):
			r.logger.Info("core job progress message is gone; sending a new one", slog.String("session_id", j.session.String()),
				slog.String("job", j.name), slog.Int64("message_id", j.msg.id))
			j.msg.id = 0
		case err != nil:
			return err
		}
	}
	if j.msg.id == 0 {
		ids, err := r.opts.Messenger.SendText(ctx, j.msg.gateway, j.msg.chat, text)
		if err != nil {
			return err
		}
		if len(ids) == 0 {
			return fmt.Errorf("send the progress of core job %s: no message was sent", j.name)
		}
		j.msg.id = ids[len(ids)-1]
	}
	j.msg.shown, j.msg.final = text, final
	r.save(ctx, j)
	return nil
}

// save records j's message. A failure is only logged: the message is
// known here, and the next change saves it again.
func (r *Reporter) save(ctx context.Context, j *job) {
	// Telegram has the message: its id is worth keeping even when choird
	// is stopping.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := seam.Queries(r.opts.Pool).CoreProgressSave(ctx, db.CoreProgressSaveParams{SessionID: j.session,
		JobName: j.name, Gateway: j.msg.gateway, ChatID: j.msg.chat, MessageID: j.msg.id, Shown: j.msg.shown, Final: j.msg.final})
	if err != nil {
		r.logger.Warn("core job progress message not recorded", slog.String("session_id", j.session.String()),
			slog.String("job", j.name), slog.Int64("message_id", j.msg.id), slog.String("error", err.Error()))
	}
}

// load finds where k's progress goes (the session's DM) and the message
// it already has there, if any.
func (r *Reporter) load(ctx context.Context, k key) (message, error) {
	q := seam.Queries(r.opts.Pool)
	s, err := q.SessionGetByID(ctx, k.session)
	if err != nil {
		return message{}, fmt.Errorf("load session %s: %w", k.session, err)
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(s.ResourceBindings, &b); err != nil {
		return message{}, fmt.Errorf("session %s bindings: %w", k.session, err)
	}
	gw, chat, ok := r.opts.DMAddress(b.DM)
	if !ok || !r.opts.Messenger.Serves(gw) {
		return message{}, nil
	}
	m := message{gateway: gw, chat: chat}
	row, err := q.CoreProgressFind(ctx, db.CoreProgressFindParams{SessionID: k.session, JobName: k.name})
	switch {
	case errors.Is(err, choirsql.ErrNotFound):
	case err != nil:
		return message{}, fmt.Errorf("look up the progress message of core job %s: %w", k.name, err)
	case row.Gateway == gw && row.ChatID == chat:
		m.id, m.shown, m.final = row.MessageID, row.Shown, row.Final
	}
	return m, nil
}

// retryable reports whether showing a state again may succeed: not after
// Telegram refused the request for good (a bad request, a blocked bot).
func retryable(err error) bool {
	var t interface{ Temporary() bool }
	return !errors.As(err, &t) || t.Temporary()
}

// retryDelay is how long to wait before the next try: what Telegram asked
// for after a 429, else one second doubling up to 30.
func retryDelay(err error, failures int) time.Duration {
	var ra interface{ RetryAfter() time.Duration }
	if errors.As(err, &ra) {
		return ra.RetryAfter()
	}
	return min(time.Second<<(failures-1), 30*time.Second)
}

// sleep waits d or until ctx ends, reporting whether the full d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
