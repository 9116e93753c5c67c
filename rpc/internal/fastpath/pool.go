package fastpath

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/choirhq/choir/rpc/internal/transport"
)

// Pool sends calls on persistent HTTP/1.1 connections, each carrying
// one call at a time, written and read in the caller's goroutine. It
// speaks the same HTTP as net/http's Transport, which it replaces only for
// calls: the Transport hands every request to a
// writer goroutine and every response back from a reader goroutine, and on
// a busy machine those two hand-offs were a large share of a call's
// latency. The event stream keeps using the Transport.
type Pool struct {
	// Dial opens a connection to the server.
	Dial func(ctx context.Context) (net.Conn, error)
	// MaxIdle is how many idle connections are kept, IdleFor for how long.
	MaxIdle int
	IdleFor time.Duration

	mu   sync.Mutex
	idle []*callConn // most recently used last
}

type callConn struct {
	nc       net.Conn
	br       *bufio.Reader
	bw       *bufio.Writer
	lastUsed time.Time
}

// ErrUnsupported sends a call the pool cannot write byte for byte as
// net/http would (a header value with control characters) to the
// Transport, which refuses it as it always has.
var ErrUnsupported = errors.New("call not supported by the connection pool")

// aLongTimeAgo is a deadline in the past, which interrupts blocked I/O.
var aLongTimeAgo = time.Unix(1, 0)

// Call sends one POST of body to path and returns the response's status
// and body, read under the limit. A failure on a connection that had been
// idle in the pool, before any byte of the response arrived, is retried
// once on a fresh connection: the server closes idle connections, and a
// call that it never read did nothing (mutating calls are protected by
// their request ID in any case).
func (p *Pool) Call(ctx context.Context, path, host string, headers *[4][2]string, body []byte, limit int) (int, []byte, error) {
	if !validHeaderValue(host) {
		return 0, nil, ErrUnsupported
	}
	for _, h := range headers {
		if !validHeaderValue(h[1]) {
			return 0, nil, ErrUnsupported
		}
	}
	for attempt := 0; ; attempt++ {
		cc, reused, err := p.get(ctx)
		if err != nil {
			return 0, nil, err
		}
		status, resp, keep, answered, err := cc.do(ctx, path, host, headers, body, limit)
		if err == nil {
			if keep {
				p.put(cc)
			} else {
				cc.nc.Close()
			}
			return status, resp, nil
		}
		cc.nc.Close()
		if !reused || answered || attempt > 0 || ctx.Err() != nil {
			return 0, nil, err
		}
	}
}

// get returns an idle connection, or dials one. reused reports an idle
// one.
func (p *Pool) get(ctx context.Context) (cc *callConn, reused bool, err error) {
	now := time.Now()
	p.mu.Lock()
	for len(p.idle) > 0 {
		cc = p.idle[len(p.idle)-1]
		p.idle[len(p.idle)-1] = nil
		p.idle = p.idle[:len(p.idle)-1]
		if now.Sub(cc.lastUsed) < p.IdleFor {
			p.mu.Unlock()
			return cc, true, nil
		}
		cc.nc.Close()
	}
	p.mu.Unlock()
	nc, err := p.Dial(ctx)
	if err != nil {
		return nil, false, err
	}
	return &callConn{nc: nc, br: bufio.NewReaderSize(nc, 4096), bw: bufio.NewWriterSize(nc, 4096)}, false, nil
}

func (p *Pool) put(cc *callConn) {
	cc.lastUsed = time.Now()
	p.mu.Lock()
	if len(p.idle) < p.MaxIdle {
		p.idle = append(p.idle, cc)
		cc = nil
	}
	p.mu.Unlock()
	if cc != nil {
		cc.nc.Close()
	}
}

// CloseIdle closes the idle connections.
func (p *Pool) CloseIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, cc := range idle {
		cc.nc.Close()
	}
}

// do performs one exchange. keep reports that the connection may carry
// another; answered, that some of the response arrived.
func (cc *callConn) do(ctx context.Context, path, host string, headers *[4][2]string, body []byte, limit int) (status int, resp []byte, keep, answered bool, err error) {
	// The context's end interrupts the I/O by moving the deadline into the
	// past; a connection it interrupted is never reused, so the ones in
	// the pool have no deadline.
	if ctx.Done() != nil {
		stop := context.AfterFunc(ctx, func() { cc.nc.SetDeadline(aLongTimeAgo) })
		defer func() {
			if !stop() {
				// The context ended as the call did: the deadline may
				// have been set after all, so the connection goes.
				keep = false
			}
			if ctxErr := ctx.Err(); err != nil && ctxErr != nil {
				err = ctxErr
			}
		}()
	}

	// What net/http's Transport writes for such a request, in its order:
	// request line, Host, User-Agent, Content-Length, then the headers
	// sorted by name.
	w := cc.bw
	w.WriteString("POST ")
	w.WriteString(path)
	w.WriteString(" HTTP/1.1\r\nHost: ")
	w.WriteString(host)
	w.WriteString("\r\nUser-Agent: Go-http-client/1.1\r\nContent-Length: ")
	w.Write(strconv.AppendInt(w.AvailableBuffer(), int64(len(body)), 10))
	w.WriteString("\r\n")
	for _, h := range headers {
		w.WriteString(h[0])
		w.WriteString(": ")
		w.WriteString(h[1])
		w.WriteString("\r\n")
	}
	w.WriteString("\r\n")
	w.Write(body)
	if err := w.Flush(); err != nil {
		return 0, nil, false, false, fmt.Errorf("send request: %w", err)
	}

	if _, err := cc.br.Peek(1); err != nil {
		return 0, nil, false, false, fmt.Errorf("read response: %w", err)
	}
	// The whole response is usually in the buffer by now.
	head, _ := cc.br.Peek(cc.br.Buffered())
	if status, n, headerLen, ok := parsePlainResponse(head); ok && n <= int64(limit) {
		cc.br.Discard(headerLen)
		b := make([]byte, n)
		if _, err := io.ReadFull(cc.br, b); err != nil {
			return 0, nil, false, true, fmt.Errorf("read response: %w", err)
		}
		// Nothing may follow a response before the next request: if
		// something did, the connection is out of step.
		return status, b, cc.br.Buffered() == 0, true, nil
	}
	res, err := http.ReadResponse(cc.br, nil)
	if err != nil {
		return 0, nil, false, true, fmt.Errorf("read response: %w", err)
	}
	defer res.Body.Close()
	if res.StatusCode < 200 {
		return 0, nil, false, true, fmt.Errorf("unexpected HTTP %d response", res.StatusCode)
	}
	b, err := transport.ReadBody(res, limit)
	if err != nil {
		return 0, nil, false, true, err
	}
	// A body of known length is complete once read, a chunked one once
	// read to its end; one delimited by the connection's end leaves
	// nothing to reuse.
	keep = !res.Close && (res.ContentLength >= 0 || len(res.TransferEncoding) > 0) && cc.br.Buffered() == 0
	return res.StatusCode, b, keep, true, nil
}

// parsePlainResponse parses the head of a response as choird writes them
// (HTTP/1.1, a final status, a Content-Length, no Connection or
// Transfer-Encoding header), when buf holds all of it. Anything else it
// leaves to http.ReadResponse (ok false), which also produces the errors:
// so it needs only to agree with ReadResponse on what it accepts, which
// FuzzParsePlainResponse checks. It reports the status, the body's length
// and the length of the head.
func parsePlainResponse(b []byte) (status int, contentLength int64, headLen int, ok bool) {
	const proto = "HTTP/1.1 "
	if len(b) < len(proto)+4 || string(b[:len(proto)]) != proto {
		return 0, 0, 0, false
	}
	for _, c := range b[len(proto) : len(proto)+3] {
		if c < '0' || c > '9' {
			return 0, 0, 0, false
		}
		status = status*10 + int(c-'0')
	}
	// 1xx, 204 and 304 have bodies by other rules.
	if status < 200 || status == 204 || status == 304 {
		return 0, 0, 0, false
	}
	i := len(proto) + 3
	if b[i] != ' ' && b[i] != '\r' {
		return 0, 0, 0, false
	}
	eol := bytes.Index(b[i:], []byte("\r\n"))
	if eol < 0 || !printable(b[i:i+eol], false) {
		return 0, 0, 0, false
	}
	i += eol + 2
	contentLength = -1
	for {
		eol := bytes.Index(b[i:], []byte("\r\n"))
		if eol < 0 {
			return 0, 0, 0, false // the head is not all in the buffer
		}
		line := b[i : i+eol]
		i += eol + 2
		if len(line) == 0 {
			break
		}
		name, value, found := bytes.Cut(line, []byte(":"))
		if !found || len(name) == 0 || !isToken(name) || !printable(value, true) {
			return 0, 0, 0, false
		}
		value = bytes.Trim(value, " \t")
		switch {
		case asciiEqualFold(name, "Content-Length"):
			if contentLength >= 0 || len(value) == 0 || len(value) > 18 {
				return 0, 0, 0, false
			}
			n, err := strconv.ParseInt(string(value), 10, 64)
			if err != nil || value[0] == '+' || value[0] == '-' {
				return 0, 0, 0, false
			}
			contentLength = n
		case asciiEqualFold(name, "Connection"), asciiEqualFold(name, "Transfer-Encoding"), asciiEqualFold(name, "Trailer"):
			return 0, 0, 0, false
		}
	}
	if contentLength < 0 {
		return 0, 0, 0, false
	}
	return status, contentLength, i, true
}

// isToken reports whether b is a header field name (an RFC 9110 token).
func isToken(b []byte) bool {
	for _, c := range b {
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case bytes.IndexByte([]byte("!#$%&'*+-.^_`|~"), c) >= 0:
		default:
			return false
		}
	}
	return true
}

// printable reports whether b has no control characters (but tab, where
// tabs are allowed) and no bytes above ASCII.
func printable(b []byte, tabs bool) bool {
	for _, c := range b {
		if (c < ' ' && !(tabs && c == '\t')) || c >= 0x7f {
			return false
		}
	}
	return true
}

func asciiEqualFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range b {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// validHeaderValue reports whether net/http would write v as it is: no
// control characters, and no spaces or tabs at either end (it trims them).
func validHeaderValue(v string) bool {
	if v == "" || v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t' {
		return false
	}
	for i := 0; i < len(v); i++ {
		if c := v[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}
