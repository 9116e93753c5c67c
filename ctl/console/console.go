// Package console is choirctl console: it asks choird, over the admin
// socket (the console's trust root), for a one-time link into the web
// console and prints it, opening nothing; and it lists and revokes the
// console's sessions.
package console

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

// Env is what the command needs of choirctl: a client of choird's admin
// API and the output stream.
type Env struct {
	Client func() *admin.Client
	Stdout io.Writer
}

// Command is choirctl console.
func Command(env Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "console",
		Short: "Print a one-time link that logs into the web console",
		Long: `Print a one-time link into choird's web console (config.json "console";
choirctl init --local turns it on at http://127.0.0.1:7780). The link works
once, within a minute, and becomes a session cookie in the browser that opens
it; nothing is opened for you. Whoever can run this command is the operator.

choirctl console sessions lists the console's sessions; choirctl console
sessions revoke <id> ends one (its first 8 characters are enough). Actions in
the console are recorded as console:<id> in the same audit views as
choirctl's.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			l, err := env.Client().ConsoleLogin(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "%s\n(valid once, until %s)\n", l.URL, l.ExpiresAt.Local().Format(time.TimeOnly))
			return nil
		},
	}
	cmd.AddCommand(sessionsCommand(env))
	return cmd
}

func sessionsCommand(env Env) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List the web console's sessions of the last day",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return listSessions(cmd.Context(), env, asJSON)
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sessions as JSON")
	cmd.AddCommand(&cobra.Command{
		Use:     "revoke <session-id>",
		Short:   "End a web console session at once",
		Example: "  choirctl console sessions revoke 3f2a9c1e",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			r, err := env.Client().ConsoleSessionRevoke(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			for _, id := range r.Revoked {
				fmt.Fprintf(env.Stdout, "revoked %s\n", id)
			}
			return nil
		},
	})
	return cmd
}

func listSessions(ctx context.Context, env Env, asJSON bool) error {
	list, err := env.Client().ConsoleSessions(ctx)
	if err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(env.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	fmt.Fprint(env.Stdout, admin.ConsoleSessionsText(list, time.Now()))
	return nil
}
