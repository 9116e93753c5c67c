package egress

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/hostpattern"
	"github.com/choirhq/choir/internal/netguard"
	wire "github.com/choirhq/choir/rpc/egress"
	"github.com/choirhq/choir/sql/seam"
)

// Decisions as the audit writes them.
const (
	decisionAllowed = "allowed"
	decisionRefused = "refused"
)

// target is one connection asked for, as decided.
type target struct {
	caller Caller
	hello  wire.Hello
	method string
	host   string
	port   int
	// addrs are the checked addresses to dial (never resolved again).
	addrs []netip.Addr
}

// refusal is a decision against a connection, in words for the tool.
type refusal struct{ reason string }

func (r *refusal) Error() string { return r.reason }

func refused(format string, a ...any) error { return &refusal{reason: fmt.Sprintf(format, a...)} }

// decide checks a connection: the agent's egress policy on the name first
// (a refused or unapproved name is never resolved, since a lookup itself
// carries data out), then resolution on choird, then netguard on every
// address it resolved to. t.addrs holds the addresses to dial.
func (g *Gateway) decide(ctx context.Context, t *target) error {
	pol := g.policy(t.caller.AgentID)
	t.host = hostpattern.Normalize(t.host)
	if t.port < 1 || t.port > 65535 || t.host == "" {
		return refused("%q is not a host and port", net.JoinHostPort(t.host, strconv.Itoa(t.port)))
	}
	hp := net.JoinHostPort(t.host, strconv.Itoa(t.port))
	service := t.hello.Builtin() && slices.Contains(pol.Services, hp)
	guard, err := netguard.New(pol.AllowHosts)
	if err != nil {
		return refused("web.allow_hosts of agent %s is invalid: %v", t.caller.AgentID, err)
	}
	ip, literal := netip.ParseAddr(t.host)
	if literal == nil && !service && !guard.Allows(t.host, t.port) {
		// An address netguard refuses anyway is refused before anyone
		// is asked about it.
		if err := checkAddrs(guard, hp, []netip.Addr{ip}, t.port); err != nil {
			return err
		}
	}
	if !t.hello.Builtin() && !pol.Egress.Allows(t.host, t.port) {
		if err := g.unknownHost(ctx, t, pol.Egress); err != nil {
			return err
		}
	}
	if literal == nil {
		t.addrs = []netip.Addr{ip}
	} else {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		t.addrs, err = g.opts.LookupFunc(lctx, t.host)
		cancel()
		if err != nil || len(t.addrs) == 0 {
			return refused("cannot resolve %s: %v", t.host, err)
		}
	}
	if service || guard.Allows(t.host, t.port) {
		return nil
	}
	return checkAddrs(guard, hp, t.addrs, t.port)
}

// checkAddrs refuses when any address hp resolved to is one netguard
// refuses: a name with one public and one private answer would otherwise
// reach the private one on a retry.
func checkAddrs(guard *netguard.Guard, hp string, addrs []netip.Addr, port int) error {
	for _, a := range addrs {
		if err := guard.Control("tcp", netip.AddrPortFrom(a, uint16(port)).String(), nil); err != nil {
			var re *netguard.RefusedError
			if errors.As(err, &re) {
				return refused("%s (%s) refused: %s address; the host and the local network are off limits "+
					"(an operator can open a host with web.allow_hosts in config.json)", hp, a, re.Reason)
			}
			return refused("%s: %v", hp, err)
		}
	}
	return nil
}

// unknownHost applies egress.unknown to a proxied connection to a host
// egress.allow does not name.
func (g *Gateway) unknownHost(ctx context.Context, t *target, e config.Egress) error {
	hp := net.JoinHostPort(t.host, strconv.Itoa(t.port))
	where := fmt.Sprintf("agents.%s.egress.allow", t.caller.AgentID)
	switch e.Effective() {
	case config.EgressAllow:
		return nil
	case config.EgressRefuse:
		return refused("%s is not in %s, and egress.unknown is refuse: ask the operator to add it", hp, where)
	}
	if g.granted(ctx, t) {
		return nil
	}
	if g.opts.ApproveFunc == nil {
		return refused("%s is not in %s, and egress.unknown is approve, but approving connections is not available yet: "+
			"ask the operator to add the host to %s", hp, where, where)
	}
	a, err := g.opts.ApproveFunc(ctx, ApprovalRequest{Caller: t.caller, Lane: t.hello.Lane, Sources: t.hello.Sources,
		Host: t.host, Port: t.port})
	if err != nil {
		return refused("%s needs a person's approval, which failed: %v", hp, err)
	}
	if !a.Allow {
		return refused("%s was not approved: the agent's DM refused it, or nobody answered in time", hp)
	}
	return nil
}

// granted reports whether a person allowed the host for good (/always on
// an earlier card, approval.Service.Always).
func (g *Gateway) granted(ctx context.Context, t *target) bool {
	if g.opts.Pool == nil {
		return false
	}
	ok, err := seam.Queries(g.opts.Pool).EgressGrantGet(ctx, db.EgressGrantGetParams{AgentID: t.caller.AgentID,
		Host: t.host, Port: int32(t.port)})
	return err == nil && ok
}

func (g *Gateway) policy(agentID string) Policy {
	if g.opts.PolicyFunc == nil {
		return Policy{}
	}
	return g.opts.PolicyFunc(agentID)
}

// dial connects to the first checked address that answers.
func (g *Gateway) dial(ctx context.Context, t *target) (net.Conn, netip.Addr, error) {
	d := net.Dialer{Timeout: g.opts.DialTimeout, KeepAlive: 30 * time.Second}
	var errs []error
	for _, a := range t.addrs {
		c, err := d.DialContext(ctx, "tcp", netip.AddrPortFrom(a, uint16(t.port)).String())
		if err == nil {
			return c, a, nil
		}
		errs = append(errs, err)
	}
	return nil, netip.Addr{}, errors.Join(errs...)
}

// audit writes the row of a decided connection and returns its id (0 when
// none was written).
func (g *Gateway) audit(ctx context.Context, t *target, addr netip.Addr, decision, reason string) int64 {
	if decision == decisionRefused {
		g.log.WarnContext(ctx, "egress refused", slog.String("agent_id", t.caller.AgentID), slog.String("origin", t.hello.Origin),
			slog.String("host", t.host), slog.Int("port", t.port), slog.String("reason", reason))
	}
	if g.opts.Pool == nil {
		return 0
	}
	p := db.EgressConnectionInsertParams{AgentID: t.caller.AgentID, Lane: t.hello.Lane, Origin: t.hello.Origin,
		Method: t.method, Host: t.host, Port: int32(t.port), Decision: decision, Reason: reason}
	if id, err := uuid.Parse(t.caller.SessionID); err == nil {
		p.SessionID = &id
	}
	if addr.IsValid() {
		s := addr.String()
		p.Address = &s
	}
	id, err := seam.Queries(g.opts.Pool).EgressConnectionInsert(context.WithoutCancel(ctx), p)
	if err != nil {
		g.log.ErrorContext(ctx, "egress audit row not written", slog.String("host", t.host), slog.String("error", err.Error()))
		return 0
	}
	return id
}

// ended records the bytes an allowed connection carried.
func (g *Gateway) ended(ctx context.Context, id int64, c *countConn) {
	if id == 0 || g.opts.Pool == nil {
		return
	}
	err := seam.Queries(g.opts.Pool).EgressConnectionEnd(context.WithoutCancel(ctx), db.EgressConnectionEndParams{
		ConnectionID: id, BytesUp: c.up.Load(), BytesDown: c.down.Load()})
	if err != nil {
		g.log.ErrorContext(ctx, "egress audit row not ended", slog.Int64("connection_id", id), slog.String("error", err.Error()))
	}
}

// refuse answers a refused connection.
func refuse(w http.ResponseWriter, status int, reason string) {
	w.Header().Set(wire.HeaderRefused, decisionRefused)
	w.Header().Set("Connection", "close")
	http.Error(w, "choird egress gateway: "+reason, status)
}

// open decides, audits and dials one connection; on a refusal it has
// answered w and returns nil.
func (g *Gateway) open(w http.ResponseWriter, r *http.Request, t *target) (*countConn, int64) {
	if err := g.decide(r.Context(), t); err != nil {
		g.audit(r.Context(), t, netip.Addr{}, decisionRefused, err.Error())
		refuse(w, http.StatusForbidden, err.Error())
		return nil, 0
	}
	c, addr, err := g.dial(r.Context(), t)
	if err != nil {
		reason := "unreachable: " + err.Error()
		g.audit(r.Context(), t, netip.Addr{}, decisionRefused, reason)
		refuse(w, http.StatusBadGateway, reason)
		return nil, 0
	}
	return &countConn{Conn: c}, g.audit(r.Context(), t, addr, decisionAllowed, "")
}

// connect serves CONNECT host:port: a tunnel to the checked address.
func (g *Gateway) connect(w http.ResponseWriter, r *http.Request, caller Caller, h wire.Hello) {
	host, port, err := splitHostPort(r.Host, 0)
	if err != nil {
		refuse(w, http.StatusBadRequest, "CONNECT wants host:port: "+err.Error())
		return
	}
	t := &target{caller: caller, hello: h, method: http.MethodConnect, host: host, port: port}
	up, id := g.open(w, r, t)
	if up == nil {
		return
	}
	defer g.ended(r.Context(), id, up)
	defer up.Close()
	down, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer down.Close()
	stop := context.AfterFunc(r.Context(), func() { down.Close(); up.Close() })
	defer stop()
	if _, err := io.WriteString(down, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	splice(down, brw.Reader, up)
}

// splice copies both ways until both directions end.
func splice(down net.Conn, downR io.Reader, up net.Conn) {
	var wg sync.WaitGroup
	wg.Go(func() {
		io.Copy(up, downR)
		closeWrite(up)
	})
	// The way down writes to the socket itself, not its hello's
	// buffered reader, so that the kernel can splice the upstream's
	// bytes to the agent without a copy through user space.
	io.Copy(writer(down), up)
	closeWrite(down)
	wg.Wait()
}

// writer is c's own connection, for writing, when c reads through the
// buffer that read its hello.
func writer(c net.Conn) net.Conn {
	if a, ok := c.(*authConn); ok {
		return a.Conn
	}
	return c
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// hopHeaders are a proxy's own, never forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// forward serves an absolute-form http:// request: one request on its own
// upstream connection.
func (g *Gateway) forward(w http.ResponseWriter, r *http.Request, caller Caller, h wire.Hello) {
	if r.URL.Scheme != "http" {
		refuse(w, http.StatusBadRequest, "only http:// URLs are forwarded; use CONNECT for https")
		return
	}
	host, port, err := splitHostPort(r.URL.Host, 80)
	if err != nil {
		refuse(w, http.StatusBadRequest, err.Error())
		return
	}
	t := &target{caller: caller, hello: h, method: r.Method, host: host, port: port}
	up, id := g.open(w, r, t)
	if up == nil {
		return
	}
	defer g.ended(r.Context(), id, up)
	var used atomic.Bool
	tr := &http.Transport{DisableKeepAlives: true, DisableCompression: true,
		DialContext: func(context.Context, string, string) (net.Conn, error) {
			if used.Swap(true) {
				return nil, errors.New("one connection per request")
			}
			return up, nil
		}}
	defer tr.CloseIdleConnections()
	defer up.Close()
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, k := range hopHeaders {
		out.Header.Del(k)
	}
	resp, err := tr.RoundTrip(out)
	if err != nil {
		http.Error(w, "choird egress gateway: "+err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		if !slices.Contains(hopHeaders, k) {
			w.Header()[k] = v
		}
	}
	w.WriteHeader(resp.StatusCode)
	io.Copy(w, resp.Body)
}

// splitHostPort splits host:port, with def when the port is missing (0:
// required).
func splitHostPort(hostport string, def int) (string, int, error) {
	host, p, err := net.SplitHostPort(hostport)
	if err != nil {
		if def == 0 {
			return "", 0, err
		}
		return hostport, def, nil
	}
	n, err := strconv.Atoi(p)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("port %q: want 1 to 65535", p)
	}
	return host, n, nil
}

// countConn counts the bytes sent up (written) and received (read).
type countConn struct {
	net.Conn
	up, down atomic.Int64
}

func (c *countConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.down.Add(int64(n))
	return n, err
}

func (c *countConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.up.Add(int64(n))
	return n, err
}

// CloseWrite half-closes the upstream connection.
func (c *countConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
