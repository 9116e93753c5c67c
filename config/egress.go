package config

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

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

// EgressPattern is one parsed entry of egress.allow.
type EgressPattern struct {
	// Host is a lower-case name or canonical IP; with Wildcard, the
	// domain whose subdomains match.
	Host     string
	Wildcard bool
	// Port is 0 for any port.
	Port int
}

// ParseEgressPattern parses one egress.allow entry.
func ParseEgressPattern(s string) (EgressPattern, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.ContainsAny(s, "/ ") {
		return EgressPattern{}, errors.New(`want "host", "host:port", "*.example.com" or "*.example.com:443"`)
	}
	host, port := s, 0
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, perr := strconv.Atoi(p)
		if perr != nil || n < 1 || n > 65535 {
			return EgressPattern{}, fmt.Errorf("port %q: want 1 to 65535", p)
		}
		host, port = h, n
	} else if strings.Count(s, ":") == 1 {
		return EgressPattern{}, err
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	p := EgressPattern{Host: host, Port: port}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		p.Host, p.Wildcard = rest, true
	}
	if ip, err := netip.ParseAddr(p.Host); err == nil {
		if p.Wildcard {
			return EgressPattern{}, errors.New("a wildcard takes a domain, not an IP address")
		}
		p.Host = ip.Unmap().String()
		return p, nil
	}
	if p.Host == "" || strings.Contains(p.Host, "*") || !validDomain(p.Host) {
		return EgressPattern{}, fmt.Errorf("host %q: want a domain name such as api.example.com, *.example.com or an IP address", host)
	}
	return p, nil
}

// validDomain reports whether s is a plausible DNS name.
func validDomain(s string) bool {
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
				return false
			}
		}
	}
	return len(s) <= 253
}

// Match reports whether host (a name or an IP literal) and port match p.
func (p EgressPattern) Match(host string, port int) bool {
	if p.Port != 0 && p.Port != port {
		return false
	}
	host = NormalizeHost(host)
	if p.Wildcard {
		return strings.HasSuffix(host, "."+p.Host)
	}
	return host == p.Host
}

// NormalizeHost lower-cases a host, drops brackets and a trailing dot, and
// writes an IP address canonically.
func NormalizeHost(host string) string {
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().String()
	}
	return host
}

// Allows reports whether egress.allow names host and port. Invalid entries
// (refused by validation) match nothing.
func (e Egress) Allows(host string, port int) bool {
	for _, a := range e.Allow {
		if p, err := ParseEgressPattern(a); err == nil && p.Match(host, port) {
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
		if _, err := ParseEgressPattern(a); err != nil {
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
// speech, search and Notion providers, the mail servers and the git
// identities' hosts. The egress gateway lets the agent's built-in clients
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
	for _, g := range c.GitIdentities {
		for _, h := range g.Hosts {
			add("https://" + h)
		}
	}
	server := func(host string, port int) {
		if host != "" && port > 0 {
			out = append(out, net.JoinHostPort(NormalizeHost(host), strconv.Itoa(port)))
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
	return net.JoinHostPort(NormalizeHost(u.Hostname()), port), true
}
