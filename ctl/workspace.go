package ctl

import (
	"fmt"
	"net/http"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

// workspaceInfo mirrors daemon.WorkspaceInfo.
type workspaceInfo struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Holder string `json:"holder,omitempty"`
}

func newWorkspaceCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "workspace", Short: "List and reset workspaces"}
	var asJSON bool
	cmd.PersistentFlags().BoolVar(&asJSON, "json", false, "print results as JSON")
	list := &cobra.Command{Use: "list", Short: "List workspaces, their paths and who leases each", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := admin.NewClient(admin.SocketPath(g.home))
			defer c.Close()
			var out []workspaceInfo
			if err := c.Do(cmd.Context(), http.MethodGet, "/v1/workspaces", nil, &out); err != nil {
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
			c := admin.NewClient(admin.SocketPath(g.home))
			defer c.Close()
			var out workspaceInfo
			if err := c.Do(cmd.Context(), http.MethodPost, "/v1/workspaces/"+args[0]+"/reset", nil, &out); err != nil {
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
