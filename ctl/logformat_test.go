package ctl_test

import (
	"strings"
	"testing"

	"github.com/choirhq/choir/ctl"
)

// TestLogFormatFlag: --log-format takes auto, text or json (the choice
// itself is internal/logjson's, tested there on a pty); anything else is
// a usage error that names the flag and the values it takes.
func TestLogFormatFlag(t *testing.T) {
	t.Parallel()
	r := run(t, "--home", t.TempDir(), "--log-format", "xml", "config", "validate")
	if r.code != ctl.ExitUsage || !strings.Contains(r.stderr, "--log-format") || !strings.Contains(r.stderr, "auto, text or json") {
		t.Errorf("--log-format xml: exit %d, %q", r.code, r.stderr)
	}
	for _, f := range []string{"auto", "text", "json"} {
		if r := run(t, "--home", t.TempDir(), "--log-format", f, "config", "validate"); r.code == ctl.ExitUsage &&
			strings.Contains(r.stderr, "log format") {
			t.Errorf("--log-format %s refused: %q", f, r.stderr)
		}
	}
}
