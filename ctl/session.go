package ctl

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
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

// adminCall makes one admin API call with a client of its own.
func adminCall(ctx context.Context, g *globals, method, path string, in, out any) error {
	c := admin.NewClient(admin.SocketPath(g.home))
	defer c.Close()
	return c.Do(ctx, method, path, in, out)
}

// budget mirrors rpc.Budget.
type budget struct {
	Tokens    *int64 `json:"tokens,omitempty"`
	ToolCalls *int64 `json:"tool_calls,omitempty"`
	TimeMS    *int64 `json:"time_ms,omitempty"`
}

// coreJob mirrors daemon.CoreJob.
type coreJob struct {
	Name            string `json:"name"`
	Lane            string `json:"lane"`
	State           string `json:"state"`
	Skill           string `json:"skill,omitempty"`
	Step            string `json:"step,omitempty"`
	BudgetRemaining budget `json:"budget_remaining"`
	Active          bool   `json:"active"`
}

// sessionCores mirrors daemon.SessionCoresResult.
type sessionCores struct {
	AgentID   string    `json:"agent_id"`
	SessionID string    `json:"session_id"`
	Live      bool      `json:"live"`
	Cores     []coreJob `json:"cores"`
}

// sessionRef mirrors daemon.SessionRef.
type sessionRef struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
	Target    string `json:"target,omitempty"`
}

// sessionEvent mirrors daemon.SessionEvent.
type sessionEvent struct {
	Rev       int64     `json:"rev"`
	CreatedAt time.Time `json:"created_at"`
	Lane      string    `json:"lane"`
	Type      string    `json:"event_type"`
	Digest    string    `json:"digest"`
}

// sessionEvents mirrors daemon.SessionEventsResult.
type sessionEvents struct {
	AgentID   string         `json:"agent_id"`
	SessionID string         `json:"session_id"`
	Live      bool           `json:"live"`
	Events    []sessionEvent `json:"events"`
}

func agentPath(id string, rest ...string) string {
	parts := append([]string{"/v1/agents", url.PathEscape(id)}, rest...)
	return strings.Join(parts, "/")
}

func newSessionCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "session", Short: "Inspect and steer an agent's running session: core jobs, cancel, compact, events"}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print results as JSON")

	cores := &cobra.Command{Use: "cores <agent-id>", Short: "List the core jobs of the agent's session (name, state, step)",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out sessionCores
			if err := adminCall(cmd.Context(), g, http.MethodGet, agentPath(args[0], "session", "cores"), nil, &out); err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "JOB\tSTATE\tSTEP\tSKILL\tRUNNING")
			for _, c := range out.Cores {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%t\n", c.Name, c.State, dash(c.Step), dash(c.Skill), c.Active)
			}
			return tw.Flush()
		}}
	cancel := &cobra.Command{Use: "cancel <agent-id> <job-name>",
		Short: "Cancel a core job of the agent's session by name (edge: the edge lane's turn)",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			var out sessionRef
			if err := adminCall(cmd.Context(), g, http.MethodPost,
				agentPath(args[0], "session", "cancel", url.PathEscape(args[1])), nil, &out); err != nil {
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
			var out sessionRef
			if err := adminCall(cmd.Context(), g, http.MethodPost, agentPath(args[0], "session", "compact"), nil, &out); err != nil {
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
			var out sessionEvents
			if err := adminCall(cmd.Context(), g, http.MethodGet, agentPath(args[0], "session", "events", fmt.Sprint(n)), nil, &out); err != nil {
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
	cmd.AddCommand(cores, cancel, compact, events)
	return cmd
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
