package rpc

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/rpc/internal/fastpath"
	"github.com/choirhq/choir/rpc/internal/transport"
)

// The transports, as named by choir-agent's --control-plane flag.
const (
	TransportUDS  = "uds"
	TransportHTTP = "http"
)

// DefaultSocket is where the agent finds choird's socket in its container.
const DefaultSocket = "/run/choir.sock"

// ClientOptions configure a Client. The first four mirror choir-agent's
// flags (spec 12.2): --control-plane, --socket, --endpoint, --ca-cert.
type ClientOptions struct {
	// ControlPlane is TransportUDS (the default) or TransportHTTP.
	ControlPlane string
	// Socket is the Unix socket, for uds (default DefaultSocket).
	Socket string
	// Endpoint is choird's URL, for http: https://host:port, or
	// http://host:port when host is a loopback address.
	Endpoint string
	// CACert is a PEM file of certificates to trust for Endpoint, such as
	// choird's self-signed certificate (default: the system's roots).
	CACert string

	// SessionID and LeaseToken authenticate every call.
	SessionID  string
	LeaseToken string

	// Retries is how many times a call is retried, with the same request
	// ID, after a transport failure (default 2; negative for none). The
	// server's replay protection makes this safe for mutating verbs.
	Retries int
	// MaxResponseBytes caps a response or a pushed message (default
	// 64 MiB).
	MaxResponseBytes int
	// ReconnectMin and ReconnectMax bound the event stream's reconnect
	// backoff (defaults 100 ms and 10 s).
	ReconnectMin, ReconnectMax time.Duration
	// StreamIdleTimeout is how long the event stream may stay silent
	// before the client assumes the connection dead and reconnects
	// (default 45 s, three server pings).
	StreamIdleTimeout time.Duration
	// Logger receives stream reconnects (default: discard).
	Logger *slog.Logger
}

// Client is the agent's connection to choird over the configured
// transport. It is safe for concurrent use.
type Client struct {
	hc        *http.Client
	base      string // scheme://host, with no trailing slash
	session   string
	auth      string
	retries   int
	maxResp   int
	backoff   [2]time.Duration
	idle      time.Duration
	log       *slog.Logger
	transport string
	// verbURLs, sessionHeader and authHeader are built once and shared by
	// every call.
	verbURLs      map[Verb]*url.URL
	sessionHeader []string
	authHeader    []string
	// calls carries the calls; hc carries the event stream.
	calls *fastpath.Pool
}

// NewClient returns a client for opts. It does not connect: the first call
// does, and a failure names the socket or endpoint.
func NewClient(opts ClientOptions) (*Client, error) {
	if opts.SessionID == "" || opts.LeaseToken == "" {
		return nil, errors.New("new rpc client: session ID and lease token are required")
	}
	c := &Client{
		session: opts.SessionID,
		auth:    "Bearer " + opts.LeaseToken,
		retries: opts.Retries,
		maxResp: opts.MaxResponseBytes,
		backoff: [2]time.Duration{opts.ReconnectMin, opts.ReconnectMax},
		idle:    opts.StreamIdleTimeout,
		log:     opts.Logger,
	}
	if c.retries == 0 {
		c.retries = 2
	}
	c.retries = max(c.retries, 0)
	if c.maxResp <= 0 {
		c.maxResp = 64 << 20
	}
	if c.backoff[0] <= 0 {
		c.backoff[0] = 100 * time.Millisecond
	}
	if c.backoff[1] <= 0 {
		c.backoff[1] = 10 * time.Second
	}
	c.backoff[1] = max(c.backoff[1], c.backoff[0])
	if c.idle <= 0 {
		c.idle = 45 * time.Second
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	tr := &http.Transport{
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
	}
	if err := c.setTransport(opts, tr); err != nil {
		return nil, err
	}
	c.hc = &http.Client{Transport: tr}
	c.verbURLs = make(map[Verb]*url.URL, len(Verbs))
	for _, v := range Verbs {
		u, err := url.Parse(c.base + PathRPCPrefix + string(v))
		if err != nil {
			return nil, fmt.Errorf("new rpc client: %w", err)
		}
		c.verbURLs[v] = u
	}
	c.sessionHeader, c.authHeader = []string{c.session}, []string{c.auth}
	return c, nil
}

// setTransport points tr and the call pool at the socket or endpoint opts
// choose.
func (c *Client) setTransport(opts ClientOptions, tr *http.Transport) error {
	switch opts.ControlPlane {
	case "", TransportUDS:
		sock := opts.Socket
		if sock == "" {
			sock = DefaultSocket
		}
		var d net.Dialer
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}
		// The host is never resolved: every connection goes to the socket.
		c.base, c.transport = "http://choird", "uds:"+sock
		c.calls = &fastpath.Pool{
			Dial: func(ctx context.Context) (net.Conn, error) {
				return d.DialContext(ctx, "unix", sock)
			},
			MaxIdle: tr.MaxIdleConnsPerHost,
			IdleFor: tr.IdleConnTimeout,
		}
	case TransportHTTP:
		u, err := url.Parse(opts.Endpoint)
		if err != nil || u.Host == "" || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
			return fmt.Errorf("new rpc client: endpoint %q: want https://host:port", opts.Endpoint)
		}
		switch u.Scheme {
		case "https":
			tlsConf := &tls.Config{MinVersion: tls.VersionTLS13, NextProtos: []string{"http/1.1"}}
			if opts.CACert != "" {
				pem, err := os.ReadFile(opts.CACert)
				if err != nil {
					return fmt.Errorf("new rpc client: read CA certificate: %w", err)
				}
				tlsConf.RootCAs = x509.NewCertPool()
				if !tlsConf.RootCAs.AppendCertsFromPEM(pem) {
					return fmt.Errorf("new rpc client: no certificate in %s", opts.CACert)
				}
			}
			tr.TLSClientConfig = tlsConf
		case "http":
			if !transport.IsLoopbackHost(u.Hostname()) {
				return fmt.Errorf("new rpc client: endpoint %s: plaintext is allowed only to a loopback address; use https", opts.Endpoint)
			}
		default:
			return fmt.Errorf("new rpc client: endpoint %q: scheme must be https (or http to loopback)", opts.Endpoint)
		}
		c.base, c.transport = u.Scheme+"://"+u.Host, u.Scheme+"://"+u.Host
		c.calls = &fastpath.Pool{Dial: transport.TCPDialer(u, tr.TLSClientConfig), MaxIdle: tr.MaxIdleConnsPerHost, IdleFor: tr.IdleConnTimeout}
	default:
		return fmt.Errorf("new rpc client: control plane %q: want %s or %s", opts.ControlPlane, TransportUDS, TransportHTTP)
	}
	return nil
}

// Close releases the client's idle connections.
func (c *Client) Close() error {
	c.hc.CloseIdleConnections()
	if c.calls != nil {
		c.calls.CloseIdle()
	}
	return nil
}

type requestIDKey struct{}

// WithRequestID makes calls under ctx use id as their request ID instead of
// a fresh UUID, so that a caller retrying an operation across restarts
// gets the replay protection of the first attempt.
func WithRequestID(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, requestIDKey{}, id)
}

// InitHello sends INIT_HELLO and returns choird's answer.
func (c *Client) InitHello(ctx context.Context, req InitHelloRequest) (InitHelloResponse, error) {
	return invoke[InitHelloResponse](ctx, c, VerbInitHello, req)
}

// GetSecrets sends GET_SECRETS and returns choird's answer.
func (c *Client) GetSecrets(ctx context.Context, req GetSecretsRequest) (GetSecretsResponse, error) {
	return invoke[GetSecretsResponse](ctx, c, VerbGetSecrets, req)
}

// Heartbeat sends HEARTBEAT and returns choird's answer.
func (c *Client) Heartbeat(ctx context.Context, req HeartbeatRequest) (HeartbeatResponse, error) {
	return invoke[HeartbeatResponse](ctx, c, VerbHeartbeat, req)
}

// RequestApproval sends REQUEST_APPROVAL and returns choird's answer.
func (c *Client) RequestApproval(ctx context.Context, req ApprovalRequest) (ApprovalResponse, error) {
	return invoke[ApprovalResponse](ctx, c, VerbRequestApproval, req)
}

// ReportStatus sends REPORT_STATUS and returns choird's answer.
func (c *Client) ReportStatus(ctx context.Context, req ReportStatusRequest) (ReportStatusResponse, error) {
	return invoke[ReportStatusResponse](ctx, c, VerbReportStatus, req)
}

// TerminateSelf sends TERMINATE_SELF and returns choird's answer.
func (c *Client) TerminateSelf(ctx context.Context, req TerminateSelfRequest) (TerminateSelfResponse, error) {
	return invoke[TerminateSelfResponse](ctx, c, VerbTerminateSelf, req)
}

// FetchDynamicConfig sends FETCH_DYNAMIC_CONFIG and returns choird's answer.
func (c *Client) FetchDynamicConfig(ctx context.Context, req FetchDynamicConfigRequest) (FetchDynamicConfigResponse, error) {
	return invoke[FetchDynamicConfigResponse](ctx, c, VerbFetchDynamicConfig, req)
}

// ExecuteHostTool sends EXECUTE_HOST_TOOL and returns choird's answer.
func (c *Client) ExecuteHostTool(ctx context.Context, req ExecuteHostToolRequest) (ExecuteHostToolResponse, error) {
	return invoke[ExecuteHostToolResponse](ctx, c, VerbExecuteHostTool, req)
}

// SendOutbound sends SEND_OUTBOUND and returns choird's answer.
func (c *Client) SendOutbound(ctx context.Context, req SendOutboundRequest) (SendOutboundResponse, error) {
	return invoke[SendOutboundResponse](ctx, c, VerbSendOutbound, req)
}

// invoke performs one call: it validates the request, sends it (retrying
// transport failures with the same request ID), and decodes the response
// strictly. Error responses come back as *Error, wrapped with the verb.
func invoke[Resp Payload](ctx context.Context, c *Client, verb Verb, req Payload) (Resp, error) {
	var zero Resp
	validate := req.Validate
	if v, ok := req.(interface{ validateForSend() error }); ok {
		validate = v.validateForSend
	}
	if err := validate(); err != nil {
		return zero, fmt.Errorf("rpc %s: %w", verb, &Error{Code: CodeBadRequest, Message: "invalid request: " + err.Error()})
	}
	body, err := encodePayload(req)
	if err != nil {
		return zero, fmt.Errorf("rpc %s: encode request: %w", verb, err)
	}
	id, _ := ctx.Value(requestIDKey{}).(string)
	if id == "" {
		id = uuid.NewString()
	}
	var status int
	var resp []byte
	for attempt := 0; ; attempt++ {
		status, resp, err = c.post(ctx, verb, id, body)
		if err == nil {
			break
		}
		if ctx.Err() != nil || attempt >= c.retries {
			return zero, fmt.Errorf("rpc %s via %s: %w", verb, c.transport, err)
		}
		if err := sleep(ctx, time.Duration(attempt+1)*20*time.Millisecond); err != nil {
			return zero, fmt.Errorf("rpc %s via %s: %w", verb, c.transport, err)
		}
	}
	if status != http.StatusOK {
		return zero, fmt.Errorf("rpc %s: %w", verb, decodeErrorBody(status, resp))
	}
	out, err := Decode[Resp](resp, c.maxResp, 0)
	if err != nil {
		// Not %w: a malformed response is not the caller's bad request.
		return zero, fmt.Errorf("rpc %s: malformed response from choird: %v", verb, err)
	}
	return out, nil
}

func (c *Client) post(ctx context.Context, verb Verb, id string, body []byte) (int, []byte, error) {
	u := c.verbURLs[verb]
	if u == nil {
		return 0, nil, fmt.Errorf("unknown verb %s", verb)
	}
	if c.calls != nil {
		// Sorted by name, as net/http writes them.
		headers := [4][2]string{
			{"Authorization", c.auth},
			{"Content-Type", "application/json"},
			{HeaderRequestID, id},
			{HeaderSessionID, c.session},
		}
		status, resp, err := c.calls.Call(ctx, u.Path, u.Host, &headers, body, c.maxResp)
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
			"Content-Type":      jsonContentType,
			HeaderRequestID:     {id},
			HeaderSessionID:     c.sessionHeader,
			HeaderAuthorization: c.authHeader,
		},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
	}).WithContext(ctx)
	res, err := c.hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := transport.ReadBody(res, c.maxResp)
	if err != nil {
		return 0, nil, err
	}
	return res.StatusCode, b, nil
}

func (c *Client) setAuth(req *http.Request) {
	req.Header.Set(HeaderSessionID, c.session)
	req.Header.Set(HeaderAuthorization, c.auth)
}

// decodeErrorBody turns an error response into an *Error. A body that is
// not the error form still yields an *Error, of the status's class.
func decodeErrorBody(status int, b []byte) *Error {
	eb, err := Decode[ErrorBody](b, 1<<20, 4)
	if err != nil {
		code := CodeInternal
		for c, i := range codes {
			if i.status == status && c != CodeUnknownVerb {
				code = c
				break
			}
		}
		return Errorf(code, "HTTP %d with a body that is not an error: %.200s", status, strings.TrimSpace(string(b)))
	}
	return eb.Err()
}

// Validate checks an error body.
func (b ErrorBody) Validate() error {
	if b.Code == "" {
		return invalid("$.code", "required")
	}
	if b.RetryAfterMS < 0 {
		return invalid("$.retry_after_ms", "negative")
	}
	return nil
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// jsonContentType is shared by every call: net/http only reads it.
var jsonContentType = []string{"application/json"}
