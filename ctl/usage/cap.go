package usage

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/choirhq/choir/config"
)

// capCommand is choirctl usage cap set.
func capCommand(env Env) *cobra.Command {
	cmd := &cobra.Command{Use: "cap", Short: "Change an agent's usage caps"}
	cmd.AddCommand(&cobra.Command{
		Use:   "set <agent-id> <field> <value>",
		Short: "Set one of an agent's caps in config.json and apply it",
		Long: `Set agents.<agent-id>.budgets.<field> in config.json and apply the config
(choirctl config load and apply): a running agent takes the new cap at once.
Fields: ` + strings.Join(config.CapFields, ", ") + `; 0 removes a cap
(total_session_tokens: back to its default). A cap set below what its scope
already spent is accepted: calls in that scope stop at once, and the DM is
told. Other changes already made to config.json are applied too.`,
		Example: "  choirctl usage cap set assistant per_day_cost_usd 5\n  choirctl usage cap set assistant per_job_tokens 400000",
		Args:    cobra.ExactArgs(3),
		RunE: func(cmd *cobra.Command, args []string) error {
			return runCapSet(cmd.Context(), env, args[0], args[1], args[2])
		},
	})
	return cmd
}

func runCapSet(ctx context.Context, env Env, agentID, field, value string) error {
	path := filepath.Join(env.Home(), config.ConfigFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	b, err := config.SetAgentCap(raw, agentID, field, value)
	if err != nil {
		return env.UsageErr(err)
	}
	if err := config.WriteFileAtomic(path, b, 0o644); err != nil {
		return err
	}
	fmt.Fprintf(env.Stdout, "agents.%s.budgets.%s = %s in %s\n", agentID, field, value, path)
	c := env.Client()
	if _, err := c.ConfigLoad(ctx); err != nil {
		return fmt.Errorf("written, not applied (run choirctl config apply once choird runs): %w", err)
	}
	rep, err := c.ConfigApply(ctx)
	if err != nil {
		return fmt.Errorf("written and loaded, not applied: %w", err)
	}
	fmt.Fprintf(env.Stdout, "applied: config version %d, %d running agents told\n", rep.Version, rep.Notified)
	return nil
}
