package fastpath

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Timeouts of the call loop. A connection waits idleTimeout for its next
// call, then headerTimeout for the call's head, then bodyTimeout for its
// body; a response must be taken within writeTimeout.
const (
	idleTimeout    = 5 * time.Minute
	headerTimeout  = 10 * time.Second
	bodyTimeout    = 30 * time.Second
	writeTimeout   = 30 * time.Second
	maxHeaderBytes = 64 << 10
)

// Config configures Serve.
type Config struct {
	// Handler serves every call, and net/http serves it everything else.
	Handler http.Handler
	// BaseContext is the context of every request; OnShutdown runs when
	// net/http begins to shut down, so that event streams can end.
	BaseContext context.Context
	OnShutdown  func()
	// CallPrefix is how the request line of every call begins, such as
	// "POST /rpc/".
	CallPrefix string
	// MaxConns caps the open connections (see rpc.ServerOptions.MaxConns).
	MaxConns int
	// DrainLimit is how much of a body the handler left unread is
	// discarded so that the connection can carry the next call.
	DrainLimit int64
	// BadRequest renders the JSON body of a bad_request error with the
	// given message, for a request the loop refuses itself.
	BadRequest func(msg string) []byte
	// Log receives accept failures, panics and refused connections.
	Log *slog.Logger
	// Grace bounds how long Serve waits for calls in flight when its
	// context ends.
	Grace time.Duration
}

// Serve serves cfg.Handler on ln until ctx ends, then shuts down
// gracefully: net/http's connections (event streams) are shut down, calls
// in flight get cfg.Grace to finish. It closes ln.
//
// Calls run in the call loop (callServer); a connection that asks for
// anything else is handed to a net/http server.
func Serve(ctx context.Context, ln net.Listener, cfg Config) error {
	handoff := newHandoffListener(ln.Addr())
	hs := &http.Server{
		Handler:           cfg.Handler,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return cfg.BaseContext },
		ErrorLog:          slog.NewLogLogger(cfg.Log.Handler(), slog.LevelDebug),
	}
	hs.RegisterOnShutdown(cfg.OnShutdown)
	cs := &callServer{cfg: cfg, prefix: []byte(cfg.CallPrefix), handoff: handoff, conns: map[*serverConn]struct{}{},
		capWarn: rate.Sometimes{Interval: 10 * time.Second}}
	hs.ConnState = cs.connState
	httpErr, callErr := make(chan error, 1), make(chan error, 1)
	go func() { httpErr <- hs.Serve(handoff) }()
	go func() { callErr <- cs.serve(ln) }()
	var failed error
	select {
	case err := <-callErr:
		failed = fmt.Errorf("serve rpc on %s: %w", ln.Addr(), err)
		callErr <- nil
	case <-ctx.Done():
	}
	cs.stopAccepting(ln)
	<-callErr
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cfg.Grace)
	defer cancel()
	var errs []error
	if err := hs.Shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("shut down rpc event streams on %s: %w", ln.Addr(), err), hs.Close())
	}
	if err := cs.shutdown(sctx); err != nil {
		errs = append(errs, fmt.Errorf("shut down rpc calls on %s: %w", ln.Addr(), err))
	}
	<-httpErr
	return errors.Join(append([]error{failed}, errs...)...)
}

// callServer serves calls, POST /rpc/<verb>, on each connection in the
// connection's own goroutine: it reads the request with net/http's own
// parser (http.ReadRequest), runs the handler, and writes the
// whole response in one write.
//
// It exists for speed. net/http's server, for every request, arms a
// background read on the connection once the body is read (to notice a
// client that goes away) and tears it down when the handler returns: a
// goroutine, a read that would block, and two deadline changes. On this
// project's 2-core machines that was a third of a HEARTBEAT's round trip.
// The price is that a call's context is not canceled when its agent
// disconnects mid-call; it is when the server shuts down.
//
// A connection whose next request is not a call (GET /events, anything
// malformed from its first bytes) is handed, with the bytes already read,
// to net/http, which keeps it to the end: the event stream and every odd
// request get net/http's full treatment.
type callServer struct {
	cfg     Config
	prefix  []byte
	handoff *handoffListener

	mu      sync.Mutex
	conns   map[*serverConn]struct{}
	closing bool
	capWarn rate.Sometimes
}

// evictLocked makes room for a new connection at the cap by closing the
// connection that has waited longest without being busy (an agent's idle
// pooled connection, or one that opened and never finished a call): the
// newcomer is likelier to be about to call than it. It reports false when
// every connection is busy. cs.mu is held.
func (cs *callServer) evictLocked() bool {
	var victim *serverConn
	for c := range cs.conns {
		if !c.busy && (victim == nil || c.lastUsed.Before(victim.lastUsed)) {
			victim = c
		}
	}
	if victim == nil {
		return false
	}
	delete(cs.conns, victim)
	victim.nc.Close()
	return true
}

// setBusy marks c as in a handler, or no longer.
func (cs *callServer) setBusy(c *serverConn, busy bool) {
	cs.mu.Lock()
	c.busy = busy
	if !busy {
		c.lastUsed = time.Now()
	}
	cs.mu.Unlock()
}

// connState follows the connections handed to net/http, for the cap.
func (cs *callServer) connState(nc net.Conn, state http.ConnState) {
	bc, ok := nc.(*bufferedConn)
	if !ok {
		return
	}
	switch state {
	case http.StateActive, http.StateHijacked:
		cs.setBusy(bc.sc, true)
	case http.StateIdle:
		cs.setBusy(bc.sc, false)
	}
}

// serverConn is a connection served by the call loop, or handed off to
// net/http; it counts against Config.MaxConns until it is closed.
type serverConn struct {
	nc     net.Conn
	cancel context.CancelFunc
	active bool // serving a call, as opposed to waiting for one
	// busy marks a connection in a handler (a call, an event stream),
	// which the connection cap never closes; lastUsed is when it was last
	// busy, or accepted. Both are guarded by callServer.mu.
	busy     bool
	lastUsed time.Time
}

// serve accepts connections on ln until it fails or is closed.
func (cs *callServer) serve(ln net.Listener) error {
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if cs.isClosing() || errors.Is(err, net.ErrClosed) {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() { // Out of descriptors and the like: wait, retry.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				cs.cfg.Log.Warn("rpc accept failed; retrying", slog.Any("err", err), slog.Duration("in", backoff))
				time.Sleep(backoff)
				continue
			}
			return err
		}
		backoff = 0
		ctx, cancel := context.WithCancel(cs.cfg.BaseContext)
		c := &serverConn{nc: nc, cancel: cancel, lastUsed: time.Now()}
		cs.mu.Lock()
		if cs.closing {
			cs.mu.Unlock()
			cancel()
			nc.Close()
			return nil
		}
		if len(cs.conns) >= cs.cfg.MaxConns && !cs.evictLocked() {
			cs.mu.Unlock()
			cancel()
			nc.Close()
			cs.capWarn.Do(func() {
				cs.cfg.Log.Warn("rpc connection refused: every connection of the listener is busy",
					slog.Int("max_conns", cs.cfg.MaxConns))
			})
			continue
		}
		cs.conns[c] = struct{}{}
		cs.mu.Unlock()
		go cs.serveConn(ctx, c)
	}
}

// setActive marks c as serving a call; false if the server is closing.
func (cs *callServer) setActive(c *serverConn, active bool) bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c.active = active
	return !cs.closing
}

func (cs *callServer) isClosing() bool {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.closing
}

func (cs *callServer) forget(c *serverConn) {
	cs.mu.Lock()
	delete(cs.conns, c)
	cs.mu.Unlock()
	c.cancel()
}

// stopAccepting marks the server closing and closes ln, which ends serve.
func (cs *callServer) stopAccepting(ln net.Listener) {
	cs.mu.Lock()
	cs.closing = true
	cs.mu.Unlock()
	ln.Close()
}

// shutdown closes every idle connection and waits for the others to finish
// their call; when ctx ends first, it closes them too.
func (cs *callServer) shutdown(ctx context.Context) error {
	cs.mu.Lock()
	cs.closing = true
	for c := range cs.conns {
		if !c.active {
			c.nc.Close()
		}
	}
	cs.mu.Unlock()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		cs.mu.Lock()
		n := len(cs.conns)
		cs.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			cs.mu.Lock()
			for c := range cs.conns {
				c.cancel()
				c.nc.Close()
			}
			cs.mu.Unlock()
			return fmt.Errorf("%d connections still in a call: %w", n, ctx.Err())
		}
	}
}

// serveConn runs the call loop on one connection.
func (cs *callServer) serveConn(ctx context.Context, c *serverConn) {
	handedOff := false
	defer func() {
		if p := recover(); p != nil {
			cs.cfg.Log.Error("rpc connection panicked", slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		}
		if !handedOff {
			c.nc.Close()
			cs.forget(c)
		}
	}()
	lr := &io.LimitedReader{R: c.nc, N: math.MaxInt64}
	br := bufio.NewReader(lr)
	bw := bufio.NewWriter(c.nc)
	w := &callWriter{h: http.Header{}}
	// A client connects to make a call, so the first call (and a TLS
	// handshake) gets headerTimeout; a later one may come after a pause.
	wait := headerTimeout
	for {
		// Wait for the next call, then give its head headerTimeout.
		c.nc.SetReadDeadline(time.Now().Add(wait))
		wait = idleTimeout
		if _, err := br.Peek(1); err != nil {
			return
		}
		if !cs.setActive(c, true) {
			return
		}
		c.nc.SetReadDeadline(time.Now().Add(headerTimeout))
		head, err := br.Peek(len(cs.prefix))
		if err != nil {
			return
		}
		if !bytes.Equal(head, cs.prefix) {
			c.nc.SetReadDeadline(time.Time{})
			// From here net/http owns the connection; it counts against
			// the cap until net/http closes it.
			cs.setActive(c, false)
			handedOff = cs.handoff.give(&bufferedConn{Conn: c.nc, r: br, sc: c, forget: cs.forget})
			return
		}
		lr.N = maxHeaderBytes
		req, err := http.ReadRequest(br)
		tooLarge := lr.N == 0
		lr.N = math.MaxInt64
		if err != nil {
			msg := fmt.Sprintf("malformed HTTP request: %v", err)
			status := http.StatusBadRequest
			if tooLarge {
				msg = fmt.Sprintf("request header over %d bytes", maxHeaderBytes)
				status = http.StatusRequestHeaderFieldsTooLarge
			}
			w.reset()
			w.error(cs.cfg.BadRequest(msg), status)
			cs.respond(c, bw, w, true)
			return
		}
		keep := cs.serveCall(ctx, c, w, req) && !cs.isClosing()
		if !cs.respond(c, bw, w, !keep) || !keep {
			return
		}
		if !cs.setActive(c, false) {
			return
		}
	}
}

// serveCall runs one call and reports whether the connection can carry
// another.
func (cs *callServer) serveCall(ctx context.Context, c *serverConn, w *callWriter, req *http.Request) bool {
	w.reset()
	keep := req.ProtoAtLeast(1, 1) && !req.Close
	switch {
	case req.ProtoMajor != 1:
		w.error(cs.cfg.BadRequest(fmt.Sprintf("HTTP/%d.%d is not supported; use HTTP/1.1", req.ProtoMajor, req.ProtoMinor)), http.StatusHTTPVersionNotSupported)
		return false
	case req.ProtoAtLeast(1, 1) && req.Host == "":
		w.error(cs.cfg.BadRequest("missing required Host header"), http.StatusBadRequest)
		return false
	case req.Header.Get("Expect") != "":
		// The call has no body yet, and gets none: the connection must go.
		w.error(cs.cfg.BadRequest(fmt.Sprintf("Expect %q is not supported; send the body at once", req.Header.Get("Expect"))), http.StatusExpectationFailed)
		return false
	}
	c.nc.SetReadDeadline(time.Now().Add(bodyTimeout))
	cs.setBusy(c, true)
	cs.cfg.Handler.ServeHTTP(w, req.WithContext(ctx))
	cs.setBusy(c, false)
	if w.h.Get("Connection") == "close" {
		return false
	}
	// Whatever of the body the handler left unread is discarded, within
	// the drain limit, so that the next call starts at its first byte.
	if _, err := io.CopyN(io.Discard, req.Body, cs.cfg.DrainLimit); err != io.EOF {
		return false
	}
	return keep
}

// respond writes w's response to c. It reports whether the write succeeded.
func (cs *callServer) respond(c *serverConn, bw *bufio.Writer, w *callWriter, closing bool) bool {
	c.nc.SetWriteDeadline(time.Now().Add(writeTimeout)) // Before any write: a large body goes out as it is buffered.
	if !w.wrote {
		w.WriteHeader(http.StatusOK)
	}
	bw.WriteString("HTTP/1.1 ")
	bw.WriteString(strconv.Itoa(w.status))
	bw.WriteByte(' ')
	bw.WriteString(http.StatusText(w.status))
	bw.WriteString("\r\n")
	for _, k := range []string{"Content-Length", "Connection", "Date", "Transfer-Encoding"} {
		delete(w.h, k)
	}
	w.h.Write(bw) // Sanitises line breaks in values, as net/http does.
	bw.WriteString("Content-Length: ")
	bw.WriteString(strconv.Itoa(len(w.body)))
	bw.WriteString("\r\nDate: ")
	var date [len(http.TimeFormat)]byte
	bw.Write(time.Now().UTC().AppendFormat(date[:0], http.TimeFormat))
	if closing {
		bw.WriteString("\r\nConnection: close")
	}
	bw.WriteString("\r\n\r\n")
	bw.Write(w.body)
	return bw.Flush() == nil
}

// callWriter is the http.ResponseWriter of a call: it keeps the whole
// response, which respond then writes at once.
type callWriter struct {
	h      http.Header
	status int
	wrote  bool
	body   []byte
}

func (w *callWriter) reset() {
	clear(w.h)
	w.status, w.wrote = 0, false
	if cap(w.body) > 64<<10 {
		w.body = nil // Do not keep a large response's buffer for the connection's life.
	}
	w.body = w.body[:0]
}

// Header implements http.ResponseWriter.
func (w *callWriter) Header() http.Header { return w.h }

// WriteHeader implements http.ResponseWriter.
func (w *callWriter) WriteHeader(status int) {
	if !w.wrote {
		w.status, w.wrote = status, true
	}
}

// Write implements http.ResponseWriter.
func (w *callWriter) Write(p []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.body = append(w.body, p...)
	return len(p), nil
}

func (w *callWriter) error(body []byte, status int) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(body)
}

// bufferedConn is a connection handed to net/http with the bytes the call
// loop had already read from it.
type bufferedConn struct {
	net.Conn
	r      *bufio.Reader
	sc     *serverConn
	forget func(*serverConn)
	once   sync.Once
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// Close closes the connection and stops counting it against the cap.
func (c *bufferedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.forget(c.sc) })
	return err
}

// handoffListener is the listener net/http serves: it yields the
// connections the call loop gives it.
type handoffListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func newHandoffListener(addr net.Addr) *handoffListener {
	return &handoffListener{addr: addr, conns: make(chan net.Conn), done: make(chan struct{})}
}

// give hands c to net/http; false if the listener is closed.
func (l *handoffListener) give(c net.Conn) bool {
	select {
	case l.conns <- c:
		return true
	case <-l.done:
		return false
	}
}

// Accept implements net.Listener.
func (l *handoffListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener.
func (l *handoffListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr implements net.Listener.
func (l *handoffListener) Addr() net.Addr { return l.addr }
