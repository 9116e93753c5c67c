package config

import (
	"net"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/choirhq/choir/internal/hostpattern"
	"github.com/choirhq/choir/internal/repopattern"
	"github.com/choirhq/choir/strictjson"
)

// Egress is an agent's policy for the connections its tools open through
// choird's egress gateway (issue 34): the commands of choir.exec, external
// tools, MCP servers' subprocesses, git. Allow names the hosts they may
// reach; Unknown says what happens to any other: approve (the default: the
// agent's DM is asked, and may remember the answer for the host), refuse,
// or allow. Whatever the policy, the gateway still refuses loopback,
// private, link-local and metadata addresses unless the agent's
// web.allow_hosts opens them (internal/netguard): the policy decides which
// names, netguard which addresses.
//
// The agent's own built-in clients (choir.web.fetch, MCP servers over HTTP,
// the model, search, speech and Notion clients) are not under this policy:
// each has its guard or its configured endpoint.
type Egress struct {
	// Allow lists "host", "host:port", "*.example.com" (any subdomain, not
	// the domain itself) or "*.example.com:443"; an IP literal is allowed
	// ("[::1]:8080" with a port).
	Allow   []string      `json:"allow,omitempty"`
	Unknown EgressUnknown `json:"unknown,omitempty"`
}

// EgressUnknown is what the gateway does with a host Allow does not name.
type EgressUnknown string

// The egress.unknown modes.
const (
	EgressApprove EgressUnknown = "approve"
	EgressRefuse  EgressUnknown = "refuse"
	EgressAllow   EgressUnknown = "allow"
)

// Effective is the mode with the default applied: approve.
func (e Egress) Effective() EgressUnknown {
	if e.Unknown == "" {
		return EgressApprove
	}
	return e.Unknown
}

// Allows reports whether egress.allow names host and port. Invalid entries
// (refused by validation) match nothing.
func (e Egress) Allows(host string, port int) bool {
	for _, a := range e.Allow {
		if p, err := hostpattern.Parse(a); err == nil && p.Match(host, port) {
			return true
		}
	}
	return false
}

// EgressFor is agent agentID's egress policy.
func (c *Config) EgressFor(agentID string) Egress {
	a := c.Agents[agentID]
	e := a.Egress
	e.Allow = append([]string(nil), e.Allow...)
	return e
}

// egress checks an agent's egress block at p.
func (v *validator) egress(p string, e Egress) {
	switch e.Unknown {
	case "", EgressApprove, EgressRefuse, EgressAllow:
	default:
		v.add(sub(p, "unknown"), `must be "approve" (the default), "refuse" or "allow"`)
	}
	for i, a := range e.Allow {
		if _, err := hostpattern.Parse(a); err != nil {
			v.add(strictjson.PathIndex(sub(p, "allow"), i), "%v", err)
		}
	}
}

// Default endpoints of the services whose endpoint may be omitted; the
// agent's clients use the same (agent/tool/web, agent/tool/notion).
const (
	defaultSearchEndpoint = "https://api.search.brave.com/res/v1"
	defaultNotionEndpoint = "https://api.notion.com/v1"
)

// ServiceAddrsFor returns the host:port of every service endpoint the
// configuration names, which agent agentID's own clients may be bound to
// (a start may pick any model, account or identity): the models, the
// speech, search and Notion providers and the mail servers (a git
// identity's hosts are reached by choird, through the gateway's git route,
// not by the agent). The egress gateway lets the agent's built-in clients
// reach these without the netguard check, as the operator named them;
// anything else they reach is checked like a fetch.
func (c *Config) ServiceAddrsFor(agentID string) []string {
	_ = agentID // every agent may be bound to any of them today
	var out []string
	add := func(raw string) {
		if hp, ok := endpointAddr(raw); ok {
			out = append(out, hp)
		}
	}
	for _, m := range c.Models {
		add(m.Endpoint)
	}
	for _, t := range c.TTS {
		add(t.Endpoint)
	}
	for _, s := range c.Search {
		if s.Endpoint == "" {
			add(defaultSearchEndpoint)
		}
		add(s.Endpoint)
	}
	for _, n := range c.NotionIntegrations {
		if n.Endpoint == "" {
			add(defaultNotionEndpoint)
		}
		add(n.Endpoint)
	}
	server := func(host string, port int) {
		if host != "" && port > 0 {
			out = append(out, net.JoinHostPort(hostpattern.Normalize(host), strconv.Itoa(port)))
		}
	}
	for _, e := range c.EmailAccounts {
		server(e.SMTPHost, e.SMTPPort)
		server(e.IMAPHost, e.IMAPPort)
	}
	return out
}

// endpointAddr is a URL's host:port, with the scheme's default port.
func endpointAddr(raw string) (string, bool) {
	u, err := url.Parse(raw)
	if err != nil || u.Hostname() == "" {
		return "", false
	}
	port := u.Port()
	if port == "" {
		port = "80"
		if strings.EqualFold(u.Scheme, "https") {
			port = "443"
		}
	}
	return net.JoinHostPort(hostpattern.Normalize(u.Hostname()), port), true
}

// AllowsRepo reports whether the identity's route serves repository repo
// ("owner/repo", with or without ".git").
func (g GitIdentity) AllowsRepo(repo string) bool {
	return len(g.Repos) == 0 || slices.ContainsFunc(g.Repos, func(p string) bool { return repopattern.Match(p, repo) })
}
