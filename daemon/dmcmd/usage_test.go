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

// TestCapCommand raises a cap from an admin DM: config.json holds the new
// value and the running configuration has it; bad input names what is
// wrong and changes nothing; a regular DM may not.
func TestCapCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := choirdtest.Start(t, choirdtest.Options{Edit: func(cfg *config.Config, _ config.Secrets) {
		cfg.DMs["alice"] = config.DM{Gateway: "console", UserID: "alice"}
		a := cfg.Agents["assistant"]
		a.Budgets.PerDayCostUSD = 1
		cfg.Agents["assistant"] = a
	}})
	cmds := dmcmd.New(dmcmd.Options{Control: c.Control, Pool: c.Pool(), Logger: slog.New(slog.DiscardHandler)})
	send := func(dm gateway.DM, args ...string) string {
		t.Helper()
		out, err := cmds.Command(ctx, gateway.Command{DM: dm, ChatID: dm.UserID, Name: "cap", Args: args,
			Text: strings.Join(args, " ")})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	alice := gateway.DM{Gateway: "console", Name: "alice", UserID: "alice"}
	adminDM := gateway.DM{Gateway: "console", Name: "console", UserID: "operator", Admin: true}
	onDisk := func() float64 {
		cfg, _, err := config.Load(c.Home)
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Agents["assistant"].Budgets.PerDayCostUSD
	}
	for _, bad := range [][]string{
		{"assistant", "per_week_cost_usd", "5"},
		{"assistant", "per_day_tokens", "1.5"},
		{"assistant", "per_day_cost_usd", "-1"},
		{"nobody", "per_day_cost_usd", "5"},
		{"assistant", "per_day_cost_usd"},
	} {
		if got := send(adminDM, bad...); strings.Contains(got, "applied") || onDisk() != 1 {
			t.Errorf("/cap %v = %q, cap on disk %v", bad, got, onDisk())
		}
	}
	if got := send(alice, "assistant", "per_day_cost_usd", "5"); strings.Contains(got, "applied") || onDisk() != 1 {
		t.Errorf("a regular DM raised a cap: %q", got)
	}
	got := send(adminDM, "assistant", "per_day_cost_usd", "5")
	if !strings.Contains(got, "applied") || onDisk() != 5 {
		t.Fatalf("/cap = %q, cap on disk %v", got, onDisk())
	}
	if v := c.Control.Snapshot().Config.Agents["assistant"].Budgets.PerDayCostUSD; v != 5 {
		t.Errorf("the running configuration's cap is %v, want 5", v)
	}
}
