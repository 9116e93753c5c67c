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

func printApproval(w io.Writer, a admin.Approval) {
	fmt.Fprintf(w, "approval:   %s\n", a.ID)
	fmt.Fprintf(w, "agent:      %s (session %s)\n", a.AgentID, a.SessionID)
	fmt.Fprintf(w, "type:       %s\n", a.RequestType)
	fmt.Fprintf(w, "summary:    %s\n", a.Summary)
	fmt.Fprintf(w, "status:     %s\n", a.Status)
	fmt.Fprintf(w, "requested:  %s\n", a.CreatedAt.Local().Format(time.DateTime))
	if a.ResolvedAt != nil {
		fmt.Fprintf(w, "resolved:   %s by %s\n", a.ResolvedAt.Local().Format(time.DateTime), a.ResolvedBy)
	} else {
		fmt.Fprintf(w, "expires:    %s\n", a.ExpiresAt.Local().Format(time.DateTime))
	}
	if len(a.Payload) > 0 && string(a.Payload) != "null" && string(a.Payload) != "{}" {
		fmt.Fprintf(w, "payload:    %s\n", a.Payload)
	}
}

func newApprovalCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "approval", Short: "List, show, approve and reject agents' approval requests"}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print results as JSON")
	var agent string
	list := &cobra.Command{Use: "list", Short: "List pending approvals, oldest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.ApprovalList(cmd.Context(), agent)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "APPROVAL\tAGENT\tTYPE\tEXPIRES\tSUMMARY")
			for _, a := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", a.ID, a.AgentID, a.RequestType,
					a.ExpiresAt.Local().Format(time.DateTime), a.Summary)
			}
			return tw.Flush()
		}}
	list.Flags().StringVar(&agent, "agent", "", "only this agent's approvals")
	show := &cobra.Command{Use: "show <id>", Short: "Show an approval: what, who, when", Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.ApprovalShow(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			printApproval(g.stdout, out)
			return nil
		}}
	decide := func(verb, short string, call func(*admin.Client, context.Context, string) (admin.Approval, error)) *cobra.Command {
		return &cobra.Command{Use: verb + " <id>", Short: short, Args: cobra.ExactArgs(1),
			RunE: func(cmd *cobra.Command, args []string) error {
				c := g.client()
				defer c.Close()
				out, err := call(c, cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if asJSON {
					return writeJSON(g.stdout, out)
				}
				fmt.Fprintf(g.stdout, "%s: %s (%s)\n", out.Status, out.Summary, out.AgentID)
				return nil
			}}
	}
	cmd.AddCommand(list, show, decide("approve", "Approve a pending approval", (*admin.Client).ApprovalApprove),
		decide("reject", "Reject a pending approval", (*admin.Client).ApprovalReject),
		decide("always", "Approve a pending approval for good (an egress host: reached without asking from then on)",
			(*admin.Client).ApprovalAlways))
	return cmd
}
