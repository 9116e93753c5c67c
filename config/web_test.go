package config_test

import (
	"testing"

	"github.com/choirhq/choir/config"
)

func TestValidateWeb(t *testing.T) {
	t.Parallel()
	c, s := specConfig(t), specSecrets()
	c.Web = config.Web{AllowHosts: []string{"intranet.example", "127.0.0.1:8080", "http://x/", "h:0"},
		FetchMaxBytes: -1, BrowseMaxTabs: 100}
	p := c.Search["brave"]
	p.Endpoint = "ftp://search.example"
	c.Search["brave"] = p
	checkProblems(t, problems(t, c.Validate(s)), []string{
		`$.web.allow_hosts[2]: want "host" or "host:port", e.g. "intranet.example.com" or "127.0.0.1:8080"`,
		`$.web.allow_hosts[3]: port "0": want 1 to 65535`,
		`$.web.fetch_max_bytes: must not be negative (0 takes the default)`,
		`$.web.browse_max_tabs: must be between 1 and 64 (0 takes the default, 4)`,
		`$.search.brave.endpoint: must be an http or https URL`,
	})

	d := config.Web{}.WithDefaults()
	if d.FetchMaxBytes != config.DefaultFetchMaxBytes || d.BrowseMaxTabs != config.DefaultBrowseMaxTabs ||
		d.BrowseMaxTextBytes != config.DefaultBrowseMaxTextBytes {
		t.Errorf("defaults %+v", d)
	}
}

// TestWebForAgent gives each agent its own allowlist, the global one
// unless the agent sets one (an empty list opens nothing), and validates
// the agent's entries.
func TestWebForAgent(t *testing.T) {
	t.Parallel()
	c, s := specConfig(t), specSecrets()
	c.Web = config.Web{AllowHosts: []string{"global.example"}, FetchMaxBytes: 5}
	var ids []string
	for id := range c.Agents {
		ids = append(ids, id)
	}
	if got := c.WebFor(ids[0]); len(got.AllowHosts) != 1 || got.AllowHosts[0] != "global.example" || got.FetchMaxBytes != 5 {
		t.Errorf("an agent without its own list: %+v, want the global web section", got)
	}
	a := c.Agents[ids[0]]
	a.Web = config.AgentWeb{AllowHosts: []string{"127.0.0.1:8080"}}
	c.Agents[ids[0]] = a
	if got := c.WebFor(ids[0]); len(got.AllowHosts) != 1 || got.AllowHosts[0] != "127.0.0.1:8080" || got.FetchMaxBytes != 5 {
		t.Errorf("an agent with its own list: %+v", got)
	}
	if got := c.WebFor("no-such-agent"); len(got.AllowHosts) != 1 || got.AllowHosts[0] != "global.example" {
		t.Errorf("an unknown agent: %+v", got)
	}
	a.Web = config.AgentWeb{AllowHosts: []string{}}
	c.Agents[ids[0]] = a
	if got := c.WebFor(ids[0]); len(got.AllowHosts) != 0 {
		t.Errorf("an agent with an empty list: %+v, want nothing opened", got)
	}
	if len(ids) > 1 {
		if got := c.WebFor(ids[1]); len(got.AllowHosts) != 1 || got.AllowHosts[0] != "global.example" {
			t.Errorf("another agent: %+v", got)
		}
	}
	a.Web = config.AgentWeb{AllowHosts: []string{"http://x/"}}
	c.Agents[ids[0]] = a
	checkProblems(t, problems(t, c.Validate(s)), []string{
		`$.agents["` + ids[0] + `"].web.allow_hosts[0]: want "host" or "host:port", e.g. "intranet.example.com" or "127.0.0.1:8080"`,
	})
}
