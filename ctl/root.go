// Package ctl is choirctl, the operator's command line: one file per
// command group (the memory commands in ctl/memory), each command an
// options struct and a run function that never touches cobra, so commands
// are testable without a process. It reaches choird only through the
// admin API's typed client (rpc/admin); it opens Postgres itself only to
// migrate it (db migrate).
package ctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/ctl/console"
	"github.com/choirhq/choir/ctl/egress"
	"github.com/choirhq/choir/ctl/logs"
	"github.com/choirhq/choir/ctl/memory"
	"github.com/choirhq/choir/ctl/secret"
	"github.com/choirhq/choir/ctl/usage"
	"github.com/choirhq/choir/internal/logjson"
	"github.com/choirhq/choir/rpc/admin"
)

// Exit codes.
const (
	ExitOK    = 0
	ExitError = 1
	// ExitUsage is for bad input: a malformed config or command line.
	ExitUsage = 2
)

// exitError carries an exit code through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func usageErr(err error) error { return &exitError{code: ExitUsage, err: err} }

// globals are the flags every command shares.
type globals struct {
	home      string
	logFormat string
	stdout    io.Writer
	stderr    io.Writer
}

// logger logs to stderr at level in --log-format: text on a terminal,
// JSON elsewhere, unless the flag says which.
func (g *globals) logger(level slog.Level) *slog.Logger {
	return slog.New(logjson.NewStreamHandler(g.stderr, level, g.logFormat))
}

// client returns a client of choird's admin API; the caller closes it.
func (g *globals) client() *admin.Client {
	return admin.NewClient(admin.SocketPath(g.home))
}

// Run executes choirctl with args (without the program name) and returns
// the process exit code.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	g := &globals{stdout: stdout, stderr: stderr}
	root := newRootCommand(g)
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return ExitOK
	}
	fmt.Fprintf(stderr, "choirctl: %v\n", err)
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if isUsage(err) {
		return ExitUsage
	}
	return ExitError
}

// newRootCommand is choirctl with every command, writing to g's streams.
func newRootCommand(g *globals) *cobra.Command {
	root := &cobra.Command{
		Use:   "choirctl",
		Short: "Operate Choir: set up, migrate, validate and control choird and its agents",
		Long: `Operate Choir: set up, migrate, validate and control choird and its agents.

Every listing takes --json. Shell completion, with agent, session and
approval ids from choird: choirctl completion bash|zsh|fish --help.

Exit codes:
  0  ok
  1  error: the command failed (choird not running, an operation refused or failed)
  2  bad input: a malformed command line, config or argument, or an unknown name`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if _, err := logjson.ParseFormat(g.logFormat); err != nil {
				return usageErr(fmt.Errorf("--log-format: %w", err))
			}
			return nil
		},
	}
	root.PersistentFlags().StringVar(&g.home, "home", config.DefaultHome(), "the .choir.d directory (env CHOIR_HOME)")
	root.PersistentFlags().StringVar(&g.logFormat, "log-format", logjson.FormatAuto, "log lines on stderr: auto (text on a terminal, else json), text or json")
	root.SetOut(g.stdout)
	root.SetErr(g.stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	root.AddCommand(newInitCommand(g), newDBCommand(g), newConfigCommand(g), newStatusCommand(g), memory.Command(memory.Env{Client: g.client, Stdout: g.stdout, Stderr: g.stderr, UsageErr: usageErr}),
		newAgentCommand(g), newWorkspaceCommand(g), newChatCommand(g), newScheduleCommand(g))
	root.AddCommand(secret.Command(secret.Env{Home: func() string { return g.home }, Client: g.client, Stdout: g.stdout, UsageErr: usageErr}))
	root.AddCommand(sessionCommands(g)...)
	root.AddCommand(logs.Command(logs.Env{Home: func() string { return g.home }, Stdout: g.stdout, Stderr: g.stderr,
		UsageErr: usageErr}))
	root.AddCommand(usage.Command(usage.Env{Home: func() string { return g.home }, Client: g.client, Stdout: g.stdout, Stderr: g.stderr, UsageErr: usageErr}))
	root.AddCommand(console.Command(console.Env{Client: g.client, Stdout: g.stdout}))
	root.AddCommand(egress.Command(egress.Env{Client: g.client, Stdout: g.stdout, UsageErr: usageErr}))
	g.addCompletions(root)
	return root
}

// isUsage recognises cobra's own argument errors, which it does not type.
func isUsage(err error) bool {
	for _, p := range []string{"unknown command", "accepts ", "requires ", "unknown flag", "invalid argument"} {
		if strings.Contains(err.Error(), p) {
			return true
		}
	}
	return false
}
