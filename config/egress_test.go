package config_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/strictjson"
)

// TestEgressIsChecked: a bad mode or allow entry is reported with its JSON
// path; the default is approve.
func TestEgressIsChecked(t *testing.T) {
	t.Parallel()
	c, s := specConfig(t), specSecrets()
	var id string
	for id = range c.Agents {
		break
	}
	if got := c.EgressFor(id).Effective(); got != config.EgressApprove {
		t.Errorf("default mode %q, want approve", got)
	}
	a := c.Agents[id]
	a.Egress = config.Egress{Unknown: "ask", Allow: []string{"api.example.com", "*.example.org:443", "a b", "*.10.0.0.1",
		"host:99999", "x*y.example"}}
	c.Agents[id] = a
	p := `$.agents["` + id + `"].egress`
	got := problems(t, c.Validate(s))
	for _, want := range []string{p + `.unknown: must be "approve" (the default), "refuse" or "allow"`,
		p + `.allow[2]:`, p + `.allow[3]: a wildcard takes a domain`, p + `.allow[4]: port "99999"`, p + `.allow[5]: host`} {
		if !slices.ContainsFunc(got, func(g string) bool { return strings.HasPrefix(g, want) }) {
			t.Errorf("no problem starting %q in %q", want, got)
		}
	}
	if n := len(got); n != 5 {
		t.Errorf("%d problems, want 5: %q", n, got)
	}
}

// TestEgressStrictJSON: an unknown key in the egress block is an error
// naming it.
func TestEgressStrictJSON(t *testing.T) {
	t.Parallel()
	var e config.Egress
	err := strictjson.Decode([]byte(`{"allow": ["a.example"], "unkown": "refuse"}`), &e, strictjson.Limits{})
	if err == nil || !strings.Contains(err.Error(), "unkown") {
		t.Errorf("unknown key: %v", err)
	}
}

func TestEgressAllows(t *testing.T) {
	t.Parallel()
	e := config.Egress{Allow: []string{"api.example.com", "*.example.org", "git.example.net:443", "127.0.0.1:8080", "[::1]:9",
		"Upper.Example.COM."}}
	for _, c := range []struct {
		host string
		port int
		want bool
	}{
		{"api.example.com", 443, true},
		{"API.EXAMPLE.COM.", 80, true},
		{"x.api.example.com", 443, false},
		{"example.org", 443, false},
		{"a.b.example.org", 22, true},
		{"evilexample.org", 443, false},
		{"git.example.net", 443, true},
		{"git.example.net", 22, false},
		{"127.0.0.1", 8080, true},
		{"127.0.0.1", 8081, false},
		{"::1", 9, true},
		{"[::1]", 9, true},
		{"upper.example.com", 1, true},
		{"other.example", 443, false},
	} {
		if got := e.Allows(c.host, c.port); got != c.want {
			t.Errorf("Allows(%q, %d) = %v, want %v", c.host, c.port, got, c.want)
		}
	}
}

func TestServiceAddrsFor(t *testing.T) {
	t.Parallel()
	c := &config.Config{
		Models: map[string]config.Model{"m": {Endpoint: "http://127.0.0.1:9000/v1"}, "n": {Endpoint: "https://API.example.com/v1"}},
		Search: map[string]config.SearchProvider{"brave": {}},
		Agents: map[string]config.Agent{"a": {}},
	}
	got := c.ServiceAddrsFor("a")
	slices.Sort(got)
	want := []string{"127.0.0.1:9000", "api.example.com:443", "api.search.brave.com:443"}
	if !slices.Equal(got, want) {
		t.Errorf("ServiceAddrsFor = %v, want %v", got, want)
	}
}
