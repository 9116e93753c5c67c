package ctl

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

// startOverrides is the body of POST /v1/agents/{id}/start; its fields
// mirror daemon.StartOverrides (ctl does not import the daemon).
type startOverrides struct {
	Workspace    string `json:"workspace,omitempty"`
	LLM          string `json:"llm,omitempty"`
	VoiceProfile string `json:"voice_profile,omitempty"`
	GitIdentity  string `json:"git_identity,omitempty"`
	Notion       string `json:"notion,omitempty"`
	Email        string `json:"email,omitempty"`
	DM           string `json:"dm,omitempty"`
}

func newAgentCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "agent", Short: "Start, stop and inspect agents"}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print results as JSON")

	call := func(ctx context.Context, method, path string, in, out any) error {
		c := admin.NewClient(admin.SocketPath(g.home))
		defer c.Close()
		return c.Do(ctx, method, path, in, out)
	}
	printOne := func(a admin.AgentStatus) error {
		if asJSON {
			return writeJSON(g.stdout, a)
		}
		return printAgents(g.stdout, []admin.AgentStatus{a})
	}

	list := &cobra.Command{Use: "list", Short: "List every configured agent and its state", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out []admin.AgentStatus
			if err := call(cmd.Context(), http.MethodGet, "/v1/agents", nil, &out); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			return printAgents(g.stdout, out)
		}}

	var o startOverrides
	start := &cobra.Command{Use: "start <agent-id>", Short: "Start an agent; every default resource can be overridden",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			// Without --dm the agent talks on its defaults.dm, which
			// config.json requires; choird resolves it.
			var out admin.AgentStatus
			if err := call(cmd.Context(), http.MethodPost, "/v1/agents/"+args[0]+"/start", o, &out); err != nil {
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

	simple := func(use, short, verb string) *cobra.Command {
		return &cobra.Command{Use: use + " <agent-id>", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				var out admin.AgentStatus
				method, path := http.MethodPost, "/v1/agents/"+args[0]+"/"+verb
				if verb == "" {
					method, path = http.MethodGet, "/v1/agents/"+args[0]
				}
				if err := call(cmd.Context(), method, path, nil, &out); err != nil {
					return err
				}
				return printOne(out)
			}}
	}
	var force bool
	buildCmd := &cobra.Command{Use: "build <agent-id>", Short: "Build the agent's image from its repos; skipped when nothing changed",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out struct {
				AgentID string `json:"agent_id"`
				Image   string `json:"image"`
				Built   bool   `json:"built"`
				Version any    `json:"version"`
			}
			if err := call(cmd.Context(), http.MethodPost, "/v1/agents/"+args[0]+"/build",
				map[string]bool{"force": force}, &out); err != nil {
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
	printUpdates := func(rs []updateResult) error {
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
			var out updateResult
			if err := call(cmd.Context(), http.MethodPost, "/v1/agents/"+args[0]+"/update", nil, &out); err != nil {
				return err
			}
			return printUpdates([]updateResult{out})
		}}
	updateAll := &cobra.Command{Use: "update-all", Short: "Build and redeploy every agent, one after the other", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var out []updateResult
			if err := call(cmd.Context(), http.MethodPost, "/v1/agents/update-all", nil, &out); err != nil {
				return err
			}
			return printUpdates(out)
		}}
	cmd.AddCommand(buildCmd, update, updateAll, newAgentInitCommand(g))
	cmd.AddCommand(list, start,
		simple("stop", "Stop an agent gracefully: final heartbeat, session persisted", "stop"),
		simple("restart", "Stop and start an agent with the same resources", "restart"),
		simple("status", "Show an agent's state and session", ""))
	return cmd
}

// updateResult mirrors daemon.UpdateResult.
type updateResult struct {
	AgentID string `json:"agent_id"`
	Image   string `json:"image,omitempty"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
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
