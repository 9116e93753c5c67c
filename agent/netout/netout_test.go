package netout_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/netout"
	wire "github.com/choirhq/choir/rpc/egress"
)

// gateway is a stand-in for choird's end, speaking the wire contract: it
// reads the hello, hands it to hellos, then answers as answer says.
func gateway(t *testing.T, answer func(h wire.Hello, r *bufio.Reader, c net.Conn)) (string, chan wire.Hello) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	hellos := make(chan wire.Hello, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				h, err := wire.ReadHello(r)
				if err != nil {
					return
				}
				hellos <- h
				answer(h, r, c)
			}()
		}
	}()
	return sock, hellos
}

func dialer(sock string) *netout.Dialer {
	return &netout.Dialer{Socket: sock, SessionID: "s-1", LeaseTokenFunc: func() string { return "tok" }}
}

func TestDialFunc(t *testing.T) {
	t.Parallel()
	t.Run("TunnelCarriesBytesAfter200", func(t *testing.T) {
		t.Parallel()
		sock, hellos := gateway(t, func(_ wire.Hello, r *bufio.Reader, c net.Conn) {
			req, err := http.ReadRequest(r)
			if err != nil || req.Method != http.MethodConnect || req.Host != "api.example.com:443" {
				fmt.Fprintf(c, "HTTP/1.1 400 Bad\r\n\r\n")
				return
			}
			// The first tunnelled bytes arrive with the 200: the dialer
			// must not lose them in its buffer.
			fmt.Fprintf(c, "HTTP/1.1 200 Connection established\r\n\r\nhello from upstream\n")
			line, _ := r.ReadString('\n')
			fmt.Fprintf(c, "echo %s", line)
		})
		ctx := netout.WithLane(context.Background(), "edge", []string{"web"})
		c, err := dialer(sock).DialFunc("builtin:choir.web.fetch")(ctx, "tcp", "api.example.com:443")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		h := <-hellos
		if h.SessionID != "s-1" || h.LeaseToken != "tok" || h.Origin != "builtin:choir.web.fetch" || h.Lane != "edge" ||
			!slices.Equal(h.Sources, []string{"web"}) {
			t.Errorf("hello %+v", h)
		}
		fmt.Fprintf(c, "ping\n")
		r := bufio.NewReader(c)
		for _, want := range []string{"hello from upstream\n", "echo ping\n"} {
			if got, err := r.ReadString('\n'); got != want {
				t.Errorf("read %q (%v), want %q", got, err, want)
			}
		}
	})
	t.Run("RefusalIsTypedWithTheReason", func(t *testing.T) {
		t.Parallel()
		sock, _ := gateway(t, func(_ wire.Hello, r *bufio.Reader, c net.Conn) {
			http.ReadRequest(r)
			body := "choird egress gateway: 10.0.0.1:22 refused: private address\n"
			fmt.Fprintf(c, "HTTP/1.1 403 Forbidden\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
		})
		_, err := dialer(sock).DialFunc("builtin:mcp")(context.Background(), "tcp", "10.0.0.1:22")
		var re *wire.RefusedError
		if !errors.As(err, &re) || re.Status != 403 || re.Reason != "10.0.0.1:22 refused: private address" {
			t.Errorf("dial: %v (%+v)", err, re)
		}
	})
	t.Run("UDPIsNotCarried", func(t *testing.T) {
		t.Parallel()
		if _, err := dialer("/nonexistent").DialFunc("builtin:x")(context.Background(), "udp", "8.8.8.8:53"); err == nil {
			t.Error("a UDP dial went through")
		}
	})
}

// TestLocalIsABytePipe: the tools' proxy adds the hello (origin proxy,
// the agent's token) and then passes every byte both ways unchanged, so
// that the gateway, not the proxy, reads the tool's request.
func TestLocalIsABytePipe(t *testing.T) {
	t.Parallel()
	sock, hellos := gateway(t, func(_ wire.Hello, r *bufio.Reader, c net.Conn) {
		line, _ := r.ReadString('\n')
		fmt.Fprintf(c, "gateway read %q", line)
		c.(*net.UnixConn).CloseWrite()
	})
	ctx, cancel := context.WithCancel(context.Background())
	l := &netout.Local{Dialer: dialer(sock)}
	if err := l.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); l.Wait() }()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "GET http://x.example/ HTTP/1.1\r\n")
	got, _ := io.ReadAll(c)
	if want := `gateway read "GET http://x.example/ HTTP/1.1\r\n"`; string(got) != want {
		t.Errorf("through the pipe: %q, want %q", got, want)
	}
	if h := <-hellos; h.Origin != wire.OriginProxy || h.LeaseToken != "tok" {
		t.Errorf("hello %+v", h)
	}
	env := strings.Join(netout.ProxyEnv(l.Addr()), " ")
	for _, k := range []string{"HTTP_PROXY=", "https_proxy=", "ALL_PROXY=", "NO_PROXY=localhost,127.0.0.1,::1"} {
		if !strings.Contains(env, k) {
			t.Errorf("ProxyEnv lacks %s: %s", k, env)
		}
	}
}

// TestLocalAnnouncesTheLanesSources: a call's own proxy names its lane's
// untrusted sources in every hello, for the person asked to approve.
func TestLocalAnnouncesTheLanesSources(t *testing.T) {
	t.Parallel()
	sock, hellos := gateway(t, func(wire.Hello, *bufio.Reader, net.Conn) {})
	ctx, cancel := context.WithCancel(context.Background())
	l := &netout.Local{Dialer: dialer(sock), Sources: []string{"web", "mail"}}
	if err := l.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { cancel(); l.Wait() }()
	c, err := net.Dial("tcp", l.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if h := <-hellos; h.Origin != wire.OriginProxy || !slices.Equal(h.Sources, []string{"web", "mail"}) {
		t.Errorf("hello %+v", h)
	}
}
