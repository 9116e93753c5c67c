package ctl

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/choirhq/choir/rpc/admin"
)

// TestUsageCommand runs choirctl usage against choird: one agent as JSON,
// every agent as text, and bad input with the usage exit code.
func TestUsageCommand(t *testing.T) {
	t.Parallel()
	home := startChoird(t)

	code, out, errs := runSessionCommands(home, "usage", "assistant", "--json", "--days", "3")
	var r admin.UsageReport
	if code != ExitOK || json.Unmarshal([]byte(out), &r) != nil || r.AgentID != "assistant" || r.TimeZone == "" || r.Today == "" {
		t.Fatalf("usage --json: exit %d: %s%s", code, out, errs)
	}
	if len(r.Caps) == 0 || r.Caps[0].Field != "total_session_tokens" || r.Caps[0].Stopped {
		t.Errorf("caps = %+v, want the session's token cap first, not reached", r.Caps)
	}
	code, out, errs = runSessionCommands(home, "usage")
	if code != ExitOK || !strings.Contains(out, "Usage of assistant") || !strings.Contains(out, "total_session_tokens") {
		t.Errorf("usage: exit %d:\n%s%s", code, out, errs)
	}
	code, out, errs = runSessionCommands(home, "usage", "cap", "set", "assistant", "per_day_cost_usd", "2.5")
	if code != ExitOK || !strings.Contains(out, "agents.assistant.budgets.per_day_cost_usd = 2.5") || !strings.Contains(out, "applied: config version") {
		t.Fatalf("usage cap set: exit %d: %s%s", code, out, errs)
	}
	code, out, errs = runSessionCommands(home, "usage", "assistant", "--json")
	r = admin.UsageReport{}
	if code != ExitOK || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("usage after cap set: exit %d: %s%s", code, out, errs)
	}
	var found bool
	for _, c := range r.Caps {
		found = found || (c.Field == "per_day_cost_usd" && c.Limit == 2.5 && c.Money && !c.Stopped)
	}
	if !found {
		t.Errorf("caps after cap set = %+v, want per_day_cost_usd 2.5", r.Caps)
	}
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"usage", "cap", "set", "assistant", "per_day_dollars", "1"}, `field "per_day_dollars": want one of total_session_tokens,`},
		{[]string{"usage", "cap", "set", "assistant", "per_job_tokens", "1.5"}, `value "1.5" for per_job_tokens: want a number 0 or more, e.g. 400000`},
		{[]string{"usage", "cap", "set", "assistant", "per_day_cost_usd", "--", "-1"}, `value "-1" for per_day_cost_usd: want a number 0 or more, e.g. 2.5`},
		{[]string{"usage", "cap", "set", "nobody", "per_day_cost_usd", "1"}, `unknown agent "nobody"`},
	} {
		if code, _, errs := runSessionCommands(home, bad.args...); code != ExitUsage || !strings.Contains(errs, bad.want) {
			t.Errorf("%v: exit %d: %s, want %q", bad.args, code, errs, bad.want)
		}
	}
	code, _, errs = runSessionCommands(home, "usage", "nobody")
	if code != ExitUsage || !strings.Contains(errs, `unknown agent "nobody"`) {
		t.Errorf("usage nobody: exit %d: %s", code, errs)
	}
	code, _, errs = runSessionCommands(home, "usage", "assistant", "--days", "999")
	if code != ExitUsage || !strings.Contains(errs, "--days 999") {
		t.Errorf("usage --days 999: exit %d: %s", code, errs)
	}
}
