// Package usage is choirctl usage: an agent's current spend against each
// of its usage caps (per session, core job and day in its DM's time zone)
// and its spend per day, from choird's totals of the replicated logs.
package usage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// Env is what the command needs of choirctl: a client of choird's admin
// API, the output streams, and how to mark an error as bad input.
type Env struct {
	// Home is --home, read when the command runs.
	Home     func() string
	Client   func() *admin.Client
	Stdout   io.Writer
	Stderr   io.Writer
	UsageErr func(error) error
}

type options struct {
	json bool
	days int
}

// Command is choirctl usage.
func Command(env Env) *cobra.Command {
	o := &options{}
	cmd := &cobra.Command{
		Use:   "usage [agent-id]",
		Short: "Show agents' spend against their usage caps, and per day",
		Long: `Show an agent's spend (model tokens and cost in US dollars) against each of
its caps: per session (its latest session), per core job and per day in the
time zone of its DM, and its spend per day. Without an agent id, every agent.
Totals come from the agents' replicated commit logs (choir_audit.usage).

Caps are agents.<id>.budgets in config.json: total_session_tokens,
session_cost_usd, per_job_tokens, per_job_cost_usd, per_day_tokens,
per_day_cost_usd. To raise one: choirctl usage cap set <agent-id> <field>
<value> (or edit it and run choirctl config apply): a running agent takes it
at once.

Exit codes: 0 success, 1 error, 2 bad input (an unknown agent, a bad flag).`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.days < 0 || o.days > 366 {
				return env.UsageErr(fmt.Errorf("--days %d: give 1 to 366 (0: the default of %d)", o.days, admin.DefaultUsageDays))
			}
			agent := ""
			if len(args) == 1 {
				agent = args[0]
			}
			return run(cmd.Context(), env, o, agent)
		},
	}
	cmd.AddCommand(capCommand(env))
	cmd.Flags().BoolVar(&o.json, "json", false, "print the reports as JSON")
	cmd.Flags().IntVar(&o.days, "days", 0, fmt.Sprintf("days of history (default %d)", admin.DefaultUsageDays))
	return cmd
}

func run(ctx context.Context, env Env, o *options, agent string) error {
	c := env.Client()
	ids := []string{agent}
	if agent == "" {
		list, err := c.AgentList(ctx)
		if err != nil {
			return err
		}
		ids = ids[:0]
		for _, a := range list {
			ids = append(ids, a.AgentID)
		}
	}
	reports := []admin.UsageReport{}
	for _, id := range ids {
		r, err := c.Usage(ctx, id, o.days)
		if err != nil {
			if errors.Is(err, wire.ErrNotFound) {
				return env.UsageErr(err)
			}
			return err
		}
		reports = append(reports, r)
	}
	if o.json {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		if agent != "" {
			return enc.Encode(reports[0])
		}
		return enc.Encode(reports)
	}
	for i, r := range reports {
		if i > 0 {
			fmt.Fprintln(env.Stdout)
		}
		fmt.Fprint(env.Stdout, r.Text())
	}
	if len(reports) == 0 {
		fmt.Fprintln(env.Stdout, "No agents configured.")
	}
	return nil
}
