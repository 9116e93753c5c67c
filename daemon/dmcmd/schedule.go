package dmcmd

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/schedule"
	"github.com/choirhq/choir/rpc/admin"
)

// maxSchedulesShown bounds the /schedules answer, which is one message.
const maxSchedulesShown = 30

// schedules is /schedules: the open schedules (still to fire, waiting for
// approval, or paused) of the DM's agent that come to this DM; an admin
// sees every agent's, or names one.
func (c *Commands) schedules(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	agentID, err := c.listFilter(ctx, sc, cmd, "schedules")
	if err != nil {
		return action{}, err
	}
	return cmdRead(func(ctx context.Context) (string, error) {
		list, err := schedule.List(ctx, c.pool, c.ctl.Snapshot().Config, sc, agentID)
		if err != nil {
			return "", err
		}
		if len(list) == 0 {
			return "No schedules. Ask your agent to schedule something, or use choirctl schedule add.", nil
		}
		var b strings.Builder
		fmt.Fprintf(&b, "Schedules (%d):", len(list))
		for i, s := range list {
			if i == maxSchedulesShown {
				fmt.Fprintf(&b, "\n… and %d more (choirctl schedule list shows all).", len(list)-i)
				break
			}
			b.WriteString("\n" + scheduleLine(s))
		}
		return b.String(), nil
	}), nil
}

// scheduleLine is one schedule in a chat: id, agent, when, next run in
// its own zone, status if not active, and the start of its text.
func scheduleLine(s admin.Schedule) string {
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	const layout = "Mon 2 Jan 15:04 MST"
	what := fmt.Sprintf("cron %q (%s)", s.Cron, s.TimeZone)
	if s.RunAt != nil {
		what = "once " + s.RunAt.In(loc).Format(layout)
	}
	if s.Purpose == "reminder" {
		what = "reminder, " + what
	}
	line := fmt.Sprintf("#%d %s: %s", s.ID, s.AgentID, what)
	if s.Cron != "" && s.NextRunAt != nil {
		line += ", next " + s.NextRunAt.In(loc).Format(layout)
	}
	if s.Status != "active" {
		line += " [" + strings.ReplaceAll(s.Status, "_", " ") + "]"
	}
	return line + ": " + truncate(s.Text, 120)
}
