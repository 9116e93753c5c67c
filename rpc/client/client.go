// Package client is the agent's end of the agent protocol whose contract
// is package rpc: a Client that makes rpc's calls to choird, over the Unix
// socket or HTTP(S) as choir-agent's --control-plane flag chooses, and
// receives choird's pushes on the event stream. It validates and encodes
// each request and strictly decodes each answer with rpc's types, retries
// a call that failed in transport with the same request ID (choird's
// replay protection makes that safe), and turns error answers into
// *wire.Error; the connections, the retries and the stream's reconnection
// are rpc/internal/callclient's.
package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/internal/callclient"
	"github.com/choirhq/choir/rpc/wire"
)

// The transports, as named by choir-agent's --control-plane flag.
const (
	TransportUDS  = "uds"
	TransportHTTP = "http"
)

// DefaultSocket is where the agent finds choird's socket in its container.
const DefaultSocket = "/run/choir.sock"

// Options configure a Client. The first four mirror choir-agent's
// flags (spec 12.2): --control-plane, --socket, --endpoint, --ca-cert.
type Options struct {
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
	conn *callclient.Conn
}

// New returns a client for opts. It does not connect: the first call does,
// and a failure names the socket or endpoint.
func New(opts Options) (*Client, error) {
	if opts.SessionID == "" || opts.LeaseToken == "" {
		return nil, errors.New("new rpc client: session ID and lease token are required")
	}
	cfg := callclient.Config{
		Paths:     make(map[string]string, len(rpc.Verbs)),
		SessionID: opts.SessionID, Auth: "Bearer " + opts.LeaseToken,
		RequestIDHeader: rpc.HeaderRequestID, SessionIDHeader: rpc.HeaderSessionID,
		Retries: opts.Retries, MaxResponse: opts.MaxResponseBytes,
		Backoff: [2]time.Duration{opts.ReconnectMin, opts.ReconnectMax}, Idle: opts.StreamIdleTimeout, Log: opts.Logger,
	}
	for _, v := range rpc.Verbs {
		cfg.Paths[string(v)] = rpc.PathRPCPrefix + string(v)
	}
	switch opts.ControlPlane {
	case "", TransportUDS:
		cfg.Socket = opts.Socket
		if cfg.Socket == "" {
			cfg.Socket = DefaultSocket
		}
	case TransportHTTP:
		cfg.Endpoint, cfg.CACert = opts.Endpoint, opts.CACert
	default:
		return nil, fmt.Errorf("new rpc client: control plane %q: want %s or %s", opts.ControlPlane, TransportUDS, TransportHTTP)
	}
	conn, err := callclient.New(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn}, nil
}

// Close releases the client's idle connections.
func (c *Client) Close() error {
	c.conn.Close()
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
func (c *Client) InitHello(ctx context.Context, req rpc.InitHelloRequest) (rpc.InitHelloResponse, error) {
	return invoke[rpc.InitHelloResponse](ctx, c, rpc.VerbInitHello, req)
}

// GetSecrets sends GET_SECRETS and returns choird's answer.
func (c *Client) GetSecrets(ctx context.Context, req rpc.GetSecretsRequest) (rpc.GetSecretsResponse, error) {
	return invoke[rpc.GetSecretsResponse](ctx, c, rpc.VerbGetSecrets, req)
}

// Heartbeat sends HEARTBEAT and returns choird's answer.
func (c *Client) Heartbeat(ctx context.Context, req rpc.HeartbeatRequest) (rpc.HeartbeatResponse, error) {
	return invoke[rpc.HeartbeatResponse](ctx, c, rpc.VerbHeartbeat, req)
}

// RequestApproval sends REQUEST_APPROVAL and returns choird's answer.
func (c *Client) RequestApproval(ctx context.Context, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error) {
	return invoke[rpc.ApprovalResponse](ctx, c, rpc.VerbRequestApproval, req)
}

// ReportStatus sends REPORT_STATUS and returns choird's answer.
func (c *Client) ReportStatus(ctx context.Context, req rpc.ReportStatusRequest) (rpc.ReportStatusResponse, error) {
	return invoke[rpc.ReportStatusResponse](ctx, c, rpc.VerbReportStatus, req)
}

// TerminateSelf sends TERMINATE_SELF and returns choird's answer.
func (c *Client) TerminateSelf(ctx context.Context, req rpc.TerminateSelfRequest) (rpc.TerminateSelfResponse, error) {
	return invoke[rpc.TerminateSelfResponse](ctx, c, rpc.VerbTerminateSelf, req)
}

// FetchDynamicConfig sends FETCH_DYNAMIC_CONFIG and returns choird's answer.
func (c *Client) FetchDynamicConfig(ctx context.Context, req rpc.FetchDynamicConfigRequest) (rpc.FetchDynamicConfigResponse, error) {
	return invoke[rpc.FetchDynamicConfigResponse](ctx, c, rpc.VerbFetchDynamicConfig, req)
}

// ExecuteHostTool sends EXECUTE_HOST_TOOL and returns choird's answer.
func (c *Client) ExecuteHostTool(ctx context.Context, req rpc.ExecuteHostToolRequest) (rpc.ExecuteHostToolResponse, error) {
	return invoke[rpc.ExecuteHostToolResponse](ctx, c, rpc.VerbExecuteHostTool, req)
}

// SendOutbound sends SEND_OUTBOUND and returns choird's answer.
func (c *Client) SendOutbound(ctx context.Context, req rpc.SendOutboundRequest) (rpc.SendOutboundResponse, error) {
	return invoke[rpc.SendOutboundResponse](ctx, c, rpc.VerbSendOutbound, req)
}

// invoke performs one call: it validates the request, sends it (retrying
// transport failures with the same request ID), and decodes the response
// strictly. Error responses come back as *wire.Error, wrapped with the verb.
func invoke[Resp rpc.Payload](ctx context.Context, c *Client, verb rpc.Verb, req rpc.Payload) (Resp, error) {
	var zero Resp
	var err error
	if h, ok := req.(rpc.HeartbeatRequest); ok {
		err = h.ValidateForSend()
	} else {
		err = req.Validate()
	}
	if err != nil {
		return zero, fmt.Errorf("rpc %s: %w", verb, &wire.Error{Code: wire.CodeBadRequest, Message: "invalid request: " + err.Error()})
	}
	body, err := rpc.Encode(req)
	if err != nil {
		return zero, fmt.Errorf("rpc %s: encode request: %w", verb, err)
	}
	id, _ := ctx.Value(requestIDKey{}).(string)
	if id == "" {
		id = uuid.NewString()
	}
	status, resp, err := c.conn.Call(ctx, string(verb), id, body)
	if err != nil {
		return zero, fmt.Errorf("rpc %s via %s: %w", verb, c.conn.Name, err)
	}
	if status != http.StatusOK {
		return zero, fmt.Errorf("rpc %s: %w", verb, decodeErrorBody(status, resp))
	}
	out, err := rpc.Decode[Resp](resp, c.conn.MaxResponse(), 0)
	if err != nil {
		// Not %w: a malformed response is not the caller's bad request.
		return zero, fmt.Errorf("rpc %s: malformed response from choird: %v", verb, err)
	}
	return out, nil
}

// decodeErrorBody turns an error response into an *wire.Error. A body that
// is not the error form still yields an *wire.Error, of the status's class.
func decodeErrorBody(status int, b []byte) *wire.Error {
	eb, err := rpc.Decode[wire.ErrorBody](b, 1<<20, 4)
	if err != nil {
		code := wire.CodeInternal
		for _, c := range wire.Codes {
			if c.HTTPStatus() == status && c != wire.CodeUnknownVerb {
				code = c
				break
			}
		}
		return wire.Errorf(code, "HTTP %d with a body that is not an error: %.200s", status, strings.TrimSpace(string(b)))
	}
	return eb.Err()
}
