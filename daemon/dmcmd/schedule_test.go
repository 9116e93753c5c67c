package dmcmd_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/dmcmd"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestSchedulesCommand lists schedules from DMs: a regular DM sees its
// agent's schedules that come to it, each with its times in its own zone;
// an admin DM sees every agent's, or one's.
func TestSchedulesCommand(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := choirdtest.Start(t, choirdtest.Options{Edit: func(cfg *config.Config, _ config.Secrets) {
		cfg.DMs["alice"] = config.DM{Gateway: "console", UserID: "alice", TimeZone: "Europe/Berlin"}
		cfg.Workspaces["side"] = config.Workspace{Path: filepath.Join(filepath.Dir(cfg.Workspaces["main"].Path), "side")}
		cfg.Agents["helper"] = config.Agent{Defaults: config.AgentDefaults{Workspace: "side", LLM: "local", DM: "alice"}}
	}})
	sc := control.Scope{Admin: true, Actor: "test"}
	add := func(req admin.ScheduleAddRequest) admin.Schedule {
		t.Helper()
		s, err := c.Schedules().Add(ctx, sc, req)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	add(admin.ScheduleAddRequest{AgentID: "helper", Cron: "0 8 * * MON-FRI", Text: "Brief Alice on her day"})
	add(admin.ScheduleAddRequest{AgentID: "helper", At: "2030-03-01 09:30", Text: "Renew the passport", Reminder: true})
	add(admin.ScheduleAddRequest{AgentID: "assistant", In: "1h", Text: "Operator's own reminder", Reminder: true})

	cmds := dmcmd.New(dmcmd.Options{Control: c.Control, Pool: c.Pool(), Logger: slog.New(slog.DiscardHandler)})
	send := func(dm gateway.DM, args ...string) string {
		t.Helper()
		out, err := cmds.Command(ctx, gateway.Command{DM: dm, ChatID: dm.UserID, Name: "schedules", Args: args,
			Text: strings.Join(args, " ")})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	alice := gateway.DM{Gateway: "console", Name: "alice", UserID: "alice"}
	adminDM := gateway.DM{Gateway: "console", Name: "console", UserID: "operator", Admin: true}

	got := send(alice)
	for _, want := range []string{"Schedules (2):", `#1 helper: cron "0 8 * * MON-FRI" (Europe/Berlin), next `,
		"#2 helper: reminder, once Fri 1 Mar 09:30 CET: Renew the passport"} {
		if !strings.Contains(got, want) {
			t.Errorf("alice's /schedules lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Operator's own") {
		t.Errorf("alice sees another agent's schedule:\n%s", got)
	}
	if got := send(alice, "assistant"); !strings.Contains(got, "Refused") {
		t.Errorf("alice naming another agent: %s", got)
	}
	if got := send(adminDM); !strings.Contains(got, "Schedules (3):") {
		t.Errorf("admin's /schedules:\n%s", got)
	}
	if got := send(adminDM, "assistant"); !strings.Contains(got, "Schedules (1):") || !strings.Contains(got, "#3 assistant: reminder, once ") {
		t.Errorf("admin's /schedules assistant:\n%s", got)
	}
}
