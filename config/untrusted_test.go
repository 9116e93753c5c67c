package config_test

import (
	"testing"

	"github.com/choirhq/choir/config"
)

// TestUntrustedInputIsChecked: a bad mode or allow entry is reported with
// its JSON path; the default is approve.
func TestUntrustedInputIsChecked(t *testing.T) {
	t.Parallel()
	c, s := specConfig(t), specSecrets()
	var id string
	for id = range c.Agents {
		break
	}
	if got := c.Agents[id].UntrustedInput.Effective(); got != config.UntrustedApprove {
		t.Errorf("default mode %q, want approve", got)
	}
	a := c.Agents[id]
	a.UntrustedInput = config.UntrustedInput{Mode: "ask", Allow: []string{"choir.fs.write:notes/*", "Bad Tool", "choir.web.fetch:[x"}}
	c.Agents[id] = a
	p := `$.agents["` + id + `"].untrusted_input`
	checkProblems(t, problems(t, c.Validate(s)), []string{
		p + `.mode: must be "approve" (the default), "refuse" or "allow"`,
		p + `.allow[1]: must be a tool name such as "choir.fs.write", optionally with ":<target>" such as "choir.fs.write:notes/*"`,
		p + `.allow[2]: target "[x": want a pattern such as notes/* or *@example.com (path.Match syntax)`,
	})
}
