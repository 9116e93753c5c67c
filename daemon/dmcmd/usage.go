package dmcmd

import (
	"context"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/usage"
)

// usageDays is the history /usage shows: a chat message, so a week.
const usageDays = 7

// usageCmd is /usage: the agent's spend against each of its caps, and
// per day in the DM's time zone. An admin may name another agent.
func (c *Commands) usageCmd(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	if len(cmd.Args) > 1 {
		return action{}, usagef("%s", c.usage(sc, "usage"))
	}
	explicit := ""
	if len(cmd.Args) == 1 {
		explicit = cmd.Args[0]
	}
	agentID, err := c.target(ctx, sc, cmd, explicit)
	if err != nil {
		return action{}, err
	}
	return cmdRead(func(ctx context.Context) (string, error) {
		svc := usage.New(usage.Options{Pool: c.pool, Config: func() *config.Config { return c.ctl.Snapshot().Config }})
		r, err := svc.Report(ctx, agentID, usageDays)
		if err != nil {
			return "", err
		}
		return r.Text(), nil
	}), nil
}
