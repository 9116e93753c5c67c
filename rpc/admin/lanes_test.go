package admin_test

import (
	"strings"
	"testing"

	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

func TestLanesRead(t *testing.T) {
	t.Parallel()
	n := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		name string
		l    admin.LaneStatus
		want string
	}{
		{"NewJob", admin.LaneStatus{State: "CORE_CREATED"}, "Core job j: created"},
		{"RunningWithEverything", admin.LaneStatus{State: "CORE_WAITING_TOOL", Steps: 7, Skill: "deploy", Step: "upload",
			Progress: "uploading\nthe bundle", BudgetRemaining: wire.Budget{Steps: n(43), ToolCalls: n(1), Tokens: n(900), TimeMS: n(61_400)}},
			"Core job j: waiting for a tool, 7 steps, skill deploy at upload\nLast: uploading\nthe bundle\n" +
				"Budget left: 43 steps, 1 tool call, 900 tokens, 1m1s"},
		{"OneStep", admin.LaneStatus{State: "CORE_INITIALIZING", Steps: 1}, "Core job j: starting, 1 step"},
		{"StepWithoutSkill", admin.LaneStatus{State: "CORE_REASONING", Step: "plan"}, "Core job j: reasoning, at plan"},
		{"Finished", admin.LaneStatus{State: "CORE_COMPLETED", Steps: 12, Progress: "  done  "}, "Core job j: completed after 12 steps\nLast: done"},
		{"Terminated", admin.LaneStatus{State: "CORE_TERMINATED"}, "Core job j: terminated"},
		{"UnknownState", admin.LaneStatus{State: "CORE_SOMETHING_NEW"}, "Core job j: something new"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := strings.Join(admin.ProgressLines("j", tc.l), "\n"); got != tc.want {
				t.Errorf("ProgressLines = %q, want %q", got, tc.want)
			}
		})
	}
	if got := admin.ProgressLine("j", admin.LaneStatus{State: "CORE_REASONING", Progress: "a\n\nb"}); got != "Core job j: reasoning | Last: a b" {
		t.Errorf("ProgressLine = %q", got)
	}
	if got := admin.BudgetText(wire.Budget{}); got != "" {
		t.Errorf("BudgetText of no budget = %q", got)
	}
	for lane, want := range map[string]string{"core:x": "x", "core:": "", "edge": "", "system": ""} {
		if got, ok := admin.CoreJobName(lane); got != want || ok != (want != "") {
			t.Errorf("CoreJobName(%q) = %q, %v", lane, got, ok)
		}
	}
	if admin.CoreDone("CORE_REASONING") || !admin.CoreDone("CORE_TERMINATED") || !admin.CoreDone("CORE_COMPLETED") {
		t.Error("CoreDone is wrong")
	}
	if got := admin.StateText("EDGE_IDLE"); got != "idle" {
		t.Errorf("StateText(EDGE_IDLE) = %q", got)
	}
}
