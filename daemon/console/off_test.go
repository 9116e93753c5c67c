package console_test

import (
	"net"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
)

// TestConsoleOff: without a console block choird serves none, and
// choirctl console says so and how to turn it on; a console that cannot
// listen does not keep choird from serving, and choirctl console says
// why there is none.
func TestConsoleOff(t *testing.T) {
	t.Parallel()
	t.Run("NoBlock", func(t *testing.T) {
		t.Parallel()
		d := choirdtest.Start(t, choirdtest.Options{})
		if d.ConsoleURL() != "" {
			t.Fatalf("a console at %s without a console block", d.ConsoleURL())
		}
		code, out, errOut := choirctltest.Run(t, d.Home, "console")
		if code == 0 || !strings.Contains(errOut, "choird serves no web console (config.json has no console block)") ||
			!strings.Contains(errOut, `"console": {"listen": "127.0.0.1:7780"}`) {
			t.Errorf("choirctl console: exit %d\n%s%s", code, out, errOut)
		}
		// Turning it on takes a restart of choird, and config diff says so.
		choirdtest.EditHome(t, d.Home, func(c *config.Config) { c.Console = &config.Console{} }, nil)
		if code, out, errOut := choirctltest.Run(t, d.Home, "config", "load"); code != 0 {
			t.Fatalf("config load: exit %d\n%s%s", code, out, errOut)
		}
		code, out, errOut = choirctltest.Run(t, d.Home, "config", "diff")
		if !strings.Contains(out, "+ config.json: console [choird-restart] → use: restart choird") {
			t.Errorf("config diff: exit %d\n%s%s", code, out, errOut)
		}
	})
	t.Run("PortTaken", func(t *testing.T) {
		t.Parallel()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		d := choirdtest.Start(t, choirdtest.Options{Edit: func(c *config.Config, _ config.Secrets) {
			c.Console = &config.Console{Listen: ln.Addr().String()}
		}})
		code, out, errOut := choirctltest.Run(t, d.Home, "console")
		if code == 0 || !strings.Contains(errOut, "console: listen on "+ln.Addr().String()) {
			t.Errorf("choirctl console: exit %d\n%s%s", code, out, errOut)
		}
		if code, out, errOut := choirctltest.Run(t, d.Home, "status"); code != 0 {
			t.Errorf("choirctl status with the console's port taken: exit %d\n%s%s", code, out, errOut)
		}
	})
}
