// Package transport holds the byte-stream plumbing that both ends of the
// agent protocol share and that knows nothing of its messages: dialling
// choird's Unix socket or TCP endpoint (with TLS) as net/http would, the
// loopback rule for plaintext, reading a response body under a size cap,
// and choird's TLS listener and self-signed certificate.
package transport

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
)

// TCPDialer dials u's host as net/http's Transport would: the scheme's
// default port when u names none, and for TLS the configuration with the
// host as server name, handshake included.
func TCPDialer(u *url.URL, tlsConf *tls.Config) func(ctx context.Context) (net.Conn, error) {
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
	}
	addr := net.JoinHostPort(u.Hostname(), port)
	if tlsConf != nil {
		tlsConf = tlsConf.Clone()
		tlsConf.ServerName = u.Hostname()
	}
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", addr)
		if err != nil || tlsConf == nil {
			return nc, err
		}
		tc := tls.Client(nc, tlsConf)
		if err := tc.HandshakeContext(ctx); err != nil {
			nc.Close()
			return nil, err
		}
		return tc, nil
	}
}

// IsLoopbackHost reports whether host is a loopback IP address or
// "localhost".
func IsLoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// ReadBody reads a response's body under the size cap, in one allocation
// when its length is known.
func ReadBody(res *http.Response, limit int) ([]byte, error) {
	if n := res.ContentLength; n >= 0 && n <= int64(limit) {
		b := make([]byte, n)
		if _, err := io.ReadFull(res.Body, b); err != nil {
			return nil, fmt.Errorf("read response: %w", err)
		}
		return b, nil
	}
	return ReadCapped(res.Body, limit)
}

// ReadCapped reads r to its end, refusing more than limit bytes.
func ReadCapped(r io.Reader, limit int) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("read response: %w", err)
	}
	if len(b) > limit {
		return nil, fmt.Errorf("response over the limit of %d bytes", limit)
	}
	return b, nil
}

// ListenTCP listens on addr: TLS (server-only; HTTP/1.1) with tlsConfig,
// and without it only on a loopback address, which it checks once bound.
func ListenTCP(ctx context.Context, addr string, tlsConfig *tls.Config) (net.Listener, error) {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if tlsConfig == nil && !IsLoopbackHost(host) {
		return nil, fmt.Errorf("listen on %s: plaintext is allowed only on a loopback address; configure TLS (a certificate is generated when none is given)", addr)
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	if tlsConfig == nil {
		// "localhost" could resolve to anything: check what was bound.
		if ta, ok := ln.Addr().(*net.TCPAddr); !ok || !ta.IP.IsLoopback() {
			ln.Close()
			return nil, fmt.Errorf("listen on %s: bound %s, which is not loopback; plaintext refused", addr, ln.Addr())
		}
		return ln, nil
	}
	conf := tlsConfig.Clone()
	conf.NextProtos = []string{"http/1.1"}
	if conf.MinVersion == 0 {
		conf.MinVersion = tls.VersionTLS13
	}
	return tls.NewListener(ln, conf), nil
}
