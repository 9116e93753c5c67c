// Package hostpattern parses and matches the host patterns of an egress
// allowlist: "host", "host:port", "*.example.com" (any subdomain, not the
// domain itself), "*.example.com:443", and IP literals; and writes a host
// the one way patterns compare it (lower case, no brackets or trailing
// dot, an IP address canonical).
package hostpattern

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
)

// Pattern is one parsed host pattern.
type Pattern struct {
	// Host is a lower-case name or canonical IP; with Wildcard, the
	// domain whose subdomains match.
	Host     string
	Wildcard bool
	// Port is 0 for any port.
	Port int
}

// Parse parses one pattern: "host", "host:port", "*.example.com" (any
// subdomain, not the domain itself), "*.example.com:443", or an IP literal
// ("[::1]:8080" with a port).
func Parse(s string) (Pattern, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.ContainsAny(s, "/ ") {
		return Pattern{}, errors.New(`want "host", "host:port", "*.example.com" or "*.example.com:443"`)
	}
	host, port := s, 0
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, perr := strconv.Atoi(p)
		if perr != nil || n < 1 || n > 65535 {
			return Pattern{}, fmt.Errorf("port %q: want 1 to 65535", p)
		}
		host, port = h, n
	} else if strings.Count(s, ":") == 1 {
		return Pattern{}, err
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	p := Pattern{Host: host, Port: port}
	if rest, ok := strings.CutPrefix(host, "*."); ok {
		p.Host, p.Wildcard = rest, true
	}
	if ip, err := netip.ParseAddr(p.Host); err == nil {
		if p.Wildcard {
			return Pattern{}, errors.New("a wildcard takes a domain, not an IP address")
		}
		p.Host = ip.Unmap().String()
		return p, nil
	}
	if p.Host == "" || strings.Contains(p.Host, "*") || !validDomain(p.Host) {
		return Pattern{}, fmt.Errorf("host %q: want a domain name such as api.example.com, *.example.com or an IP address", host)
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
func (p Pattern) Match(host string, port int) bool {
	if p.Port != 0 && p.Port != port {
		return false
	}
	host = Normalize(host)
	if p.Wildcard {
		return strings.HasSuffix(host, "."+p.Host)
	}
	return host == p.Host
}

// Normalize lower-cases a host, drops brackets and a trailing dot, and
// writes an IP address canonically.
func Normalize(host string) string {
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip.Unmap().String()
	}
	return host
}
