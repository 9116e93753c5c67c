package ctl

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

func newAgentCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "agent", Short: "Start, stop and inspect agents"}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print results as JSON")

	printOne := func(a admin.AgentStatus) error {
		if asJSON {
			return writeJSON(g.stdout, a)
		}
		return printAgents(g.stdout, []admin.AgentStatus{a})
	}

	list := &cobra.Command{Use: "list", Short: "List every configured agent and its state", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.AgentList(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			return printAgents(g.stdout, out)
		}}

	var o admin.StartOverrides
	start := &cobra.Command{Use: "start <agent-id>", Short: "Start an agent; every default resource can be overridden",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Without --dm the agent talks on its defaults.dm, which
			// config.json requires; choird resolves it.
			c := g.client()
			defer c.Close()
			out, err := c.AgentStart(cmd.Context(), args[0], o)
			if err != nil {
				return err
			}
			return printOne(out)
		}}
	f := start.Flags()
	f.StringVar(&o.Workspace, "workspace", "", "override the default workspace")
	f.StringVar(&o.LLM, "llm", "", "override the default LLM model")
	f.StringVar(&o.VoiceProfile, "voice-profile", "", "override the default voice profile")
	f.StringVar(&o.GitIdentity, "git-identity", "", "override the default git identity")
	f.StringVar(&o.Notion, "notion", "", "override the default Notion integration")
	f.StringVar(&o.Email, "email", "", "override the default email account")
	f.StringVar(&o.DM, "dm", "", "override the default DM the agent talks on (defaults.dm)")

	simple := func(use, short string, verb func(*admin.Client, context.Context, string) (admin.AgentStatus, error)) *cobra.Command {
		return &cobra.Command{Use: use + " <agent-id>", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c := g.client()
				defer c.Close()
				out, err := verb(c, cmd.Context(), args[0])
				if err != nil {
					return err
				}
				return printOne(out)
			}}
	}
	var force bool
	buildCmd := &cobra.Command{Use: "build <agent-id>", Short: "Build the agent's image from its repos; skipped when nothing changed",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.AgentBuild(cmd.Context(), args[0], force)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			verb := "built"
			if !out.Built {
				verb = "up to date"
			}
			fmt.Fprintf(g.stdout, "%s: %s (%s)\n", out.AgentID, out.Image, verb)
			return nil
		}}
	buildCmd.Flags().BoolVar(&force, "force", false, "build even when nothing changed")
	printUpdates := func(rs []admin.UpdateResult) error {
		if asJSON {
			return writeJSON(g.stdout, rs)
		}
		tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "AGENT\tOUTCOME\tIMAGE\tERROR")
		for _, r := range rs {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.AgentID, r.Outcome, r.Image, r.Error)
		}
		return tw.Flush()
	}
	update := &cobra.Command{Use: "update <agent-id>", Short: "Build if needed, then stop and start the agent on the new image",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.AgentUpdate(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return printUpdates([]admin.UpdateResult{out})
		}}
	updateAll := &cobra.Command{Use: "update-all", Short: "Build and redeploy every agent, one after the other", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.AgentUpdateAll(cmd.Context())
			if err != nil {
				return err
			}
			return printUpdates(out)
		}}
	cmd.AddCommand(buildCmd, update, updateAll, newAgentInitCommand(g))
	cmd.AddCommand(list, start,
		simple("stop", "Stop an agent gracefully: final heartbeat, session persisted", (*admin.Client).AgentStop),
		simple("restart", "Stop and start an agent with the same resources", (*admin.Client).AgentRestart),
		simple("status", "Show an agent's state and session", (*admin.Client).AgentStatus))
	return cmd
}

func printAgents(w io.Writer, agents []admin.AgentStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTATE\tSESSION\tRUNTIME\tUP\tLAST HEARTBEAT")
	for _, a := range agents {
		session, runtime, up, beat := "-", "-", "-", "-"
		if a.SessionID != "" {
			session, runtime = a.SessionID, a.Runtime
		}
		if a.StartedAt != nil && a.State != admin.AgentCrashed {
			up = time.Since(*a.StartedAt).Round(time.Second).String()
		}
		if a.LastHeartbeatAt != nil {
			beat = time.Since(*a.LastHeartbeatAt).Round(time.Second).String() + " ago"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", a.AgentID, a.State, session, runtime, up, beat)
	}
	return tw.Flush()
}
