package browser

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/choirhq/choir/internal/netguard"
)

// proxy is the HTTP proxy every connection of the browser goes through,
// loopback included: it dials through the SSRF guard, so whatever request
// interception cannot see (web workers, WebSockets, out-of-process frames,
// a name that resolves to a private address only at connection time) is
// still refused, and the address checked is the one connected to.
type proxy struct {
	ln     net.Listener
	srv    *http.Server
	tr     *http.Transport
	guard  func() *netguard.Guard
	logger *slog.Logger
	wg     sync.WaitGroup
	mu     sync.Mutex
	conns  map[net.Conn]bool // tunnels' ends, closed with the proxy
}

// dialTimeout bounds one connection of the proxy.
const dialTimeout = 15 * time.Second

func startProxy(guard func() *netguard.Guard, logger *slog.Logger) (*proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &proxy{ln: ln, guard: guard, logger: logger, conns: map[net.Conn]bool{}}
	p.tr = &http.Transport{DialContext: p.dial, TLSHandshakeTimeout: dialTimeout, MaxIdleConnsPerHost: 4,
		IdleConnTimeout: 30 * time.Second, DisableCompression: true}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, ErrorLog: nil}
	p.wg.Go(func() { _ = p.srv.Serve(ln) })
	return p, nil
}

// addr is the proxy's address for --proxy-server.
func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) close() {
	_ = p.srv.Close()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.tr.CloseIdleConnections()
	p.wg.Wait()
}

// dial connects through the guard, after checking a name the dialler
// cannot classify (localhost resolves to loopback, which the dialler
// refuses anyway; the check gives the clearer reason).
func (p *proxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	g := p.guard()
	if _, err := g.CheckURL("http://" + addr); err != nil {
		return nil, err
	}
	return g.DialContext(dialTimeout)(ctx, network, addr)
}

// hopHeaders are removed before a request is forwarded.
var hopHeaders = []string{"Proxy-Connection", "Proxy-Authorization", "Proxy-Authenticate", "Connection",
	"Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.tunnel(w, r)
		return
	}
	if !r.URL.IsAbs() || r.URL.Scheme != "http" {
		http.Error(w, "this proxy forwards absolute http URLs only", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		p.refuse(w, r.URL.String(), err)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// tunnel serves CONNECT (https and WebSockets over TLS).
func (p *proxy) tunnel(w http.ResponseWriter, r *http.Request) {
	up, err := p.dial(r.Context(), "tcp", r.Host)
	if err != nil {
		p.refuse(w, r.Host, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	_, _ = down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n"))
	p.mu.Lock()
	p.conns[up], p.conns[down] = true, true
	p.mu.Unlock()
	p.wg.Go(func() {
		defer func() {
			p.mu.Lock()
			delete(p.conns, up)
			delete(p.conns, down)
			p.mu.Unlock()
			up.Close()
			down.Close()
		}()
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(up, buf); closeWrite(up); done <- struct{}{} }()
		go func() { _, _ = io.Copy(down, up); closeWrite(down); done <- struct{}{} }()
		<-done
		<-done
	})
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(interface{ CloseWrite() error }); ok {
		_ = tc.CloseWrite()
	}
}

// refuse answers a refused or failed connection.
func (p *proxy) refuse(w http.ResponseWriter, target string, err error) {
	if errors.Is(err, netguard.ErrAddress) || errors.Is(err, netguard.ErrScheme) {
		p.logger.Warn("browser connection refused by the guard", slog.String("target", shorten(target)), slog.String("error", err.Error()))
		http.Error(w, err.Error(), http.StatusForbidden)
		return
	}
	http.Error(w, err.Error(), http.StatusBadGateway)
}
