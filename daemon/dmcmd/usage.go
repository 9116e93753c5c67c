package dmcmd

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

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

// capCmd is /cap <agent-id> <field> <value> (admin DMs): it sets one of an
// agent's usage caps in config.json and applies the configuration, as
// choirctl usage cap set does, so that a user stopped by a cap can raise
// it from Telegram; a running agent takes the new cap at once. Other
// changes already made to config.json are applied with it.
func (c *Commands) capCmd(ctx context.Context, sc control.Scope, cmd gateway.Command) (action, error) {
	if len(cmd.Args) != 3 {
		return action{}, usagef("Usage: /cap <agent-id> <field> <value>, e.g. /cap assistant per_day_cost_usd 5. Fields: %s; 0 removes a cap.",
			strings.Join(config.CapFields, ", "))
	}
	agentID, field, value := cmd.Args[0], cmd.Args[1], cmd.Args[2]
	path := filepath.Join(c.ctl.Home(), config.ConfigFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return action{}, err
	}
	b, err := config.SetAgentCap(raw, agentID, field, value)
	if err != nil {
		return action{}, usagef("%v", err)
	}
	return cmdChange(func(ctx context.Context) (string, error) {
		if err := config.WriteFileAtomic(path, b, 0o644); err != nil {
			return "", err
		}
		if _, err := c.ctl.ConfigLoad(ctx, sc); err != nil {
			config.WriteFileAtomic(path, raw, 0o644) //nolint:errcheck // put back what was there
			return "", fmt.Errorf("config load refused the change, config.json is as it was: %w", err)
		}
		r, err := c.ctl.ConfigApply(ctx, sc)
		if err != nil {
			return "", fmt.Errorf("written and loaded, not applied (/config apply to retry): %w", err)
		}
		return fmt.Sprintf("agents.%s.budgets.%s = %s: applied, config version %d.", agentID, field, value, r.Version), nil
	}), nil
}
