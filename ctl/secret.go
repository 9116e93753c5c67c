package ctl

import (
	"fmt"
	"net/http"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

func newSecretCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{Use: "secret", Short: "Apply secrets.json to choird and the running agents"}
	apply := &cobra.Command{Use: "apply", Short: "Reload secrets.json in choird and have every running agent refresh its secrets",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := admin.NewClient(admin.SocketPath(g.home))
			defer c.Close()
			var out struct {
				Secrets  int `json:"secrets"`
				Notified int `json:"notified"`
			}
			if err := c.Do(cmd.Context(), http.MethodPost, "/v1/secrets/apply", nil, &out); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "applied %d secrets; %d running agents refreshing\n", out.Secrets, out.Notified)
			return nil
		}}
	cmd.AddCommand(apply)
	return cmd
}
