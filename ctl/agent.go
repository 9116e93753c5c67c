package ctl

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

// agentCommands are the agent command group's verbs, sharing --json.
type agentCommands struct {
	g      *globals
	asJSON bool
}

func newAgentCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "agent", Short: "Start, stop and inspect agents"}
	a := &agentCommands{g: g}
	cmd.PersistentFlags().BoolVar(&a.asJSON, "json", false, "print results as JSON")
	cmd.AddCommand(a.build(), a.update(), a.updateAll(), newAgentInitCommand(g))
	cmd.AddCommand(a.list(), a.start(),
		a.simple("stop", "Stop an agent gracefully: final heartbeat, session persisted", (*admin.Client).AgentStop),
		a.simple("restart", "Stop and start an agent with the same resources", (*admin.Client).AgentRestart),
		a.simple("status", "Show an agent's state and session", (*admin.Client).AgentStatus))
	return cmd
}

func (a *agentCommands) printOne(st admin.AgentStatus) error {
	if a.asJSON {
		return writeJSON(a.g.stdout, st)
	}
	return printAgents(a.g.stdout, []admin.AgentStatus{st})
}

func (a *agentCommands) printUpdates(rs []admin.UpdateResult) error {
	if a.asJSON {
		return writeJSON(a.g.stdout, rs)
	}
	tw := tabwriter.NewWriter(a.g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tOUTCOME\tIMAGE\tERROR")
	for _, r := range rs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.AgentID, r.Outcome, r.Image, r.Error)
	}
	return tw.Flush()
}

func (a *agentCommands) list() *cobra.Command {
	return &cobra.Command{Use: "list", Short: "List every configured agent and its state", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := a.g.client()
			defer c.Close()
			out, err := c.AgentList(cmd.Context())
			if err != nil {
				return err
			}
			if a.asJSON {
				return writeJSON(a.g.stdout, out)
			}
			return printAgents(a.g.stdout, out)
		}}
}

func (a *agentCommands) start() *cobra.Command {
	var o admin.StartOverrides
	start := &cobra.Command{Use: "start <agent-id>", Short: "Start an agent; every default resource can be overridden",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Without --dm the agent talks on its defaults.dm, which
			// config.json requires; choird resolves it.
			c := a.g.client()
			defer c.Close()
			out, err := c.AgentStart(cmd.Context(), args[0], o)
			if err != nil {
				return err
			}
			return a.printOne(out)
		}}
	f := start.Flags()
	f.StringVar(&o.Workspace, "workspace", "", "override the default workspace")
	f.StringVar(&o.LLM, "llm", "", "override the default LLM model")
	f.StringVar(&o.VoiceProfile, "voice-profile", "", "override the default voice profile")
	f.StringVar(&o.GitIdentity, "git-identity", "", "override the default git identity")
	f.StringVar(&o.Notion, "notion", "", "override the default Notion integration")
	f.StringVar(&o.Email, "email", "", "override the default email account")
	f.StringVar(&o.DM, "dm", "", "override the default DM the agent talks on (defaults.dm)")
	return start
}

// simple is a verb on one agent that prints its status.
func (a *agentCommands) simple(use, short string, verb func(*admin.Client, context.Context, string) (admin.AgentStatus, error)) *cobra.Command {
	return &cobra.Command{Use: use + " <agent-id>", Short: short, Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := a.g.client()
			defer c.Close()
			out, err := verb(c, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printOne(out)
		}}
}

func (a *agentCommands) build() *cobra.Command {
	var force bool
	buildCmd := &cobra.Command{Use: "build <agent-id>", Short: "Build the agent's image from its repos; skipped when nothing changed",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := a.g.client()
			defer c.Close()
			out, err := c.AgentBuild(cmd.Context(), args[0], force)
			if err != nil {
				return err
			}
			if a.asJSON {
				return writeJSON(a.g.stdout, out)
			}
			verb := "built"
			if !out.Built {
				verb = "up to date"
			}
			fmt.Fprintf(a.g.stdout, "%s: %s (%s)\n", out.AgentID, out.Image, verb)
			return nil
		}}
	buildCmd.Flags().BoolVar(&force, "force", false, "build even when nothing changed")
	return buildCmd
}

func (a *agentCommands) update() *cobra.Command {
	return &cobra.Command{Use: "update <agent-id>", Short: "Build if needed, then stop and start the agent on the new image",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := a.g.client()
			defer c.Close()
			out, err := c.AgentUpdate(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return a.printUpdates([]admin.UpdateResult{out})
		}}
}

func (a *agentCommands) updateAll() *cobra.Command {
	return &cobra.Command{Use: "update-all", Short: "Build and redeploy every agent, one after the other", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := a.g.client()
			defer c.Close()
			out, err := c.AgentUpdateAll(cmd.Context())
			if err != nil {
				return err
			}
			return a.printUpdates(out)
		}}
}

func printAgents(w io.Writer, agents []admin.AgentStatus) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTATE\tSESSION\tRUNTIME\tUP\tLAST HEARTBEAT\tROLLS OVER")
	for _, a := range agents {
		session, runtime, up, beat, rolls := "-", "-", "-", "-", "-"
		if a.SessionID != "" {
			session, runtime = a.SessionID, a.Runtime
		}
		if a.StartedAt != nil && a.State != admin.AgentCrashed {
			up = time.Since(*a.StartedAt).Round(time.Second).String()
		}
		if a.LastHeartbeatAt != nil {
			beat = time.Since(*a.LastHeartbeatAt).Round(time.Second).String() + " ago"
		}
		if a.RollsOverAt != nil {
			rolls = a.RollsOverAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.AgentID, a.State, session, runtime, up, beat, rolls)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printLanes(w, agents)
}

// printLanes lists the lanes of the agents' sessions, after a blank line;
// nothing when no session has reported one.
func printLanes(w io.Writer, agents []admin.AgentStatus) error {
	n := 0
	for _, a := range agents {
		n += len(a.Lanes)
	}
	if n == 0 {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tLANE\tSTATE\tSTEPS\tBUDGET LEFT\tLAST PROGRESS\tREAD FROM OUTSIDE")
	for _, a := range agents {
		for _, l := range a.Lanes {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.AgentID, l.Lane, laneState(l), count(l.Steps),
				dash(admin.BudgetText(l.BudgetRemaining)), dash(clip(l.Progress, 60)), dash(clip(strings.Join(l.Sources, " "), 80)))
		}
	}
	return tw.Flush()
}

// laneState reads a lane's state with its skill and step, if any.
func laneState(l admin.LaneStatus) string {
	s := admin.StateText(l.State)
	switch {
	case l.Skill != "" && l.Step != "":
		s += " (" + l.Skill + " at " + l.Step + ")"
	case l.Skill != "":
		s += " (" + l.Skill + ")"
	case l.Step != "":
		s += " (at " + l.Step + ")"
	}
	return s
}

// count is n, or a dash for none.
func count(n int64) string {
	if n == 0 {
		return "-"
	}
	return strconv.FormatInt(n, 10)
}

// clip puts s on one line of at most n characters.
func clip(s string, n int) string {
	r := []rune(strings.Join(strings.Fields(s), " "))
	if len(r) <= n {
		return string(r)
	}
	return strings.TrimRight(string(r[:n-1]), " ") + "…"
}
