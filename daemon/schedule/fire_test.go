package schedule_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/daemon/outbox/outboxtest"
	"github.com/choirhq/choir/daemon/schedule"
	"github.com/choirhq/choir/daemon/schedule/state"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// fakeClock is the schedule worker's injected clock.
// testAgent owns the schedules fired here.
const testAgent = "courier"

type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

type scheduleBundle struct {
	pool   *pgxpool.Pool
	client *jobs.Client
	clock  *fakeClock
	fired  chan schedule.Fired
}

// setupSchedules starts a River client that runs the schedule worker on
// the fake clock, on a fresh database with agent testAgent.
func setupSchedules(t *testing.T) *scheduleBundle {
	t.Helper()
	b := &scheduleBundle{pool: dbtest.NewPool(t), clock: &fakeClock{}, fired: make(chan schedule.Fired, 16)}
	if _, err := seam.Queries(b.pool).AgentUpsert(context.Background(), db.AgentUpsertParams{AgentID: testAgent,
		Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	workers := river.NewWorkers()
	if err := schedule.AddFireWorker(workers, &schedule.FireWorker{Pool: b.pool,
		Fired: func(_ context.Context, f schedule.Fired) { b.fired <- f },
		Deps: schedule.FireDeps{Now: b.clock.Now,
			DMAddress: func(string) (string, string, bool) { return "tg", "4242", true }}}); err != nil {
		t.Fatal(err)
	}
	name, qc := state.FireQueue()
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{Queues: map[string]river.QueueConfig{name: qc},
		Workers: workers, TestOnly: true, FetchCooldown: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		client.Stop(ctx) //nolint:errcheck
	})
	b.client = client
	return b
}

// add stores a schedule and arms it for due on the fake clock, with a job
// that River runs at once (River runs on the real clock).
func (b *scheduleBundle) add(t *testing.T, kind, spec, zone, missed string, due time.Time) db.ChoirControlSchedule {
	t.Helper()
	ctx := context.Background()
	p := db.ScheduleInsertParams{AgentID: testAgent, Dm: outboxtest.DM, Kind: kind, TimeZone: zone, Purpose: "task",
		Text: "water the plants", Missed: missed, Status: state.Active, CreatedBy: "test", NextRunAt: &due}
	if kind == "cron" {
		p.Cron = &spec
	} else {
		p.RunAt = &due
	}
	var row db.ChoirControlSchedule
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		q := seam.Queries(tx)
		s, err := q.ScheduleInsert(ctx, p)
		if err != nil {
			return err
		}
		res, err := b.client.InsertTx(ctx, tx, state.FireArgs{ScheduleID: s.ScheduleID, Due: due}, nil)
		if err != nil {
			return err
		}
		row, err = q.ScheduleSetState(ctx, db.ScheduleSetStateParams{ScheduleID: s.ScheduleID, Status: state.Active,
			NextRunAt: &due, JobID: &res.Job.ID})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return row
}

// fireOf waits for the fire of schedule id and returns its outcome.
func (b *scheduleBundle) fireOf(t *testing.T, id int64) string {
	t.Helper()
	var outcome string
	choirdtest.WaitFor(t, "the schedule's fire", nil, func() bool {
		b.pool.QueryRow(context.Background(), `SELECT outcome FROM choir_control.schedule_fires WHERE schedule_id = $1`,
			id).Scan(&outcome)
		return outcome != ""
	})
	return outcome
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// TestScheduleFireFollowsTheClock runs fires on an injected clock: on
// time, late with each missed-run policy, and across a daylight-saving
// change, checking each fire's row, its message in the inbox, and the
// next run armed in the schedule's zone. The dates lie years ahead of the
// real clock, which River's scheduler follows: a next run armed in the
// real past would be promoted and run while the test looks at it.
func TestScheduleFireFollowsTheClock(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t)
	ctx := context.Background()
	tests := []struct {
		name, kind, spec, zone, missed string
		due, now                       string
		outcome                        string
		next                           string // empty: the schedule is done
	}{
		{"OnTimeCronArmsTheNextDay", "cron", "0 8 * * *", "Europe/Berlin", state.MissedSkip,
			"2036-01-05T08:00:00+01:00", "2036-01-05T08:00:40+01:00", "fired", "2036-01-06T08:00:00+01:00"},
		{"LateWithSkipFiresNothing", "cron", "0 8 * * *", "Europe/Berlin", state.MissedSkip,
			"2036-01-05T08:00:00+01:00", "2036-01-07T09:30:00+01:00", "skipped", "2036-01-08T08:00:00+01:00"},
		{"LateWithRunOnceFiresOnce", "cron", "0 8 * * *", "Europe/Berlin", state.MissedRunOnce,
			"2036-01-05T08:00:00+01:00", "2036-01-07T09:30:00+01:00", "fired_late", "2036-01-08T08:00:00+01:00"},
		{"NextRunAcrossSpringForward", "cron", "30 2 * * *", "America/New_York", state.MissedSkip,
			"2036-03-08T02:30:00-05:00", "2036-03-08T02:30:01-05:00", "fired", "2036-03-09T03:00:00-04:00"},
		{"OneShotOnTimeEnds", "once", "", "Asia/Kolkata", state.MissedRunOnce,
			"2036-06-01T09:00:00+05:30", "2036-06-01T09:00:05+05:30", "fired", ""},
		{"OneShotMissedWithSkipEndsSilently", "once", "", "UTC", state.MissedSkip,
			"2036-06-01T09:00:00Z", "2036-06-01T12:00:00Z", "skipped", ""},
	}
	for _, tt := range tests {
		// One at a time: they share the clock.
		t.Run(tt.name, func(t *testing.T) {
			due, now := mustTime(t, tt.due), mustTime(t, tt.now)
			b.clock.Set(now)
			s := b.add(t, tt.kind, tt.spec, tt.zone, tt.missed, due)
			if got := b.fireOf(t, s.ScheduleID); got != tt.outcome {
				t.Fatalf("outcome %s, want %s", got, tt.outcome)
			}
			after, err := seam.Queries(b.pool).ScheduleGet(ctx, s.ScheduleID)
			if err != nil {
				t.Fatal(err)
			}
			var texts []string
			rows, _ := b.pool.Query(ctx, `SELECT i.text FROM choir_control.inbox i JOIN choir_control.schedule_fires f
				ON i.gateway = 'schedule' AND i.update_id = f.fire_id WHERE f.schedule_id = $1 AND i.kind = 'scheduled'
				AND i.agent_id = $2 AND i.dm = $3 AND i.chat_id = '4242'`, s.ScheduleID, testAgent, outboxtest.DM)
			texts, err = pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				t.Fatal(err)
			}
			switch tt.outcome {
			case "skipped":
				if len(texts) != 0 || after.Fires != 0 {
					t.Errorf("skipped fire queued %q, fires %d", texts, after.Fires)
				}
			default:
				if len(texts) != 1 || !strings.HasPrefix(texts[0], "[scheduled #") || !strings.HasSuffix(texts[0], "] water the plants") ||
					strings.Contains(texts[0], "late:") != (tt.outcome == "fired_late") || after.Fires != 1 {
					t.Errorf("messages %q, fires %d", texts, after.Fires)
				}
				select {
				case f := <-b.fired:
					if f.ScheduleID != s.ScheduleID || f.AgentID != testAgent {
						t.Errorf("told of %+v", f)
					}
				case <-time.After(10 * time.Second):
					t.Error("choird was not told of the fire")
				}
			}
			if tt.next == "" {
				if after.Status != state.Done || after.NextRunAt != nil || after.JobID != nil {
					t.Errorf("one-shot after its fire: %s, next %v, job %v", after.Status, after.NextRunAt, after.JobID)
				}
				return
			}
			want := mustTime(t, tt.next)
			if after.Status != state.Active || after.NextRunAt == nil || !after.NextRunAt.Equal(want) {
				t.Fatalf("after the fire: %s, next %v; want active, next %s", after.Status, after.NextRunAt, want)
			}
			var scheduledAt time.Time
			var args state.FireArgs
			var raw []byte
			if err := b.pool.QueryRow(ctx, `SELECT scheduled_at, args FROM river_job WHERE id = $1 AND state = 'scheduled'`,
				*after.JobID).Scan(&scheduledAt, &raw); err != nil {
				t.Fatalf("the next run's job: %v", err)
			}
			if json.Unmarshal(raw, &args); !scheduledAt.Equal(want) || !args.Due.Equal(want) {
				t.Errorf("next job scheduled at %s for %s, want %s", scheduledAt, args.Due, want)
			}
		})
	}
}

// TestScheduleFireIgnoresAStaleJob checks that a job the schedule no
// longer names (it was re-armed, paused or cancelled meanwhile) fires
// nothing.
func TestScheduleFireIgnoresAStaleJob(t *testing.T) {
	t.Parallel()
	b := setupSchedules(t)
	ctx := context.Background()
	due := time.Now().Add(-time.Second)
	b.clock.Set(time.Now())
	s := b.add(t, "cron", "0 8 * * *", "UTC", state.MissedSkip, due)
	// A second job for the same schedule, which the row does not name.
	if _, err := b.client.Insert(ctx, state.FireArgs{ScheduleID: s.ScheduleID, Due: due.Add(-time.Hour)}, nil); err != nil {
		t.Fatal(err)
	}
	if got := b.fireOf(t, s.ScheduleID); got != "fired" {
		t.Fatalf("outcome %s", got)
	}
	choirdtest.WaitFor(t, "both jobs worked", nil, func() bool {
		var n int
		b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'schedule_fire' AND state = 'completed'`).Scan(&n)
		return n == 2
	})
	var fires int
	b.pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.schedule_fires WHERE schedule_id = $1`, s.ScheduleID).Scan(&fires)
	if fires != 1 {
		t.Errorf("%d fires, want 1: the stale job fired", fires)
	}
}
