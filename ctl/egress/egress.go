// Package egress is choirctl egress: the hosts a person allowed an
// agent's egress gateway to reach for good (/always on an egress
// approval, or choirctl approval always), and taking one back. The
// standing policy is config.json's egress.allow; these are what people
// added on the way.
package egress

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strconv"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

// Env is what the command needs of choirctl.
type Env struct {
	Client   func() *admin.Client
	Stdout   io.Writer
	UsageErr func(error) error
}

// Command is choirctl egress.
func Command(env Env) *cobra.Command {
	cmd := &cobra.Command{Use: "egress", Short: "List and revoke the hosts agents may reach because a person allowed them for good"}
	var asJSON bool
	grants := &cobra.Command{
		Use:   "grants",
		Short: "List the hosts each agent may reach without asking, allowed on an approval",
		Long: `List, per agent, the host:port pairs a person allowed for good by answering an
egress approval with /always (or choirctl approval always). The egress
gateway lets these through without asking, beside config.json's egress.allow.
choirctl egress revoke takes one back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c := env.Client()
			defer c.Close()
			out, err := c.EgressGrants(cmd.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return json.NewEncoder(env.Stdout).Encode(out)
			}
			if len(out) == 0 {
				fmt.Fprintln(env.Stdout, "no host is allowed for good; egress.allow in config.json is the standing policy")
				return nil
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "AGENT\tHOST\tGRANTED")
			for _, g := range out {
				fmt.Fprintf(tw, "%s\t%s\t%s\n", g.AgentID, net.JoinHostPort(g.Host, strconv.Itoa(g.Port)),
					g.GrantedAt.UTC().Format("2006-01-02 15:04 MST"))
			}
			return tw.Flush()
		}}
	grants.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	revoke := &cobra.Command{
		Use:     "revoke <agent-id> <host:port>",
		Short:   "Take back a host allowed for good: the next connection there is asked about again",
		Example: "  choirctl egress revoke assistant example.com:443",
		Args:    cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			host, p, err := net.SplitHostPort(args[1])
			port, perr := strconv.Atoi(p)
			if err != nil || perr != nil || port < 1 || port > 65535 {
				return env.UsageErr(fmt.Errorf("%q is not host:port: name the host and port as choirctl egress grants "+
					"lists them, e.g. example.com:443", args[1]))
			}
			c := env.Client()
			defer c.Close()
			g, err := c.EgressRevoke(cmd.Context(), args[0], admin.EgressRevoke{Host: host, Port: port})
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "revoked: %s may no longer reach %s without asking\n", g.AgentID,
				net.JoinHostPort(g.Host, strconv.Itoa(g.Port)))
			return nil
		}}
	cmd.AddCommand(grants, revoke)
	return cmd
}
