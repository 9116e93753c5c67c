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

// newSessionReplayCommand is choirctl session replay: a session's log,
// page by page, verified against its hash chain as it is read.
func newSessionReplayCommand(g *globals, asJSON *bool) *cobra.Command {
	var req admin.SessionReplayRequest
	var all bool
	cmd := &cobra.Command{Use: "replay <session-id>",
		Short: "Step through a session's log, verifying its hash chain: user messages, model calls, tool calls and results, lane by lane",
		Long: "Prints a page of the session's events (--from and --limit) and checks each one: its hash is computed again from its\n" +
			"contents and must continue the stored hash of the event before it. An event altered, removed or reordered in the\n" +
			"database shows as a break, and the command then exits with status 1. --all follows the pages to the end of the log.\n" +
			"With --json each page is one JSON object; with --all they follow one another, a stream that jq reads.",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.SessionID = args[0]
			if err := req.Validate(); err != nil {
				return usageErr(err)
			}
			return runSessionReplay(cmd.Context(), g, req, all, *asJSON)
		}}
	cmd.Flags().Int64Var(&req.From, "from", 0, "first revision shown (default: the session's first)")
	cmd.Flags().IntVar(&req.Limit, "limit", admin.DefaultReplayPage, fmt.Sprintf("events on a page (at most %d)", admin.MaxReplayPage))
	cmd.Flags().BoolVar(&all, "all", false, "follow the pages to the end of the log")
	return cmd
}

func runSessionReplay(ctx context.Context, g *globals, req admin.SessionReplayRequest, all, asJSON bool) error {
	c := g.client()
	defer c.Close()
	var firstBreak int64
	start := req.From
	for page := 0; ; page++ {
		out, err := c.SessionReplay(ctx, req)
		if admin.IsBadRequest(err) {
			return usageErr(err)
		}
		if err != nil {
			return err
		}
		if asJSON {
			if err := writeJSON(g.stdout, out); err != nil {
				return err
			}
		} else if err := printReplay(g.stdout, out, page == 0); err != nil {
			return err
		}
		if firstBreak == 0 {
			firstBreak = out.FirstBreak
		}
		if !all || out.Next == 0 {
			if !asJSON {
				printReplayEnd(g.stdout, out, start, firstBreak)
			}
			break
		}
		req.From = out.Next
	}
	if firstBreak != 0 {
		return fmt.Errorf("the hash chain of session %s breaks at revision %d: the log was altered after the agent wrote it",
			req.SessionID, firstBreak)
	}
	return nil
}

// printReplay writes a page as a table, each broken event followed by
// why it breaks the chain.
func printReplay(w io.Writer, r admin.SessionReplay, header bool) error {
	if header {
		fmt.Fprintf(w, "session %s  agent %s  %s  started %s  revisions %d-%d\n", r.SessionID, r.AgentID, r.Status,
			r.StartedAt.Local().Format(time.DateTime), r.FirstRev, r.LastRev)
	}
	if len(r.Events) == 0 {
		_, err := fmt.Fprintln(w, "no events from this revision")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "\tREV\tTIME\tLANE\tEVENT\tSUMMARY")
	}
	for _, e := range r.Events {
		mark := "ok"
		if e.Break != "" {
			mark = "BREAK"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", mark, e.Rev, e.CreatedAt.Local().Format("15:04:05.000"), e.Lane, e.Type,
			e.Summary)
		if e.Break != "" {
			fmt.Fprintf(tw, "\t\t\t\t\t^ %s\n", e.Break)
		}
	}
	return tw.Flush()
}

func printReplayEnd(w io.Writer, r admin.SessionReplay, start, firstBreak int64) {
	start = max(start, r.FirstRev)
	last := r.From
	if n := len(r.Events); n > 0 {
		last = r.Events[n-1].Rev
	}
	switch {
	case firstBreak != 0:
		fmt.Fprintf(w, "chain BROKEN at revision %d\n", firstBreak)
	case len(r.Events) > 0:
		fmt.Fprintf(w, "chain verified for revisions %d-%d\n", start, last)
	}
	if r.Next != 0 {
		fmt.Fprintf(w, "more: choirctl session replay %s --from %d\n", r.SessionID, r.Next)
	}
}
