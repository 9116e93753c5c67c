package dmcmd_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/dmcmd"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/internal/choirdtest"
)

// TestUsageCommand answers /usage: a regular DM sees its agent's caps and
// days in its own time zone, and may not name another agent; an admin DM
// names any.
func TestUsageCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := choirdtest.Start(t, choirdtest.Options{Edit: func(cfg *config.Config, _ config.Secrets) {
		cfg.DMs["alice"] = config.DM{Gateway: "console", UserID: "alice", TimeZone: "Asia/Tokyo"}
		cfg.Workspaces["side"] = config.Workspace{Path: filepath.Join(filepath.Dir(cfg.Workspaces["main"].Path), "side")}
		cfg.Agents["helper"] = config.Agent{Defaults: config.AgentDefaults{Workspace: "side", LLM: "local", DM: "alice"},
			Budgets: config.Budgets{Caps: config.Caps{PerDayCostUSD: 2.5}}}
	}})
	cmds := dmcmd.New(dmcmd.Options{Control: c.Control, Pool: c.Pool(), Logger: slog.New(slog.DiscardHandler)})
	send := func(dm gateway.DM, args ...string) string {
		t.Helper()
		out, err := cmds.Command(ctx, gateway.Command{DM: dm, ChatID: dm.UserID, Name: "usage", Args: args,
			Text: strings.Join(args, " ")})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	alice := gateway.DM{Gateway: "console", Name: "alice", UserID: "alice"}
	adminDM := gateway.DM{Gateway: "console", Name: "console", UserID: "operator", Admin: true}
	got := send(alice)
	for _, want := range []string{"Usage of helper", "Asia/Tokyo", "per_day_cost_usd", "$0.0000 of $2.5000 (0%)",
		"agents.helper.budgets.<field>"} {
		if !strings.Contains(got, want) {
			t.Errorf("alice's /usage lacks %q:\n%s", want, got)
		}
	}
	if got := send(alice, "assistant"); !strings.Contains(got, "Refused") {
		t.Errorf("alice naming another agent: %s", got)
	}
	if got := send(adminDM, "assistant"); !strings.Contains(got, "Usage of assistant") {
		t.Errorf("admin's /usage assistant:\n%s", got)
	}
}
