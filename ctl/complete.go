package ctl

import (
	"context"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/rpc/admin"
)

// Shell completion: cobra generates the scripts (choirctl completion
// bash|zsh|fish), and the ids a command takes are completed from choird.
// Which id an argument is comes from the placeholders of the command's Use
// line, so a new command that names its arguments as the others do
// (<agent-id>, an approval's <id>, a session's <key|id>) is completed
// without more code. When choird is down nothing is completed and nothing
// is printed: a shell's completion is no place for an error.

// completionTimeout bounds one completion's call to choird, so a wedged
// choird never hangs the shell.
const completionTimeout = 2 * time.Second

type completer func(ctx context.Context, c *admin.Client, args []string) ([]string, error)

// complete turns f into a cobra completion function that asks choird.
func (g *globals) complete(f completer) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		c := g.client()
		defer c.Close()
		ids, err := f(ctx, c, args)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return ids, cobra.ShellCompDirectiveNoFileComp
	}
}

func (g *globals) completeAgents(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return g.complete(agentIDs)(cmd, args, toComplete)
}

func agentIDs(ctx context.Context, c *admin.Client, _ []string) ([]string, error) {
	agents, err := c.AgentList(ctx)
	ids := make([]string, len(agents))
	for i, a := range agents {
		ids[i] = a.AgentID
	}
	return ids, err
}

// sessionIDs are the sessions of the agent named by the first argument.
func sessionIDs(ctx context.Context, c *admin.Client, args []string) ([]string, error) {
	if len(args) == 0 {
		return nil, nil
	}
	ss, err := c.SessionList(ctx, admin.SessionListRequest{AgentID: args[0]})
	ids := make([]string, len(ss))
	for i, s := range ss {
		ids[i] = s.SessionID
	}
	return ids, err
}

func approvalIDs(ctx context.Context, c *admin.Client, _ []string) ([]string, error) {
	as, err := c.ApprovalList(ctx, "")
	ids := make([]string, len(as))
	for i, a := range as {
		ids[i] = a.ID
	}
	return ids, err
}

// completerFor is what completes each placeholder of a Use line. A
// <key|id> is a knowledge document's or a session's (memory show and
// delete); the sessions are what choird can list.
var completerFor = map[string]completer{
	"<agent-id>": agentIDs,
	"<agent>":    agentIDs,
	"<key|id>":   sessionIDs,
}

// addCompletions gives every command under cmd without a completion of its
// own one that completes its positional arguments from choird, and
// completes the --agent and --session flags wherever they appear.
func (g *globals) addCompletions(cmd *cobra.Command) {
	for _, sub := range cmd.Commands() {
		g.addCompletions(sub)
	}
	if f := cmd.Flags().Lookup("agent"); f != nil {
		if _, ok := cmd.GetFlagCompletionFunc("agent"); !ok {
			cmd.RegisterFlagCompletionFunc("agent", g.completeAgents) //nolint:errcheck
		}
	}
	if cmd.ValidArgsFunction != nil || !cmd.Runnable() {
		return
	}
	var slots []completer
	for _, p := range strings.Fields(cmd.Use)[1:] {
		f := completerFor[p]
		switch {
		case p == "<id>" && cmd.Parent() != nil && cmd.Parent().Name() == "approval":
			f = approvalIDs
		case p == "<key|id>" && cmd.Name() == "history":
			f = nil // a knowledge document's: no session
		}
		slots = append(slots, f)
	}
	if len(slots) == 0 {
		return
	}
	cmd.ValidArgsFunction = func(c *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= len(slots) || slots[len(args)] == nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return g.complete(slots[len(args)])(c, args, toComplete)
	}
}
