package ctl

import (
	"context"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

type statusOptions struct {
	json bool
}

func newStatusCommand(g *globals) *cobra.Command {
	var opts statusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show choird's health, Postgres reachability and every agent's state",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runStatus(cmd.Context(), g, opts) },
	}
	cmd.Flags().BoolVar(&opts.json, "json", false, "print the status as JSON")
	return cmd
}

func runStatus(ctx context.Context, g *globals, opts statusOptions) error {
	c := g.client()
	defer c.Close()
	st, err := c.Status(ctx)
	if err != nil {
		return err
	}
	if opts.json {
		return writeJSON(g.stdout, st)
	}
	fmt.Fprintf(g.stdout, "choird %s, pid %d, up %s, config version %d\n", st.Choird.Version, st.Choird.PID,
		st.Choird.Uptime().Round(time.Second), st.ConfigVersion)
	if st.Postgres.Reachable {
		fmt.Fprintf(g.stdout, "postgres: reachable, server %s\n", st.Postgres.ServerVersion)
	} else {
		fmt.Fprintf(g.stdout, "postgres: UNREACHABLE: %s\n", st.Postgres.Error)
	}
	if m := st.Memory; m != nil {
		kind := "provider " + m.Provider + " " + m.Model
		if m.Offline {
			kind = "OFFLINE built-in lexical embedder (no provider configured)"
		}
		fmt.Fprintf(g.stdout, "memory: %s, %d dims; %d waiting for vectors, %d failed", kind, m.Dimensions, m.Pending, m.Failed)
		if m.ConsecutiveFailures > 0 {
			fmt.Fprintf(g.stdout, "; provider failing (%d calls in a row), search falls back to full text", m.ConsecutiveFailures)
		}
		if m.LastError != "" {
			fmt.Fprintf(g.stdout, "; last error: %s", m.LastError)
		}
		fmt.Fprintln(g.stdout)
	}
	for _, m := range st.Models {
		if m.Reachable {
			fmt.Fprintf(g.stdout, "model %s: %s at %s, reachable\n", m.Name, m.Model, m.Endpoint)
		} else {
			fmt.Fprintf(g.stdout, "model %s: %s at %s, UNREACHABLE: %s\n", m.Name, m.Model, m.Endpoint, m.Error)
		}
	}
	if st.NoModel != "" {
		fmt.Fprintf(g.stdout, "models: %s\n", st.NoModel)
	}
	tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "AGENT\tSTATE\tSESSION\tRUNTIME\tLAST HEARTBEAT")
	for _, a := range st.Agents {
		beat := "-"
		if a.LastHeartbeatAt != nil {
			beat = time.Since(*a.LastHeartbeatAt).Round(time.Second).String() + " ago"
		}
		session, runtime := a.SessionID, a.Runtime
		if session == "" {
			session = "-"
		}
		if runtime == "" {
			runtime = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.AgentID, a.State, session, runtime, beat)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return printLanes(g.stdout, st.Agents)
}
