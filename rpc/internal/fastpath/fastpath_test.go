package fastpath

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// The benchmarks below are what justify this package: each runs the fast
// path and the plain one it stands in for on the same work, so that the
// saving can be weighed against the code.

// benchBody is a call of about 1 KiB, the size of a heartbeat with one
// event (rpc's BenchmarkRoundTrip).
var benchBody, _ = json.Marshal(map[string]string{"x": strings.Repeat("a", 1016)})

// echoHead answers a call with the first 40 bytes of its body, about a
// heartbeat's answer.
func echoHead(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Content-Type", "application/json")
	w.Write(body[:40])
}

// BenchmarkCall measures one call of 1 KiB at a time over a Unix socket
// and over loopback TCP: Plain is net/http at both ends (http.Server,
// http.Client), the floor the protocol would stand on without this
// package; Fast is Serve and Pool. It reports p50 and p99 latency.
func BenchmarkCall(b *testing.B) {
	for _, network := range []string{"unix", "tcp"} {
		b.Run("Plain/"+network, func(b *testing.B) {
			ln, dial := benchListen(b, network)
			srv := &http.Server{Handler: http.HandlerFunc(echoHead)}
			go srv.Serve(ln)
			tr := &http.Transport{MaxIdleConnsPerHost: 4, DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) }}
			hc := &http.Client{Transport: tr}
			b.Cleanup(func() { srv.Close(); tr.CloseIdleConnections() })
			benchCalls(b, func() error {
				res, err := hc.Post("http://choird/rpc/HEARTBEAT", "application/json", bytes.NewReader(benchBody))
				if err != nil {
					return err
				}
				io.Copy(io.Discard, res.Body)
				return res.Body.Close()
			})
		})
		b.Run("Fast/"+network, func(b *testing.B) {
			ln, dial := benchListen(b, network)
			ctx, stop := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() {
				served <- Serve(ctx, ln, Config{Handler: http.HandlerFunc(echoHead), BaseContext: context.Background(),
					OnShutdown: func() {}, CallPrefix: "POST /rpc/", MaxConns: 64, DrainLimit: 1 << 20,
					BadRequest: func(msg string) []byte { return []byte(`{}`) },
					Log:        slog.New(slog.DiscardHandler), Grace: time.Second})
			}()
			pool := &Pool{Dial: dial, MaxIdle: 4, IdleFor: time.Minute}
			b.Cleanup(func() { pool.CloseIdle(); stop(); <-served })
			headers := [4][2]string{{"Authorization", "Bearer x"}, {"Content-Type", "application/json"},
				{"X-Choir-Request-Id", "r1"}, {"X-Choir-Session-Id", "s1"}}
			benchCalls(b, func() error {
				_, _, err := pool.Call(context.Background(), "/rpc/HEARTBEAT", "choird", &headers, benchBody, 1<<20)
				return err
			})
		})
	}
}

// benchListen listens on a fresh Unix socket or loopback port and returns
// a dialer for it.
func benchListen(b *testing.B, network string) (net.Listener, func(context.Context) (net.Conn, error)) {
	addr := "127.0.0.1:0"
	if network == "unix" {
		dir, err := os.MkdirTemp("", "choir")
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { os.RemoveAll(dir) })
		addr = filepath.Join(dir, "b.sock")
	}
	ln, err := net.Listen(network, addr)
	if err != nil {
		b.Fatal(err)
	}
	var d net.Dialer
	return ln, func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, network, ln.Addr().String()) }
}

// benchCalls runs call in the benchmark's loop and reports its latency.
func benchCalls(b *testing.B, call func() error) {
	if err := call(); err != nil { // Warm the connection.
		b.Fatal(err)
	}
	lat := make([]time.Duration, 0, b.N)
	for b.Loop() {
		t0 := time.Now()
		if err := call(); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(t0))
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(int(float64(len(lat))*p), len(lat)-1)].Nanoseconds()) / 1e3
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
}

// BenchmarkCanonical measures what it costs to bring a canonical event
// payload of about 1 KiB into canonical form before hashing it: Plain
// decodes and re-encodes it as rpc.CanonicalJSON's reference does, Fast
// only scans it (Canonicalize).
func BenchmarkCanonical(b *testing.B) {
	raw, _ := json.Marshal(map[string]any{"text": strings.Repeat("word ", 150), "tokens": 812, "model": "m", "tool": map[string]any{"name": "shell", "args": []string{"ls", "-l"}}})
	b.Run("Plain", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			dec := json.NewDecoder(bytes.NewReader(raw))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil {
				b.Fatal(err)
			}
			var buf bytes.Buffer
			enc := json.NewEncoder(&buf)
			enc.SetEscapeHTML(false)
			if err := enc.Encode(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Fast", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, ok := Canonicalize(raw); !ok {
				b.Fatal("not canonical")
			}
		}
	})
}
