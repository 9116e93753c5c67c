// Package netout is the agent's one way out: every connection the agent
// or its tools open goes over choird's egress socket (rpc/egress), which
// decides it. The agent's own clients dial through a [Dialer], which opens
// a CONNECT tunnel per connection, announcing which client asks
// ("builtin:choir.web.fetch"). Tools (the commands of choir.exec, external
// tools, MCP servers' processes, git) get a [Local] proxy on the loopback:
// a byte pipe that opens a connection to the socket for each connection it
// accepts, writes the hello (origin "proxy") and splices, so that the
// lease token the hello carries never leaves the agent's process. Tools
// find it in HTTP_PROXY, HTTPS_PROXY and ALL_PROXY ([ProxyEnv]).
package netout

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	wire "github.com/choirhq/choir/rpc/egress"
)

// Dialer opens connections through choird's egress gateway.
type Dialer struct {
	// Socket is the gateway's Unix socket.
	Socket string
	// SessionID and LeaseTokenFunc authenticate the hello; the token is
	// asked for at each connection and never stored here.
	SessionID      string
	LeaseTokenFunc func() string
}

// Open dials the socket and writes the hello.
func (d *Dialer) Open(ctx context.Context, h wire.Hello) (net.Conn, error) {
	var nd net.Dialer
	c, err := nd.DialContext(ctx, "unix", d.Socket)
	if err != nil {
		return nil, fmt.Errorf("egress gateway at %s: %w", d.Socket, err)
	}
	h.SessionID = d.SessionID
	if d.LeaseTokenFunc != nil {
		h.LeaseToken = d.LeaseTokenFunc()
	}
	if err := wire.WriteHello(c, h); err != nil {
		c.Close()
		return nil, fmt.Errorf("egress gateway hello: %w", err)
	}
	return c, nil
}

// DialFunc returns a dial function for an http.Transport (or any client
// that dials TCP): each connection is a CONNECT tunnel through the
// gateway, announced with origin ("builtin:<client>"), except one to
// wire.ServiceHost, which is the gateway's service routes themselves. The lane and its
// sources come from ctx when the caller put them there (WithLane).
func (d *Dialer) DialFunc(origin string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if !strings.HasPrefix(network, "tcp") {
			return nil, fmt.Errorf("egress gateway: network %q is not carried", network)
		}
		l := laneFrom(ctx)
		if addr == wire.ServiceHost+":80" {
			// The gateway's own service routes: no tunnel.
			return d.Open(ctx, wire.Hello{Origin: wire.OriginService, Lane: l.name, Sources: l.sources})
		}
		c, err := d.Open(ctx, wire.Hello{Origin: origin, Lane: l.name, Sources: l.sources})
		if err != nil {
			return nil, err
		}
		if dl, ok := ctx.Deadline(); ok {
			c.SetDeadline(dl)
		}
		stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
		defer stop()
		if _, err := fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", addr, addr); err != nil {
			c.Close()
			return nil, fmt.Errorf("egress gateway: %w", err)
		}
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
		if err != nil {
			c.Close()
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("egress gateway: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			c.Close()
			return nil, &wire.RefusedError{Target: addr, Status: resp.StatusCode,
				Reason: strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(string(body)), "choird egress gateway:"))}
		}
		c.SetDeadline(time.Time{})
		if br.Buffered() > 0 {
			return &bufConn{Conn: c, r: br}, nil
		}
		return c, nil
	}
}

// Transport returns an HTTP transport whose connections go through the
// gateway with origin.
func (d *Dialer) Transport(origin string) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.Proxy = nil
	tr.DialContext = d.DialFunc(origin)
	return tr
}

type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufConn) Read(p []byte) (int, error) { return c.r.Read(p) }

type laneKey struct{}

type laneInfo struct {
	name    string
	sources []string
}

// WithLane returns ctx naming the lane a connection is for and that
// lane's untrusted sources, which the gateway records and shows a person
// asked to approve the connection.
func WithLane(ctx context.Context, lane string, sources []string) context.Context {
	return context.WithValue(ctx, laneKey{}, laneInfo{name: lane, sources: sources})
}

func laneFrom(ctx context.Context) laneInfo {
	l, _ := ctx.Value(laneKey{}).(laneInfo)
	return l
}

// Local is the tools' proxy: a loopback listener whose every connection is
// piped to the gateway after a hello with origin proxy.
type Local struct {
	Dialer *Dialer
	// Lane and Sources are announced in every connection's hello: the
	// lane whose call the proxy serves and its untrusted sources, shown to
	// a person asked to approve a connection. Empty for the agent-wide
	// proxy.
	Lane    string
	Sources []string
	ln      net.Listener
	wg      sync.WaitGroup
}

// Listen starts the proxy on a loopback port until ctx ends.
func (l *Local) Listen(ctx context.Context) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("local egress proxy: %w", err)
	}
	l.ln = ln
	context.AfterFunc(ctx, func() { ln.Close() })
	l.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.wg.Go(func() { l.pipe(ctx, c) })
		}
	})
	return nil
}

// Wait returns once the proxy has stopped (its context ended) and every
// connection it carried has closed.
func (l *Local) Wait() { l.wg.Wait() }

// Addr is the proxy's loopback address.
func (l *Local) Addr() string { return l.ln.Addr().String() }

func (l *Local) pipe(ctx context.Context, c net.Conn) {
	defer c.Close()
	up, err := l.Dialer.Open(ctx, wire.Hello{Origin: wire.OriginProxy, Lane: l.Lane, Sources: l.Sources})
	if err != nil {
		io.WriteString(c, "HTTP/1.1 502 Bad Gateway\r\nConnection: close\r\nContent-Type: text/plain\r\n\r\nchoir local proxy: "+
			err.Error()+"\n")
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { up.Close(); c.Close() })
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() {
		io.Copy(up, c)
		if uc, ok := up.(*net.UnixConn); ok {
			uc.CloseWrite()
		}
	})
	io.Copy(c, up)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	wg.Wait()
}

// ProxyEnv is the environment that points a tool at the proxy at addr:
// both spellings of HTTP_PROXY, HTTPS_PROXY and ALL_PROXY, and NO_PROXY
// naming only the loopback (the container's own, where the proxy itself
// listens: git reaches choird's git route through it by its loopback
// address, as a plain origin-form request).
func ProxyEnv(addr string) []string {
	u := "http://" + addr
	var env []string
	for _, k := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"} {
		env = append(env, k+"="+u, strings.ToLower(k)+"="+u)
	}
	return append(env, "NO_PROXY="+NoProxy, "no_proxy="+NoProxy)
}

// NoProxy is NO_PROXY for tools: the loopback only.
const NoProxy = "localhost,127.0.0.1,::1"
