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
