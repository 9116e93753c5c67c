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
	code, _, errs = runSessionCommands(home, "usage", "nobody")
	if code != ExitUsage || !strings.Contains(errs, `unknown agent "nobody"`) {
		t.Errorf("usage nobody: exit %d: %s", code, errs)
	}
	code, _, errs = runSessionCommands(home, "usage", "assistant", "--days", "999")
	if code != ExitUsage || !strings.Contains(errs, "--days 999") {
		t.Errorf("usage --days 999: exit %d: %s", code, errs)
	}
}
