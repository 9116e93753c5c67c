package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// scheduleClient is what the schedule commands need of choird.
type scheduleClient interface {
	ScheduleList(ctx context.Context, agentID string) ([]admin.Schedule, error)
	ScheduleAdd(ctx context.Context, in admin.ScheduleAddRequest) (admin.Schedule, error)
	ScheduleCancel(ctx context.Context, id int64) (admin.Schedule, error)
	SchedulePause(ctx context.Context, id int64) (admin.Schedule, error)
	ScheduleResume(ctx context.Context, id int64) (admin.Schedule, error)
}

func newScheduleCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "schedule", Short: "List, add, cancel, pause and resume agents' schedules and reminders"}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print results as JSON")
	out := func(s admin.Schedule) error {
		if asJSON {
			return writeJSON(g.stdout, s)
		}
		printSchedule(g.stdout, s)
		return nil
	}

	var agent string
	list := &cobra.Command{Use: "list", Short: "List the schedules still to fire, waiting for approval, or paused", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			defer c.Close()
			return runScheduleList(cmd.Context(), c, g.stdout, agent, asJSON)
		}}
	list.Flags().StringVar(&agent, "agent", "", "only this agent's schedules")

	var req admin.ScheduleAddRequest
	add := &cobra.Command{Use: "add <agent-id> (--cron EXPR | --at TIME | --in DELAY) --text TEXT",
		Short: "Schedule a message to an agent: a task for it, or with --reminder a reminder it passes on to its user",
		Example: `  choirctl schedule add assistant --cron "0 8 * * MON-FRI" --text "Brief me on today's calendar"
  choirctl schedule add assistant --at "2026-03-01 09:30" --tz Europe/Berlin --reminder --text "Call the dentist"
  choirctl schedule add assistant --in 20m --reminder --text "Take the bread out of the oven"`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			req.AgentID = args[0]
			s, err := c.ScheduleAdd(cmd.Context(), req)
			if err != nil {
				return scheduleCmdErr(err)
			}
			return out(s)
		}}
	f := add.Flags()
	f.StringVar(&req.Cron, "cron", "", `five-field cron expression in the time zone, e.g. "0 8 * * MON-FRI"`)
	f.StringVar(&req.At, "at", "", `one time: "2026-03-01 08:00" in the time zone, or RFC 3339`)
	f.StringVar(&req.In, "in", "", `one time, after a delay from now: "90s", "20m", "2h30m"`)
	f.StringVar(&req.Text, "text", "", "what the agent is told when it fires")
	f.StringVar(&req.DM, "dm", "", "the DM it comes to (default: the agent's defaults.dm)")
	f.StringVar(&req.TimeZone, "tz", "", "IANA time zone (default: the DM's time_zone, else UTC)")
	f.BoolVar(&req.Reminder, "reminder", false, "a reminder the agent passes on to its user, not a task")
	f.StringVar(&req.Missed, "missed", "", "a run missed while choird was down: skip or run_once (default: skip for cron, run_once for one time)")
	f.BoolVar(&req.StartAgent, "start-agent", false, "start the agent if it is not running when it fires")

	change := func(verb, short string, call func(scheduleClient, context.Context, int64) (admin.Schedule, error)) *cobra.Command {
		return &cobra.Command{Use: verb + " <id>", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				id, err := strconv.ParseInt(args[0], 10, 64)
				if err != nil || id <= 0 {
					return usageErr(fmt.Errorf("%q is not a schedule id: give the number choirctl schedule list shows", args[0]))
				}
				c := g.client()
				defer c.Close()
				s, err := call(c, cmd.Context(), id)
				if err != nil {
					return scheduleCmdErr(err)
				}
				return out(s)
			}}
	}
	cmd.AddCommand(list, add,
		change("cancel", "Cancel a schedule for good; its pending run is removed", scheduleClient.ScheduleCancel),
		change("pause", "Pause a schedule: it does not fire until resumed", scheduleClient.SchedulePause),
		change("resume", "Resume a paused schedule at its next time from now", scheduleClient.ScheduleResume))
	return cmd
}

// scheduleCmdErr makes a refused input (bad request, an unknown agent, DM
// or schedule) a usage error.
func scheduleCmdErr(err error) error {
	var e *wire.Error
	if errors.As(err, &e) && (e.Code == wire.CodeBadRequest || e.Code == wire.CodeNotFound) {
		return usageErr(err)
	}
	return err
}

// runScheduleList prints the open schedules as a table or JSON.
func runScheduleList(ctx context.Context, c scheduleClient, w io.Writer, agentID string, asJSON bool) error {
	list, err := c.ScheduleList(ctx, agentID)
	if err != nil {
		return scheduleCmdErr(err)
	}
	if asJSON {
		return writeJSON(w, list)
	}
	if len(list) == 0 {
		fmt.Fprintln(w, "no schedules")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tAGENT\tDM\tWHEN\tNEXT\tSTATUS\tTEXT")
	for _, s := range list {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\n", s.ID, s.AgentID, s.DM, scheduleWhen(s), scheduleNext(s), s.Status,
			clip(s.Text, 48))
	}
	return tw.Flush()
}

// scheduleWhen says when a schedule fires, in its zone.
func scheduleWhen(s admin.Schedule) string {
	if s.Cron != "" {
		return fmt.Sprintf("cron %q %s", s.Cron, s.TimeZone)
	}
	if s.RunAt != nil {
		return "once " + inZone(*s.RunAt, s.TimeZone)
	}
	return "-"
}

func scheduleNext(s admin.Schedule) string {
	if s.NextRunAt == nil {
		return "-"
	}
	return inZone(*s.NextRunAt, s.TimeZone)
}

// inZone shows t in the named zone, with the zone's abbreviation.
func inZone(t time.Time, zone string) string {
	if loc, err := time.LoadLocation(zone); err == nil {
		t = t.In(loc)
	}
	return t.Format("2006-01-02 15:04 MST")
}

func printSchedule(w io.Writer, s admin.Schedule) {
	fmt.Fprintf(w, "schedule:  %d (%s, %s)\n", s.ID, s.Purpose, s.Status)
	fmt.Fprintf(w, "agent:     %s on dm %s\n", s.AgentID, s.DM)
	fmt.Fprintf(w, "when:      %s\n", scheduleWhen(s))
	fmt.Fprintf(w, "next:      %s\n", scheduleNext(s))
	fmt.Fprintf(w, "missed:    %s; start agent: %t\n", s.Missed, s.StartAgent)
	if s.ApprovalID != "" {
		fmt.Fprintf(w, "approval:  %s\n", s.ApprovalID)
	}
	fmt.Fprintf(w, "fires:     %d\n", s.Fires)
	fmt.Fprintf(w, "text:      %s\n", s.Text)
}
