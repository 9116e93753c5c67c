// Package state is a schedule's state machine, the part of the schedules
// that sits below choird's control layer (a person's stop, daemon/hold,
// pauses and resumes schedules through it): the statuses and missed-run
// policies as stored, the next run of a schedule (its cron expression is
// package cron's), and arming, holding and releasing a schedule with its
// schedule_fire job. An active schedule has exactly one pending
// schedule_fire job, scheduled at its next_run_at, and names it in job_id:
// every change of the schedule (arming, firing, pausing, cancelling,
// approving) happens with its row locked and its job inserted or deleted
// in the same transaction, so a schedule never has two jobs, and a job the
// row no longer names is stale and does nothing. The fire's worker is
// package schedule's.
package state

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/daemon/schedule/cron"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// Queue runs schedule fires. A fire may start its agent, which
// takes seconds: never on the control queue, whose crash detection must
// not wait.
const Queue = "schedule"

// The schedule statuses and missed-run policies, as stored.
const (
	Active          = "active"
	Paused          = "paused"
	Done            = "done"
	Cancelled       = "cancelled"
	PendingApproval = "pending_approval"

	MissedSkip    = "skip"
	MissedRunOnce = "run_once"
)

// FireArgs fires schedule ScheduleID, due at Due.
type FireArgs struct {
	ScheduleID int64     `json:"schedule_id"`
	Due        time.Time `json:"due"`
}

// Kind implements river.JobArgs.
func (FireArgs) Kind() string { return "schedule_fire" }

// InsertOpts puts fires on their own queue.
func (FireArgs) InsertOpts() river.InsertOpts {
	return river.InsertOpts{Queue: Queue, MaxAttempts: 10}
}

// FireQueue is the schedule queue's name and configuration.
func FireQueue() (string, river.QueueConfig) {
	return Queue, river.QueueConfig{MaxWorkers: 4, FetchCooldown: 20 * time.Millisecond,
		FetchPollInterval: 200 * time.Millisecond}
}

// Next is the first run of s after after: the next time of its
// cron expression in its zone, or its run_at for a one-shot (whatever
// after is).
func Next(s db.ChoirControlSchedule, after time.Time) (time.Time, error) {
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

// ArmTx makes s active with its next run at next: it inserts the
// fire job, scheduled then, and records it, in the caller's transaction
// (which holds s's row). The time is kept to the microsecond, which is
// what Postgres stores.
func ArmTx(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, s db.ChoirControlSchedule, next time.Time) (db.ChoirControlSchedule, error) {
	next = next.Truncate(time.Microsecond)
	res, err := ins.InsertTx(ctx, tx, FireArgs{ScheduleID: s.ScheduleID, Due: next}, &river.InsertOpts{ScheduledAt: next})
	if err != nil {
		return s, fmt.Errorf("queue the next run of schedule %d: %w", s.ScheduleID, err)
	}
	row, err := seam.Queries(tx).ScheduleSetState(ctx, db.ScheduleSetStateParams{ScheduleID: s.ScheduleID,
		Status: Active, NextRunAt: &next, JobID: &res.Job.ID})
	if err != nil {
		return s, fmt.Errorf("record the next run of schedule %d: %w", s.ScheduleID, err)
	}
	return row, nil
}

// HoldTx pauses agentID's active start_agent schedules, marked
// held, in the transaction that records a person's stop of the agent: a
// schedule does not start an agent a person stopped. Their pending jobs
// become stale. It returns the ids of the schedules held.
func HoldTx(ctx context.Context, tx pgx.Tx, agentID string) ([]int64, error) {
	rows, err := seam.Queries(tx).ScheduleHoldStartAgent(ctx, agentID)
	if err != nil {
		return nil, fmt.Errorf("pause the start_agent schedules of %s: %w", agentID, err)
	}
	return scheduleIDs(rows), nil
}

func scheduleIDs(rows []db.ChoirControlSchedule) []int64 {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ScheduleID
	}
	return ids
}

// ReleaseTx resumes the schedules a person's stop held, in the
// transaction that records that a person started agentID again: each is
// armed as a resumed schedule is (a cron schedule at its next time from
// now; a one-shot at its time, which the missed-run policy judges if it
// passed). It returns the ids of the schedules resumed.
func ReleaseTx(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, agentID string, now time.Time) ([]int64, error) {
	held, err := seam.Queries(tx).ScheduleListHeld(ctx, agentID)
	if err != nil {
		return nil, fmt.Errorf("load the held schedules of %s: %w", agentID, err)
	}
	out := make([]int64, 0, len(held))
	for _, r := range held {
		next, err := Next(r, now)
		if err != nil {
			return nil, err
		}
		armed, err := ArmTx(ctx, tx, ins, r, next)
		if err != nil {
			return nil, err
		}
		out = append(out, armed.ScheduleID)
	}
	return out, nil
}

// Later is the later of two times.
func Later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
