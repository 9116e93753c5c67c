package fastpath

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// poolBundle is a plain net/http server on a Unix socket and a Pool
// dialling it, counting the connections accepted.
type poolBundle struct {
	pool    *Pool
	accepts atomic.Int32
	mu      sync.Mutex
	conns   []net.Conn
}

func newPoolBundle(t *testing.T, h http.HandlerFunc) *poolBundle {
	t.Helper()
	dir, err := os.MkdirTemp("", "choir")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	b := &poolBundle{}
	srv := &http.Server{Handler: h, ConnState: func(c net.Conn, s http.ConnState) {
		if s == http.StateNew {
			b.accepts.Add(1)
			b.mu.Lock()
			b.conns = append(b.conns, c)
			b.mu.Unlock()
		}
	}}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	var d net.Dialer
	b.pool = &Pool{
		Dial:    func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) },
		MaxIdle: 4, IdleFor: time.Minute,
	}
	t.Cleanup(b.pool.CloseIdle)
	return b
}

// dropAll closes every server-side connection, as choird's idle timeout
// would.
func (b *poolBundle) dropAll() {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range b.conns {
		c.Close()
	}
	b.conns = nil
}

var poolHeaders = [4][2]string{
	{"Authorization", "Bearer x"}, {"Content-Type", "application/json"},
	{"X-Choir-Request-Id", "r1"}, {"X-Choir-Session-Id", "s1"},
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Write(b)
}

func TestCallPoolReusesOneConnection(t *testing.T) {
	t.Parallel()
	b := newPoolBundle(t, echo)
	for i := range 5 {
		status, resp, err := b.pool.Call(t.Context(), "/rpc/HEARTBEAT", "choird", &poolHeaders, []byte(`{"n":1}`), 1<<20)
		if err != nil || status != 200 || string(resp) != `{"n":1}` {
			t.Fatalf("call %d: %d %s %v", i, status, resp, err)
		}
	}
	if n := b.accepts.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

func TestCallPoolRetriesAConnectionClosedWhileIdle(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	b := newPoolBundle(t, func(w http.ResponseWriter, r *http.Request) { calls.Add(1); echo(w, r) })
	if _, _, err := b.pool.Call(t.Context(), "/rpc/HEARTBEAT", "choird", &poolHeaders, []byte(`{}`), 1<<20); err != nil {
		t.Fatal(err)
	}
	b.dropAll()
	time.Sleep(10 * time.Millisecond) // let the close reach the client's end
	if _, _, err := b.pool.Call(t.Context(), "/rpc/HEARTBEAT", "choird", &poolHeaders, []byte(`{}`), 1<<20); err != nil {
		t.Fatalf("call on a connection closed while idle: %v", err)
	}
	if n, c := b.accepts.Load(), calls.Load(); n != 2 || c != 2 {
		t.Errorf("%d connections and %d calls, want 2 and 2", n, c)
	}
}

func TestCallPoolDropsAConnectionTheServerCloses(t *testing.T) {
	t.Parallel()
	b := newPoolBundle(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		echo(w, r)
	})
	for range 2 {
		if _, _, err := b.pool.Call(t.Context(), "/rpc/HEARTBEAT", "choird", &poolHeaders, []byte(`{}`), 1<<20); err != nil {
			t.Fatal(err)
		}
	}
	if n := b.accepts.Load(); n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
}

func TestCallPoolHonoursTheContext(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := newPoolBundle(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
		echo(w, r)
	})
	defer close(release)
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	t0 := time.Now()
	_, _, err := b.pool.Call(ctx, "/rpc/HEARTBEAT", "choird", &poolHeaders, []byte(`{}`), 1<<20)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want the context's error", err)
	}
	if d := time.Since(t0); d > time.Second {
		t.Errorf("call returned after %s", d)
	}
	ctx, cancel = context.WithCancel(t.Context())
	time.AfterFunc(20*time.Millisecond, cancel)
	if _, _, err := b.pool.Call(ctx, "/rpc/HEARTBEAT", "choird", &poolHeaders, []byte(`{}`), 1<<20); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
	if len(b.pool.idle) != 0 {
		t.Error("an interrupted connection went back to the pool")
	}
}

func TestCallPoolRefusesOversizeResponses(t *testing.T) {
	t.Parallel()
	b := newPoolBundle(t, echo)
	if _, _, err := b.pool.Call(t.Context(), "/rpc/HEARTBEAT", "choird", &poolHeaders, bytes.Repeat([]byte("a"), 100), 10); err == nil {
		t.Error("an oversize response was accepted")
	}
	if len(b.pool.idle) != 0 {
		t.Error("a connection with an unread response went back to the pool")
	}
}

func TestCallPoolLeavesOddHeadersToTheTransport(t *testing.T) {
	t.Parallel()
	b := newPoolBundle(t, echo)
	h := poolHeaders
	h[3][1] = "s1\r\nX-Injected: 1"
	if _, _, err := b.pool.Call(t.Context(), "/rpc/HEARTBEAT", "choird", &h, []byte(`{}`), 1<<20); err != ErrUnsupported {
		t.Errorf("got %v, want ErrUnsupported", err)
	}
	h[3][1] = " s1"
	if _, _, err := b.pool.Call(t.Context(), "/rpc/HEARTBEAT", "choird", &h, []byte(`{}`), 1<<20); err != ErrUnsupported {
		t.Errorf("got %v, want ErrUnsupported", err)
	}
}

// TestCallPoolWritesWhatTheTransportWrites compares the bytes of a call
// sent by the pool with those net/http's Transport sends for it, so that
// choird sees the same wire format either way.
func TestCallPoolWritesWhatTheTransportWrites(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "choir")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "raw.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	body := []byte(`{"base_rev":0}`)
	// capture reads one request and answers it.
	capture := func() <-chan []byte {
		got := make(chan []byte, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				got <- nil
				return
			}
			defer c.Close()
			br := bufio.NewReader(c)
			var raw bytes.Buffer
			req, err := http.ReadRequest(bufio.NewReader(io.TeeReader(br, &raw)))
			if err == nil {
				io.ReadAll(req.Body)
			}
			io.WriteString(c, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
			got <- raw.Bytes()
		}()
		return got
	}
	var d net.Dialer
	dial := func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, "unix", sock) }

	got := capture()
	pool := &Pool{Dial: dial, MaxIdle: 1, IdleFor: time.Minute}
	defer pool.CloseIdle()
	if _, _, err := pool.Call(t.Context(), "/rpc/HEARTBEAT", "choird", &poolHeaders, body, 1<<20); err != nil {
		t.Fatal(err)
	}
	fromPool := <-got

	got = capture()
	tr := &http.Transport{DisableCompression: true, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }}
	defer tr.CloseIdleConnections()
	req, _ := http.NewRequest(http.MethodPost, "http://choird/rpc/HEARTBEAT", bytes.NewReader(body))
	for _, h := range poolHeaders {
		req.Header.Set(h[0], h[1])
	}
	res, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	io.ReadAll(res.Body)
	res.Body.Close()
	fromTransport := <-got

	if len(fromPool) == 0 || !bytes.Equal(fromPool, fromTransport) {
		t.Errorf("the pool wrote\n%q\nthe Transport\n%q", fromPool, fromTransport)
	}
}

// FuzzParsePlainResponse checks parsePlainResponse against
// http.ReadResponse: whatever it accepts, ReadResponse reads the same way.
func FuzzParsePlainResponse(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\nX-Choir-Request-Id: r1\r\n\r\n{}",
		"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\ncontent-length:  3 \r\n\r\n{}x",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
		"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", "HTTP/1.1 204 No Content\r\nContent-Length: 0\r\n\r\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 200\r\nContent-Length: +1\r\n\r\n{",
		"HTTP/1.1 200 OK\r\n Folded: x\r\nContent-Length: 0\r\n\r\n", "HTTP/1.1 200 OK\r\nBad Name: x\r\nContent-Length: 0\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		status, n, headLen, ok := parsePlainResponse(raw)
		if !ok {
			return
		}
		res, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
		if err != nil {
			t.Fatalf("parsePlainResponse accepts %q, ReadResponse refuses it: %v", raw, err)
		}
		defer res.Body.Close()
		if res.StatusCode != status || res.ContentLength != n || res.Close || len(res.TransferEncoding) > 0 || res.ProtoMinor != 1 {
			t.Fatalf("parsePlainResponse(%q) = %d, %d; ReadResponse says %d, %d, close %v, %v", raw, status, n, res.StatusCode, res.ContentLength, res.Close, res.TransferEncoding)
		}
		body, err := io.ReadAll(res.Body)
		if rest := raw[headLen:]; err == nil && !bytes.Equal(body, rest[:min(int64(len(rest)), n)]) {
			t.Fatalf("parsePlainResponse(%q): body at %d differs from ReadResponse's %q", raw, headLen, body)
		}
	})
}

func TestCallPoolReadsChunkedResponses(t *testing.T) {
	t.Parallel()
	b := newPoolBundle(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		io.WriteString(w, `{"a":`)
		w.(http.Flusher).Flush() // no Content-Length: the body is chunked
		io.WriteString(w, `1}`)
	})
	for range 2 {
		status, resp, err := b.pool.Call(t.Context(), "/rpc/HEARTBEAT", "choird", &poolHeaders, []byte(`{}`), 1<<20)
		if err != nil || status != 200 || string(resp) != `{"a":1}` {
			t.Fatalf("%d %s %v", status, resp, err)
		}
	}
	if n := b.accepts.Load(); n != 1 {
		t.Errorf("%d connections, want 1", n)
	}
}

func TestParsePlainResponseTakesChoirdsResponses(t *testing.T) {
	t.Parallel()
	raw := "HTTP/1.1 200 OK\r\nContent-Length: 40\r\nContent-Type: application/json\r\nDate: Sun, 22 Nov 2026 00:00:00 GMT\r\nX-Choir-Replayed: true\r\nX-Choir-Request-Id: r-1\r\n\r\n"
	status, n, headLen, ok := parsePlainResponse([]byte(raw + `{"ack_rev":1,"config_version_latest":3}`))
	if !ok || status != 200 || n != 40 || headLen != len(raw) {
		t.Errorf("got %d, %d, %d, %v", status, n, headLen, ok)
	}
	if _, _, _, ok := parsePlainResponse([]byte(raw[:len(raw)-2])); ok {
		t.Error("accepted a head that is not all there")
	}
}

func TestCallPoolDropsAConnectionOutOfStep(t *testing.T) {
	t.Parallel()
	b := newPoolBundle(t, func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		// A response with a stray byte after it, as a broken server
		// might send.
		c, bw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}x")
		bw.Flush()
		time.Sleep(50 * time.Millisecond) // keep the connection open
	})
	status, resp, err := b.pool.Call(t.Context(), "/rpc/HEARTBEAT", "choird", &poolHeaders, []byte(`{}`), 1<<20)
	if err != nil || status != 200 || string(resp) != `{}` {
		t.Fatalf("%d %s %v", status, resp, err)
	}
	if len(b.pool.idle) != 0 {
		t.Error("a connection with stray bytes went back to the pool")
	}
}
