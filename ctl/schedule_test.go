package ctl

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/choirhq/choir/rpc/admin"
)

// TestScheduleCommands runs choirctl schedule against choird: add (a cron
// schedule and a reminder), list as a table and as JSON, pause, resume and
// cancel; bad input exits with the usage code and names the field.
func TestScheduleCommands(t *testing.T) {
	t.Parallel()
	home := startChoird(t)

	code, out, errs := runSessionCommands(home, "schedule", "add", "assistant", "--cron", "0 8 * * MON-FRI", "--tz", "Europe/Berlin",
		"--text", "Brief me on today's calendar", "--json")
	var cronSched admin.Schedule
	if code != ExitOK || json.Unmarshal([]byte(out), &cronSched) != nil || cronSched.Cron != "0 8 * * MON-FRI" ||
		cronSched.TimeZone != "Europe/Berlin" || cronSched.Status != "active" || cronSched.NextRunAt == nil {
		t.Fatalf("add cron: exit %d: %s%s", code, out, errs)
	}
	code, out, errs = runSessionCommands(home, "schedule", "add", "assistant", "--in", "2h", "--reminder", "--text", "Call the dentist")
	if code != ExitOK || !strings.Contains(out, "(reminder, active)") || !strings.Contains(out, "when:      once ") {
		t.Fatalf("add reminder: exit %d: %s%s", code, out, errs)
	}

	code, out, errs = runSessionCommands(home, "schedule", "list")
	if code != ExitOK || !strings.Contains(out, "ID") || !strings.Contains(out, `cron "0 8 * * MON-FRI" Europe/Berlin`) ||
		!strings.Contains(out, "Call the dentist") || strings.Count(out, "\n") != 3 {
		t.Errorf("list: exit %d:\n%s%s", code, out, errs)
	}
	id := strconv.FormatInt(cronSched.ID, 10)
	for _, step := range []struct{ verb, status string }{{"pause", "paused"}, {"resume", "active"}, {"cancel", "cancelled"}} {
		code, out, errs = runSessionCommands(home, "schedule", step.verb, id)
		if code != ExitOK || !strings.Contains(out, "("+"task, "+step.status+")") {
			t.Errorf("%s: exit %d: %s%s", step.verb, code, out, errs)
		}
	}
	code, out, _ = runSessionCommands(home, "schedule", "list", "--agent", "assistant", "--json")
	var list []admin.Schedule
	if code != ExitOK || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0].Text != "Call the dentist" {
		t.Errorf("list after cancel: exit %d: %s", code, out)
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"add", "assistant", "--cron", "0 8 * * FUNDAY", "--text", "x"}, `cron: cron expression "0 8 * * FUNDAY": field 5 (day of week)`},
		{[]string{"add", "assistant", "--cron", "0 8 * * *", "--tz", "Berlin", "--text", "x"}, `time_zone: unknown time zone "Berlin"`},
		{[]string{"add", "nobody", "--in", "1h", "--text", "x"}, `agent "nobody" is not in config.json`},
		{[]string{"add", "assistant", "--dm", "nowhere", "--in", "1h", "--text", "x"}, `dm "nowhere" is not in config.json`},
		{[]string{"add", "assistant", "--text", "x"}, "give exactly one of cron, at and in"},
		{[]string{"cancel", "abc"}, `"abc" is not a schedule id`},
		{[]string{"pause", "4242"}, "schedule 4242 does not exist"},
	} {
		code, out, errs := runSessionCommands(home, append([]string{"schedule"}, bad.args...)...)
		if code != ExitUsage || !strings.Contains(errs, bad.want) {
			t.Errorf("schedule %v: exit %d, stdout %q, stderr %q; want exit %d and %q", bad.args, code, out, errs, ExitUsage, bad.want)
		}
	}
}
