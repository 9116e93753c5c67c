package ctl

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

// sessionCommands are the command groups of this file, model.go and
// approval.go, for the root command.
func sessionCommands(g *globals) []*cobra.Command {
	return []*cobra.Command{newSessionCommand(g), newModelCommand(g), newVoiceCommand(g), newApprovalCommand(g)}
}

func newSessionCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "session", Short: "Inspect and steer an agent's running session: core jobs, cancel, compact, events"}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print results as JSON")

	cores := &cobra.Command{Use: "cores <agent-id>",
		Short: "List the core jobs of the agent's session: state, steps, last progress, budgets left",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.SessionCores(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			return printCores(g.stdout, out)
		}}
	status := &cobra.Command{Use: "status <agent-id>",
		Short: "Show the agent's session and its lanes: edge and core jobs, their states, steps and budgets left",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.AgentStatus(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			if err := printAgents(g.stdout, []admin.AgentStatus{out}); err != nil {
				return err
			}
			if len(out.Lanes) == 0 && out.SessionID != "" {
				fmt.Fprintln(g.stdout, "\nno lane has reported yet")
			}
			return nil
		}}
	cancel := &cobra.Command{Use: "cancel <agent-id> <job-name>",
		Short: "Cancel a core job of the agent's session by name (edge: the edge lane's turn)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.SessionCancel(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			fmt.Fprintf(g.stdout, "cancel sent to %s (session %s); it stops at its next safe point\n", out.Target, out.SessionID)
			return nil
		}}
	compact := &cobra.Command{Use: "compact <agent-id>", Short: "Ask the agent to compact its working memory at the next safe point",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.SessionCompact(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			fmt.Fprintf(g.stdout, "compaction requested (session %s)\n", out.SessionID)
			return nil
		}}
	var n int
	events := &cobra.Command{Use: "events <agent-id>", Short: "Show the last events of the agent's live or latest session",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if n < 1 {
				return usageErr(fmt.Errorf("-n must be at least 1, not %d", n))
			}
			c := g.client()
			defer c.Close()
			out, err := c.SessionEvents(cmd.Context(), args[0], n)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "REV\tTIME\tLANE\tEVENT\tDIGEST")
			for _, e := range out.Events {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\n", e.Rev, e.CreatedAt.Local().Format(time.DateTime), e.Lane, e.Type,
					strings.Join(strings.Fields(e.Digest), " "))
			}
			return tw.Flush()
		}}
	events.Flags().IntVarP(&n, "n", "n", 20, "how many events, newest last (at most 500)")
	cmd.AddCommand(newSessionListCommand(g, &asJSON), newSessionReplayCommand(g, &asJSON), status, cores, cancel, compact, events)
	return cmd
}

// printCores lists core jobs, the running ones first, each group by name.
func printCores(w io.Writer, res admin.SessionCoresResult) error {
	if len(res.Cores) == 0 {
		_, err := fmt.Fprintf(w, "%s runs no core job (session %s)\n", res.AgentID, res.SessionID)
		return err
	}
	cores := slices.Clone(res.Cores)
	slices.SortStableFunc(cores, func(a, b admin.CoreJob) int {
		if a.Active != b.Active {
			if a.Active {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATE\tSTEPS\tBUDGET LEFT\tLAST PROGRESS\tRUNNING")
	for _, c := range cores {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%t\n", c.Name, laneState(c.LaneStatus), count(c.Steps),
			dash(admin.BudgetText(c.BudgetRemaining)), dash(clip(c.Progress, 60)), c.Active)
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// sessionListOptions are choirctl session list's filters.
type sessionListOptions struct {
	req  admin.SessionListRequest
	json *bool
}

func newSessionListCommand(g *globals, asJSON *bool) *cobra.Command {
	opts := sessionListOptions{json: asJSON}
	cmd := &cobra.Command{Use: "list", Short: "List sessions, newest first: id, agent, status, start, end and events",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runSessionList(cmd.Context(), g, opts)
		}}
	cmd.Flags().StringVar(&opts.req.AgentID, "agent", "", "only this agent's sessions")
	cmd.Flags().StringVar(&opts.req.Status, "status", "", "only sessions in this status: "+strings.Join(admin.SessionStatuses, ", "))
	cmd.Flags().IntVar(&opts.req.Limit, "limit", 100, fmt.Sprintf("most sessions listed (at most %d)", admin.MaxSessionsListed))
	cmd.RegisterFlagCompletionFunc("agent", g.completeAgents)                              //nolint:errcheck
	cmd.RegisterFlagCompletionFunc("status", cobra.FixedCompletions(admin.SessionStatuses, //nolint:errcheck
		cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func runSessionList(ctx context.Context, g *globals, opts sessionListOptions) error {
	if err := opts.req.Validate(); err != nil {
		return usageErr(err)
	}
	if opts.req.Limit == 0 {
		return usageErr(fmt.Errorf("--limit must be 1 to %d, not 0", admin.MaxSessionsListed))
	}
	c := g.client()
	defer c.Close()
	out, err := c.SessionList(ctx, opts.req)
	if admin.IsBadRequest(err) {
		return usageErr(err)
	}
	if err != nil {
		return err
	}
	if *opts.json {
		return writeJSON(g.stdout, out)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SESSION\tAGENT\tSTATUS\tSTARTED\tENDED\tEVENTS")
	for _, s := range out {
		ended := "-"
		if s.EndedAt != nil {
			ended = s.EndedAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", s.SessionID, s.AgentID, s.Status, s.StartedAt.Local().Format(time.DateTime),
			ended, s.Events)
	}
	return tw.Flush()
}
