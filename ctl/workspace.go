package ctl

import (
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newWorkspaceCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "workspace", Short: "List and reset workspaces"}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print results as JSON")
	list := &cobra.Command{Use: "list", Short: "List workspaces, their paths and who leases each", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.WorkspaceList(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			tw := tabwriter.NewWriter(g.stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKSPACE\tPATH\tLEASED TO")
			for _, w := range out {
				holder := w.Holder
				if holder == "" {
					holder = "-"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\n", w.Name, w.Path, holder)
			}
			return tw.Flush()
		}}
	reset := &cobra.Command{Use: "reset <workspace>", Short: "Delete a workspace's contents; stops the agent leasing it first",
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			c := g.client()
			defer c.Close()
			out, err := c.WorkspaceReset(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(g.stdout, out)
			}
			fmt.Fprintf(g.stdout, "workspace %s (%s) is empty\n", out.Name, out.Path)
			return nil
		}}
	cmd.AddCommand(list, reset)
	return cmd
}
