package egress

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	wire "github.com/choirhq/choir/rpc/egress"
)

// Policy is what the gateway applies to one agent's connections: its
// egress block, the hosts its web.allow_hosts opens despite netguard, and
// the host:port of the services the configuration gives its own clients.
type Policy struct {
	Egress     config.Egress
	AllowHosts []string
	Services   []string
}

// Options configure a Gateway.
type Options struct {
	// AuthFunc checks a hello's lease token against its session and
	// returns the session's agent; an error refuses the connection.
	AuthFunc func(ctx context.Context, sessionID, leaseToken string) (agentID string, err error)
	// PolicyFunc returns an agent's current policy; it is asked at every
	// connection, so a configuration change applies to the next one.
	PolicyFunc func(agentID string) Policy
	// Pool receives the audit rows; nil writes none.
	Pool *pgxpool.Pool
	// Services serves origin-form /svc/ requests on an authenticated
	// connection, with the caller in the request's context (CallerFrom);
	// nil answers them 404.
	Services http.Handler
	// ApproveFunc asks a person whether a proxied connection to a host
	// egress.allow does not name may go ahead (egress.unknown approve).
	// Nil refuses such connections and says approval is not available.
	ApproveFunc func(ctx context.Context, r ApprovalRequest) (Approval, error)
	// LookupFunc resolves a name; nil uses the system resolver.
	LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)
	// DialTimeout bounds one upstream dial (default 15 s).
	DialTimeout time.Duration
	Logger      *slog.Logger
}

// ApprovalRequest is a connection waiting for a person's decision.
type ApprovalRequest struct {
	Caller  Caller
	Lane    string
	Sources []string
	Host    string
	Port    int
}

// Approval is a person's answer.
type Approval struct {
	Allow bool
}

// Gateway is choird's egress gateway. It is safe for concurrent use.
type Gateway struct {
	opts Options
	log  *slog.Logger
}

// New returns a gateway.
func New(opts Options) *Gateway {
	if opts.DialTimeout <= 0 {
		opts.DialTimeout = 15 * time.Second
	}
	if opts.LookupFunc == nil {
		opts.LookupFunc = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Gateway{opts: opts, log: log}
}

// helloTimeout bounds the wait for a connection's hello.
const helloTimeout = 10 * time.Second

// Serve serves connections from ln until ctx ends; it closes ln.
func (g *Gateway) Serve(ctx context.Context, ln net.Listener) error {
	hl := &helloListener{Listener: ln, conns: make(chan net.Conn), done: make(chan struct{})}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: slog.NewLogLogger(g.log.Handler(), slog.LevelDebug),
		// Requests live in ctx, so that a tunnel (which the server no
		// longer tracks once hijacked) closes when the gateway stops.
		BaseContext: func(net.Listener) context.Context { return ctx },
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			if a, ok := c.(*authConn); ok {
				ctx = WithCaller(ctx, a.caller)
				ctx = context.WithValue(ctx, helloKey{}, a.hello)
			}
			return ctx
		}}
	go hl.acceptLoop(ctx, g)
	stop := context.AfterFunc(ctx, func() { srv.Close() })
	defer stop()
	err := srv.Serve(hl)
	if ctx.Err() != nil || errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

type helloKey struct{}

// helloListener hands the HTTP server only connections whose hello
// authenticated; hellos are read concurrently, so a silent client holds
// up nobody.
type helloListener struct {
	net.Listener
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
	err   error
}

func (l *helloListener) acceptLoop(ctx context.Context, g *Gateway) {
	defer l.Close()
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			l.err = err
			return
		}
		go func() {
			a, err := g.hello(ctx, c)
			if err != nil {
				g.log.WarnContext(ctx, "egress connection refused at its hello", slog.String("error", err.Error()))
				fmt.Fprintf(c, "HTTP/1.1 407 Proxy Authentication Required\r\nContent-Type: text/plain; charset=utf-8\r\n"+
					"%s: refused\r\nConnection: close\r\n\r\nchoird egress gateway: %s\n", wire.HeaderRefused, err)
				c.Close()
				return
			}
			select {
			case l.conns <- a:
			case <-l.done:
				c.Close()
			}
		}()
	}
}

func (l *helloListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *helloListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// authConn is a connection whose hello authenticated; reads continue from
// the buffer that read the hello.
type authConn struct {
	net.Conn
	r      *bufio.Reader
	caller Caller
	hello  wire.Hello
}

func (c *authConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// hello reads and checks a connection's hello.
func (g *Gateway) hello(ctx context.Context, c net.Conn) (*authConn, error) {
	c.SetReadDeadline(time.Now().Add(helloTimeout))
	r := bufio.NewReader(c)
	h, err := wire.ReadHello(r)
	if err != nil {
		return nil, err
	}
	c.SetReadDeadline(time.Time{})
	if g.opts.AuthFunc == nil {
		return nil, errors.New("no authenticator")
	}
	actx, cancel := context.WithTimeout(ctx, helloTimeout)
	defer cancel()
	agentID, err := g.opts.AuthFunc(actx, h.SessionID, h.LeaseToken)
	if err != nil {
		return nil, fmt.Errorf("session %s: %w", h.SessionID, err)
	}
	return &authConn{Conn: c, r: r, caller: Caller{AgentID: agentID, SessionID: h.SessionID}, hello: h}, nil
}

// ServeHTTP serves one request of an authenticated connection.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	caller, ok := CallerFrom(r.Context())
	h, _ := r.Context().Value(helloKey{}).(wire.Hello)
	if !ok {
		http.Error(w, "no caller", http.StatusProxyAuthRequired)
		return
	}
	switch {
	case r.Method == http.MethodConnect:
		g.connect(w, r, caller, h)
	case r.URL.IsAbs():
		g.forward(w, r, caller, h)
	case strings.HasPrefix(r.URL.Path, "/svc/"):
		if g.opts.Services == nil {
			http.NotFound(w, r)
			return
		}
		g.opts.Services.ServeHTTP(w, r)
	default:
		http.Error(w, "choird egress gateway: want CONNECT host:port, an absolute http:// URL, or /svc/", http.StatusBadRequest)
	}
}
