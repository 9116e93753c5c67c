package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/schedule"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc/admin"
)

// newSchedules makes the schedules, once River's client exists.
func (d *Daemon) newSchedules() {
	d.schedules = schedule.New(schedule.Options{Pool: d.pool, Jobs: d.river,
		Config: func() *config.Config { return d.Snapshot().Config },
		Logger: d.logger.With(slog.String("component", "schedule"))})
}

// Schedules are choird's schedules and reminders.
func (d *Daemon) Schedules() *schedule.Service { return d.schedules }

// scheduleFired hands a fire's message, committed to the inbox, to its
// agent: pushed at once to a live session; for an agent that is not
// running, kept for its next session, or, when the schedule says so, the
// agent is started with its defaults (its hello pushes the message). That
// start is choird's own: refused while a person's stop holds the agent,
// and its session continues the budget of the one before (session.ByChoird).
func (d *Daemon) scheduleFired(ctx context.Context, f jobs.ScheduleFired) {
	if d.inbox.PushPending(ctx, f.AgentID) || !f.StartAgent {
		return
	}
	by := fmt.Sprintf("schedule:%d", f.ScheduleID)
	if _, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: by, Unattended: true}, f.AgentID, admin.StartOverrides{}); err != nil {
		d.logger.WarnContext(ctx, "schedule could not start its agent; its message waits for the next session",
			slog.Int64("schedule_id", f.ScheduleID), slog.String("agent_id", f.AgentID), slog.String("error", err.Error()))
		return
	}
	d.logger.InfoContext(ctx, "agent started by its schedule", slog.Int64("schedule_id", f.ScheduleID),
		slog.String("agent_id", f.AgentID))
}
