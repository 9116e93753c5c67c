package usage

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
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
	if !slices.Contains(config.CapFields, field) {
		return env.UsageErr(fmt.Errorf("field %q: want one of %s", field, strings.Join(config.CapFields, ", ")))
	}
	v, err := strconv.ParseFloat(value, 64)
	money := strings.HasSuffix(field, "_usd")
	if err != nil || v < 0 || math.IsInf(v, 0) || (!money && v != math.Trunc(v)) {
		ex := "400000"
		if money {
			ex = "2.5"
		}
		return env.UsageErr(fmt.Errorf("value %q for %s: want a number 0 or more, e.g. %s", value, field, ex))
	}
	path := filepath.Join(env.Home(), config.ConfigFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	cfg, err := config.Parse(raw)
	if err != nil {
		return env.UsageErr(err)
	}
	a, ok := cfg.Agents[agentID]
	if !ok {
		return env.UsageErr(fmt.Errorf("unknown agent %q: it is not in %s", agentID, path))
	}
	setCap(&a.Budgets, field, v)
	cfg.Agents[agentID] = a
	b, err := cfg.MarshalIndent()
	if err != nil {
		return err
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

func setCap(b *config.Budgets, field string, v float64) {
	switch field {
	case "total_session_tokens":
		b.TotalSessionTokens = int64(v)
	case "session_cost_usd":
		b.SessionCostUSD = v
	case "per_job_tokens":
		b.PerJobTokens = int64(v)
	case "per_job_cost_usd":
		b.PerJobCostUSD = v
	case "per_day_tokens":
		b.PerDayTokens = int64(v)
	case "per_day_cost_usd":
		b.PerDayCostUSD = v
	}
}
