// Package callclient is the agent's end of the agent protocol below its
// messages: it reaches choird over the socket or endpoint chosen (the
// loopback rule for plaintext, the CA to trust), sends each call on the
// fast path's pooled connections or, failing that, through net/http,
// retrying transport failures with the same request ID, and holds the
// event stream open, reconnecting with jittered backoff, resuming after
// the last push delivered and dropping the ones delivered already. Package
// rpc/client encodes and decodes the payloads and turns error bodies into
// rpc's errors, through callbacks.
package callclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"

	"github.com/choirhq/choir/rpc/internal/fastpath"
	"github.com/choirhq/choir/rpc/internal/transport"
)

// Config says where choird is and who calls it.
type Config struct {
	// Socket is the Unix socket; when it is empty, Endpoint is used.
	Socket string
	// Endpoint is choird's URL, and CACert the PEM file of certificates
	// to trust for it.
	Endpoint, CACert string
	// Paths are the calls' paths, by verb.
	Paths map[string]string
	// SessionID, and Auth, the Authorization header, go with every call,
	// the request ID and the session ID in the headers named.
	SessionID, Auth                  string
	RequestIDHeader, SessionIDHeader string
	// Retries is how many times a call is retried after a transport
	// failure (default 2; negative for none); MaxResponse caps a response
	// or a pushed message (default 64 MiB).
	Retries, MaxResponse int
	// Backoff bounds the event stream's reconnect delay (defaults 100 ms
	// and 10 s); Idle is how long it may stay silent (default 45 s).
	Backoff [2]time.Duration
	Idle    time.Duration
	// Log receives stream reconnects (default: discard).
	Log *slog.Logger
}

// withDefaults fills in cfg's zero fields.
func (cfg Config) withDefaults() Config {
	if cfg.Retries == 0 {
		cfg.Retries = 2
	}
	cfg.Retries = max(cfg.Retries, 0)
	if cfg.MaxResponse <= 0 {
		cfg.MaxResponse = 64 << 20
	}
	if cfg.Backoff[0] <= 0 {
		cfg.Backoff[0] = 100 * time.Millisecond
	}
	if cfg.Backoff[1] <= 0 {
		cfg.Backoff[1] = 10 * time.Second
	}
	cfg.Backoff[1] = max(cfg.Backoff[1], cfg.Backoff[0])
	if cfg.Idle <= 0 {
		cfg.Idle = 45 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return cfg
}

// Conn is a client's way to choird: the pool carries the calls, and
// net/http the event stream and any call the pool cannot make.
type Conn struct {
	HC *http.Client
	// Base is scheme://host, with no trailing slash; Name names the
	// socket or endpoint in errors.
	Base, Name string
	calls      *fastpath.Pool
	urls       map[string]*url.URL
	cfg        Config
	// sessionHeader and authHeader are built once and shared by every
	// call.
	sessionHeader, authHeader []string
}

// New returns a Conn for cfg. It does not connect.
func New(cfg Config) (*Conn, error) {
	cfg = cfg.withDefaults()
	tr := &http.Transport{
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	c := &Conn{cfg: cfg, sessionHeader: []string{cfg.SessionID}, authHeader: []string{cfg.Auth}}
	if err := c.setTransport(tr); err != nil {
		return nil, err
	}
	c.HC = &http.Client{Transport: tr}
	c.urls = make(map[string]*url.URL, len(cfg.Paths))
	for v, p := range cfg.Paths {
		u, err := url.Parse(c.Base + p)
		if err != nil {
			return nil, fmt.Errorf("new rpc client: %w", err)
		}
		c.urls[v] = u
	}
	return c, nil
}

// setTransport points tr and the call pool at the socket or endpoint.
func (c *Conn) setTransport(tr *http.Transport) error {
	if c.cfg.Socket != "" {
		sock := c.cfg.Socket
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}
		// The host is never resolved: every connection goes to the socket.
		c.Base, c.Name = "http://choird", "uds:"+sock
		c.calls = &fastpath.Pool{
			Dial: func(ctx context.Context) (net.Conn, error) {
				return d.DialContext(ctx, "unix", sock)
			},
			MaxIdle: tr.MaxIdleConnsPerHost,
			IdleFor: tr.IdleConnTimeout,
		}
		return nil
	}
	endpoint := c.cfg.Endpoint
	u, err := url.Parse(endpoint)
	if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return fmt.Errorf("new rpc client: endpoint %q: want https://host:port", endpoint)
	}
	switch u.Scheme {
	case "https":
		tlsConf := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}}
		if c.cfg.CACert != "" {
			pem, err := os.ReadFile(c.cfg.CACert)
			if err != nil {
				return fmt.Errorf("new rpc client: read CA certificate: %w", err)
			}
			tlsConf.RootCAs = x509.NewCertPool()
			if !tlsConf.RootCAs.AppendCertsFromPEM(pem) {
				return fmt.Errorf("new rpc client: no certificate in %s", c.cfg.CACert)
			}
		}
		tr.TLSClientConfig = tlsConf
	case "http":
		if !transport.IsLoopbackHost(u.Hostname()) {
			return fmt.Errorf("new rpc client: endpoint %s: plaintext is allowed only to a loopback address; use https", endpoint)
		}
	default:
		return fmt.Errorf("new rpc client: endpoint %q: scheme must be https (or http to loopback)", endpoint)
	}
	c.Base, c.Name = u.Scheme+"://"+u.Host, u.Scheme+"://"+u.Host
	c.calls = &fastpath.Pool{Dial: transport.TCPDialer(u, tr.TLSClientConfig), MaxIdle: tr.MaxIdleConnsPerHost, IdleFor: tr.IdleConnTimeout}
	return nil
}

// MaxResponse is the cap on a response or a pushed message.
func (c *Conn) MaxResponse() int { return c.cfg.MaxResponse }

// Close releases the idle connections.
func (c *Conn) Close() {
	c.HC.CloseIdleConnections()
	if c.calls != nil {
		c.calls.CloseIdle()
	}
}

// Call sends a call, retrying transport failures with the same request ID,
// and returns the status and body of its answer.
func (c *Conn) Call(ctx context.Context, verb, id string, body []byte) (status int, resp []byte, err error) {
	for attempt := 0; ; attempt++ {
		status, resp, err = c.post(ctx, verb, id, body)
		if err == nil {
			return status, resp, nil
		}
		if ctx.Err() != nil || attempt >= c.cfg.Retries {
			return 0, nil, err
		}
		if err := Sleep(ctx, time.Duration(attempt+1)*20*time.Millisecond); err != nil {
			return 0, nil, err
		}
	}
}

// jsonContentType is shared by every call: net/http only reads it.
var jsonContentType = []string{"application/json"}

func (c *Conn) post(ctx context.Context, verb, id string, body []byte) (int, []byte, error) {
	u := c.urls[verb]
	if u == nil {
		return 0, nil, fmt.Errorf("unknown verb %s", verb)
	}
	if c.calls != nil {
		// Sorted by name, as net/http writes them.
		headers := [4][2]string{
			{"Authorization", c.cfg.Auth},
			{"Content-Type", "application/json"},
			{c.cfg.RequestIDHeader, id},
			{c.cfg.SessionIDHeader, c.cfg.SessionID},
		}
		status, resp, err := c.calls.Call(ctx, u.Path, u.Host, &headers, body, c.cfg.MaxResponse)
		if err != fastpath.ErrUnsupported {
			if err != nil {
				// As net/http's client reports it.
				err = &url.Error{Op: "Post", URL: u.String(), Err: err}
			}
			return status, resp, err
		}
	}
	// Built by hand rather than by http.NewRequestWithContext, which
	// parses the URL and allocates each header anew on every call. The
	// URL and the header values are shared and only ever read: the
	// transport does not modify a request. GetBody is left nil: the
	// transport never retries a POST by itself, and the server never
	// redirects.
	req := (&http.Request{
		Method: http.MethodPost,
		URL:    u,
		Host:   u.Host,
		Header: http.Header{
			"Content-Type":        jsonContentType,
			c.cfg.RequestIDHeader: {id},
			c.cfg.SessionIDHeader: c.sessionHeader,
			"Authorization":       c.authHeader,
		},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
	}).WithContext(ctx)
	res, err := c.HC.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := transport.ReadBody(res, c.cfg.MaxResponse)
	if err != nil {
		return 0, nil, err
	}
	return res.StatusCode, b, nil
}

// Sleep waits for d or until ctx ends.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
