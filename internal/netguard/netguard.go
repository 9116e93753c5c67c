// Package netguard protects the host and the local network from requests
// an agent asks for (server-side request forgery): choir.web.fetch in the
// agent and choir.web.browse in choird's browser worker. A [Guard] accepts
// only http and https URLs and refuses loopback, link-local, private,
// unspecified, multicast and cloud-metadata addresses, checked on the
// address actually dialled (after DNS resolution, so a name that resolves
// to 127.0.0.1 is refused too) by a net.Dialer Control hook, and on every
// redirect and sub-request of the clients that use it. An allowlist opens
// specific hosts, or one port of a host.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Errors a Guard returns; match them with errors.Is.
var (
	// ErrScheme is a URL whose scheme is not http or https.
	ErrScheme = errors.New("scheme not allowed")
	// ErrAddress is a URL or a connection to a refused address.
	ErrAddress = errors.New("address not allowed")
)

// RefusedError says what was refused and why, for a model to read.
type RefusedError struct {
	// Target is the URL or address refused.
	Target string
	// Reason names the class: "scheme file", "loopback", "private", ...
	Reason string
	// Kind is ErrScheme or ErrAddress.
	Kind error
}

func (e *RefusedError) Error() string {
	if e.Kind == ErrScheme {
		return fmt.Sprintf("%s refused: %s; only http and https URLs can be fetched", e.Target, e.Reason)
	}
	return fmt.Sprintf("%s refused: %s address; the host and the local network are off limits "+
		"(an operator can open a host with web.allow_hosts in config.json)", e.Target, e.Reason)
}

// Unwrap returns the kind, so errors.Is(err, ErrAddress) works.
func (e *RefusedError) Unwrap() error { return e.Kind }

// Guard decides which URLs and addresses may be reached. The zero Guard
// refuses every special-purpose address and allows nothing extra. It is
// immutable and safe for concurrent use.
type Guard struct {
	allow []allowEntry
}

// allowEntry is one allowlisted host, optionally with a port (0: any).
type allowEntry struct {
	host string // lower-case name or canonical IP
	port int
}

// New returns a guard whose allowlist opens the given entries: "host" or
// "host:port", where host is a name or an IP literal ("[::1]:8080" for
// IPv6 with a port). An invalid entry is an error naming it.
func New(allow []string) (*Guard, error) {
	g := &Guard{}
	var errs []error
	for i, a := range allow {
		e, err := parseAllow(a)
		if err != nil {
			errs = append(errs, fmt.Errorf("allow[%d] %q: %w", i, a, err))
			continue
		}
		g.allow = append(g.allow, e)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return g, nil
}

// ParseAllow checks one allowlist entry, for config validation.
func ParseAllow(s string) error {
	_, err := parseAllow(s)
	return err
}

func parseAllow(s string) (allowEntry, error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.Contains(s, "/") {
		return allowEntry{}, errors.New(`want "host" or "host:port", e.g. "intranet.example.com" or "127.0.0.1:8080"`)
	}
	host, port := s, 0
	if h, p, err := net.SplitHostPort(s); err == nil {
		n, perr := strconv.Atoi(p)
		if perr != nil || n < 1 || n > 65535 {
			return allowEntry{}, fmt.Errorf("port %q: want 1 to 65535", p)
		}
		host, port = h, n
	} else if strings.Count(s, ":") == 1 {
		return allowEntry{}, fmt.Errorf("%v", err)
	}
	host = strings.Trim(host, "[]")
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	return allowEntry{host: strings.ToLower(host), port: port}, nil
}

// allowed reports whether host (a name or an IP) and port are allowlisted.
func (g *Guard) allowed(host string, port int) bool {
	if g == nil {
		return false
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	return slices.ContainsFunc(g.allow, func(e allowEntry) bool {
		return e.host == host && (e.port == 0 || e.port == port)
	})
}

// CheckURL checks a URL before it is requested: its scheme, and its host
// when that is an IP literal (names are checked when dialled, after
// resolution, by [Guard.Control]; [Guard.CheckResolved] checks them
// ahead for callers that cannot hook the dialler).
func (g *Guard) CheckURL(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, &RefusedError{Target: raw, Reason: "not a URL: " + err.Error(), Kind: ErrScheme}
	}
	switch strings.ToLower(u.Scheme) {
	case "http", "https":
	case "":
		return nil, &RefusedError{Target: raw, Reason: "no scheme (want http:// or https://)", Kind: ErrScheme}
	default:
		return nil, &RefusedError{Target: raw, Reason: "scheme " + u.Scheme, Kind: ErrScheme}
	}
	if u.Hostname() == "" {
		return nil, &RefusedError{Target: raw, Reason: "no host", Kind: ErrScheme}
	}
	port := urlPort(u)
	if g.allowed(u.Hostname(), port) {
		return u, nil
	}
	if ip, err := netip.ParseAddr(u.Hostname()); err == nil {
		if reason := Classify(ip); reason != "" {
			return nil, &RefusedError{Target: raw, Reason: reason, Kind: ErrAddress}
		}
	}
	if h := strings.TrimSuffix(strings.ToLower(u.Hostname()), "."); h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return nil, &RefusedError{Target: raw, Reason: "loopback", Kind: ErrAddress}
	}
	return u, nil
}

// CheckResolved checks a URL and every address its host resolves to, for
// callers (the browser's request interception) that cannot hook the
// dialler. A name that fails to resolve passes: the request fails anyway.
func (g *Guard) CheckResolved(raw string, lookup func(host string) ([]netip.Addr, error)) error {
	u, err := g.CheckURL(raw)
	if err != nil {
		return err
	}
	if g.allowed(u.Hostname(), urlPort(u)) {
		return nil
	}
	if _, err := netip.ParseAddr(u.Hostname()); err == nil {
		return nil // an IP literal, checked by CheckURL
	}
	addrs, err := lookup(u.Hostname())
	if err != nil {
		return nil
	}
	for _, ip := range addrs {
		if reason := Classify(ip); reason != "" {
			return &RefusedError{Target: raw, Reason: reason + " (" + u.Hostname() + " resolves to " + ip.String() + ")", Kind: ErrAddress}
		}
	}
	return nil
}

// urlPort returns the URL's port, or the scheme's default.
func urlPort(u *url.URL) int {
	if p, err := strconv.Atoi(u.Port()); err == nil {
		return p
	}
	if strings.EqualFold(u.Scheme, "https") {
		return 443
	}
	return 80
}

// metadata are cloud metadata addresses outside the private ranges
// (169.254.169.254 is link-local anyway).
var metadata = []netip.Addr{
	netip.MustParseAddr("100.100.100.200"), // Alibaba
	netip.MustParseAddr("fd00:ec2::254"),   // AWS IPv6 (private too)
}

// special are ranges that are neither private nor loopback by the
// standard library's tests but must not be reached either.
var special = []struct {
	p      netip.Prefix
	reason string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("100.64.0.0/10"), "carrier-grade NAT (private)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignment"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (private)"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("64:ff9b:1::/48"), "local-use NAT64"},
	{netip.MustParsePrefix("::/96"), reservedCompat},
}

// Classify returns why ip must not be reached ("loopback", "private",
// "link-local", "metadata", ...), or "" when it is a public address. An
// IPv6 address that carries an IPv4 one (NAT64 64:ff9b::/96, 6to4
// 2002::/16, Teredo 2001::/32, IPv4-compatible ::/96, IPv4-translated
// ::ffff:0:0:0/96, IPv4-mapped) is
// classified by that IPv4 address too: a NAT64 gateway or a 6to4 relay
// on the host's network would deliver it there.
func Classify(ip netip.Addr) string {
	ip = ip.Unmap()
	if reason := classifyPlain(ip); reason != "" && reason != reservedCompat {
		return reason
	}
	if v4, form, ok := embeddedIPv4(ip); ok {
		if reason := classifyPlain(v4); reason != "" {
			return reason + " (" + v4.String() + " inside " + form + ")"
		}
	}
	return classifyPlain(ip)
}

// reservedCompat is the reason for ::/96 with a public IPv4 inside.
const reservedCompat = "IPv4-compatible (reserved)"

// Prefixes of the IPv6 forms that embed an IPv4 address.
var (
	nat64Prefix  = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour    = netip.MustParsePrefix("2002::/16")
	teredo       = netip.MustParsePrefix("2001::/32")
	compatPrefix = netip.MustParsePrefix("::/96")
	translated   = netip.MustParsePrefix("::ffff:0:0:0/96")
)

// embeddedIPv4 returns the IPv4 address an IPv6 address carries, with the
// name of the form, or ok false.
func embeddedIPv4(ip netip.Addr) (v4 netip.Addr, form string, ok bool) {
	if !ip.Is6() {
		return netip.Addr{}, "", false
	}
	b := ip.As16()
	switch {
	case nat64Prefix.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), "NAT64 64:ff9b::/96", true
	case compatPrefix.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), "IPv4-compatible ::/96", true
	case translated.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), "IPv4-translated ::ffff:0:0:0/96", true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), "6to4 2002::/16", true
	case teredo.Contains(ip):
		// The Teredo client's address is the last 32 bits, inverted.
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), "Teredo 2001::/32", true
	}
	return netip.Addr{}, "", false
}

// classifyPlain classifies ip by its own ranges only.
func classifyPlain(ip netip.Addr) string {
	switch {
	case !ip.IsValid():
		return "invalid"
	case slices.Contains(metadata, ip) || ip == netip.MustParseAddr("169.254.169.254"):
		return "cloud metadata"
	case ip.IsLoopback():
		return "loopback"
	case ip.IsUnspecified():
		return "unspecified"
	case ip.IsPrivate():
		return "private"
	case ip.IsLinkLocalUnicast(), ip.IsLinkLocalMulticast():
		return "link-local"
	case ip.IsMulticast(), ip.IsInterfaceLocalMulticast():
		return "multicast"
	}
	for _, s := range special {
		if s.p.Contains(ip) {
			return s.reason
		}
	}
	return ""
}

// Control is a net.Dialer Control hook: it runs on the resolved address
// of every connection and refuses a special-purpose one unless the
// allowlist opens it. Use it through [Guard.Dialer].
func (g *Guard) Control(network, address string, _ syscall.RawConn) error {
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return &RefusedError{Target: address, Reason: "unparsable", Kind: ErrAddress}
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return &RefusedError{Target: address, Reason: "unresolved", Kind: ErrAddress}
	}
	port, _ := strconv.Atoi(portStr)
	if g.allowed(ip.String(), port) {
		return nil
	}
	if reason := Classify(ip); reason != "" {
		return &RefusedError{Target: address, Reason: reason, Kind: ErrAddress}
	}
	return nil
}

// DialContext returns a dial function for an http.Transport: a host the
// allowlist names is dialled as is (an allowlisted intranet name may
// resolve to a private address); any other connection passes
// [Guard.Control] on its resolved address.
func (g *Guard) DialContext(timeout time.Duration) func(ctx context.Context, network, addr string) (net.Conn, error) {
	guarded := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second, Control: g.Control}
	open := &net.Dialer{Timeout: timeout, KeepAlive: 30 * time.Second}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if host, p, err := net.SplitHostPort(addr); err == nil {
			if port, _ := strconv.Atoi(p); g.allowed(host, port) {
				return open.DialContext(ctx, network, addr)
			}
		}
		return guarded.DialContext(ctx, network, addr)
	}
}

// Allows reports whether the allowlist opens host (a name or an IP) on
// port, for callers that check a connection before they dial it.
func (g *Guard) Allows(host string, port int) bool { return g.allowed(host, port) }
