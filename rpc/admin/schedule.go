package admin

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// The request and result types of choirctl schedule, served by choird's
// schedules (daemon/schedule), which /schedules and the agent's
// choir.schedule tools share.

// Schedule is one schedule or reminder.
type Schedule struct {
	ID      int64  `json:"id"`
	AgentID string `json:"agent_id"`
	// DM is the chat the fire's message comes from, and the agent answers
	// in.
	DM string `json:"dm"`
	// Kind is cron (Cron set) or once (RunAt set).
	Kind     string     `json:"kind"`
	Cron     string     `json:"cron,omitempty"`
	RunAt    *time.Time `json:"run_at,omitempty"`
	TimeZone string     `json:"time_zone"`
	// Purpose is task (the text is an instruction for the agent) or
	// reminder (the agent passes the text on to its user).
	Purpose string `json:"purpose"`
	Text    string `json:"text"`
	// Missed is skip or run_once: what a run missed while choird was down
	// does.
	Missed     string `json:"missed"`
	StartAgent bool   `json:"start_agent"`
	// Status is pending_approval, active, paused, done or cancelled.
	Status      string     `json:"status"`
	CreatedBy   string     `json:"created_by"`
	ApprovalID  string     `json:"approval_id,omitempty"`
	NextRunAt   *time.Time `json:"next_run_at,omitempty"`
	Fires       int        `json:"fires"`
	LastFiredAt *time.Time `json:"last_fired_at,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
}

// ScheduleAddRequest is the body of POST PathSchedules. Exactly one of
// Cron, At and In says when.
type ScheduleAddRequest struct {
	AgentID string `json:"agent_id"`
	// DM defaults to the agent's defaults.dm.
	DM string `json:"dm,omitempty"`
	// Cron is a five-field expression in TimeZone ("0 8 * * MON-FRI").
	Cron string `json:"cron,omitempty"`
	// At is a one-shot time: RFC 3339 ("2026-03-01T08:00:00+01:00"), or
	// a wall-clock time in TimeZone ("2026-03-01 08:00").
	At string `json:"at,omitempty"`
	// In is a one-shot delay from now, a Go duration ("90m", "2h30m").
	In string `json:"in,omitempty"`
	// TimeZone is an IANA name; it defaults to the DM's time_zone.
	TimeZone string `json:"time_zone,omitempty"`
	Text     string `json:"text"`
	// Reminder makes the text a reminder the agent passes on, not a task.
	Reminder bool `json:"reminder,omitempty"`
	// Missed is skip or run_once; empty means skip for cron and run_once
	// for a one-shot.
	Missed     string `json:"missed,omitempty"`
	StartAgent bool   `json:"start_agent,omitempty"`
}

// MaxScheduleText bounds a schedule's text.
const MaxScheduleText = 4096

// Validate checks the request's shape; choird checks its values.
func (r ScheduleAddRequest) Validate() error {
	when := 0
	for _, s := range []string{r.Cron, r.At, r.In} {
		if s != "" {
			when++
		}
	}
	switch {
	case r.AgentID == "":
		return errors.New("agent_id is required: the agent the schedule sends its message to")
	case when != 1:
		return errors.New(`give exactly one of cron, at and in: e.g. cron "0 8 * * MON-FRI", at "2026-03-01 08:00" or in "90m"`)
	case r.Text == "":
		return errors.New("text is required: what the agent is told when the schedule fires")
	case len(r.Text) > MaxScheduleText:
		return fmt.Errorf("text is %d bytes, at most %d", len(r.Text), MaxScheduleText)
	case r.Missed != "" && r.Missed != "skip" && r.Missed != "run_once":
		return fmt.Errorf("missed %q: want skip or run_once", r.Missed)
	}
	return nil
}

// ScheduleList lists the open schedules (pending approval, active,
// paused): every agent's, or with agentID one agent's.
func (c *Client) ScheduleList(ctx context.Context, agentID string) ([]Schedule, error) {
	path := PathSchedules
	if agentID != "" {
		path = Fill(PathAgentSchedules, agentID)
	}
	return call[[]Schedule](ctx, c, http.MethodGet, path, nil)
}

// ScheduleAdd creates a schedule.
func (c *Client) ScheduleAdd(ctx context.Context, in ScheduleAddRequest) (Schedule, error) {
	return call[Schedule](ctx, c, http.MethodPost, PathSchedules, in)
}

// ScheduleCancel cancels a schedule and removes its pending run.
func (c *Client) ScheduleCancel(ctx context.Context, id int64) (Schedule, error) {
	return call[Schedule](ctx, c, http.MethodPost, Fill(PathScheduleCancel, strconv.FormatInt(id, 10)), nil)
}

// SchedulePause pauses a schedule: it does not fire until resumed.
func (c *Client) SchedulePause(ctx context.Context, id int64) (Schedule, error) {
	return call[Schedule](ctx, c, http.MethodPost, Fill(PathSchedulePause, strconv.FormatInt(id, 10)), nil)
}

// ScheduleResume resumes a paused schedule at its next time from now.
func (c *Client) ScheduleResume(ctx context.Context, id int64) (Schedule, error) {
	return call[Schedule](ctx, c, http.MethodPost, Fill(PathScheduleResume, strconv.FormatInt(id, 10)), nil)
}
