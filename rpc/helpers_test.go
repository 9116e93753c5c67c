package rpc_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

// testAuth is the test's Authenticator: sessions in a map, tokens stored
// only as hashes, as choird stores them.
type testAuth struct {
	mu       sync.Mutex
	sessions map[string]*authSession
}

type authSession struct {
	agentID string
	hash    []byte
	active  bool
}

var _ rpc.IdentityAuthenticator = (*testAuth)(nil)

func newTestAuth() *testAuth { return &testAuth{sessions: map[string]*authSession{}} }

// add creates an active session and returns its ID and token.
func (a *testAuth) add(agentID string) (sessionID, token string) {
	token, hash := rpc.NewLeaseToken()
	sessionID = uuid.NewString()
	a.mu.Lock()
	a.sessions[sessionID] = &authSession{agentID: agentID, hash: hash, active: true}
	a.mu.Unlock()
	return sessionID, token
}

func (a *testAuth) revoke(sessionID string) {
	a.mu.Lock()
	a.sessions[sessionID].active = false
	a.mu.Unlock()
}

func (a *testAuth) Authenticate(_ context.Context, sessionID, token string) (rpc.Session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[sessionID]
	if s == nil || !s.active || !rpc.LeaseTokenMatches(token, s.hash) {
		return rpc.Session{}, fmt.Errorf("session %s: %w", sessionID, wire.ErrUnauthenticated)
	}
	return rpc.Session{ID: sessionID, AgentID: s.agentID}, nil
}

// AuthenticateIdentity checks the token alone, whatever the session's
// state, as choird does for HEARTBEAT; testHandler.HandleHeartbeat then
// refuses a revoked session itself.
func (a *testAuth) AuthenticateIdentity(_ context.Context, sessionID, token string) (rpc.Session, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[sessionID]
	if s == nil || !rpc.LeaseTokenMatches(token, s.hash) {
		return rpc.Session{}, fmt.Errorf("session %s: %w", sessionID, wire.ErrUnauthenticated)
	}
	return rpc.Session{ID: sessionID, AgentID: s.agentID}, nil
}

func (a *testAuth) active(sessionID string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.sessions[sessionID]
	return s != nil && s.active
}

// testHandler is the test's ControlPlaneHandler: small, real behaviour for
// every verb, and a count of the calls it served.
type testHandler struct {
	mu       sync.Mutex
	calls    map[rpc.Verb]int
	last     map[rpc.Verb]rpc.Call
	outbox   map[string]int64 // message ID -> outbox ID
	nextID   int64
	entered  chan struct{} // test.block: signalled on entry
	release  chan struct{} // test.block: closed to let it return
	blockers atomic.Int32
	cut      func() // test.cut: cuts every connection, the first time
	cutDone  atomic.Bool
	live     func(sessionID string) bool // whether a session is live, for HEARTBEAT's fence
}

func newTestHandler() *testHandler {
	return &testHandler{
		calls:   map[rpc.Verb]int{},
		last:    map[rpc.Verb]rpc.Call{},
		outbox:  map[string]int64{},
		entered: make(chan struct{}, 64),
		release: make(chan struct{}),
	}
}

func (h *testHandler) record(c rpc.Call) {
	h.mu.Lock()
	h.calls[c.Verb]++
	h.last[c.Verb] = c
	h.mu.Unlock()
}

func (h *testHandler) count(v rpc.Verb) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.calls[v]
}

func (h *testHandler) total() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.calls {
		n += c
	}
	return n
}

func (h *testHandler) lastCall(v rpc.Verb) rpc.Call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last[v]
}

func (h *testHandler) HandleInitHello(_ context.Context, c rpc.Call, req rpc.InitHelloRequest) (rpc.InitHelloResponse, error) {
	h.record(c)
	return rpc.InitHelloResponse{
		Status:           rpc.HelloFresh,
		ResourceBindings: rpc.ResourceBindings{Workspace: "ws-" + req.AgentID, DM: "dm-1", Secrets: []string{"git-token"}},
		ConfigVersion:    3,
	}, nil
}

var testSecrets = map[string]string{"git-token": "s3cret-git", "llm-key": "s3cret-llm"}

func (h *testHandler) HandleGetSecrets(_ context.Context, c rpc.Call, req rpc.GetSecretsRequest) (rpc.GetSecretsResponse, error) {
	h.record(c)
	out := rpc.Secrets{}
	for _, n := range req.Resources {
		v, ok := testSecrets[n]
		if !ok {
			return rpc.GetSecretsResponse{}, fmt.Errorf("secret %s is not bound to agent %s: %w", n, c.Session.AgentID, wire.ErrPermissionDenied)
		}
		out[n] = v
	}
	return rpc.GetSecretsResponse{Secrets: out}, nil
}

func (h *testHandler) HandleHeartbeat(_ context.Context, c rpc.Call, req rpc.HeartbeatRequest) (rpc.HeartbeatResponse, error) {
	if h.live != nil && !h.live(c.Session.ID) {
		return rpc.HeartbeatResponse{}, fmt.Errorf("session %s is not live: %w", c.Session.ID, wire.ErrUnauthenticated)
	}
	h.record(c)
	return rpc.HeartbeatResponse{AckRev: req.NewRev, ConfigVersionLatest: 3}, nil
}

func (h *testHandler) HandleRequestApproval(_ context.Context, c rpc.Call, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error) {
	h.record(c)
	return rpc.ApprovalResponse{ApprovalID: uuid.NewString(), Status: rpc.ApprovalPending}, nil
}

func (h *testHandler) HandleReportStatus(_ context.Context, c rpc.Call, _ rpc.ReportStatusRequest) (rpc.ReportStatusResponse, error) {
	h.record(c)
	return rpc.Ack{Ack: true}, nil
}

func (h *testHandler) HandleTerminateSelf(_ context.Context, c rpc.Call, _ rpc.TerminateSelfRequest) (rpc.TerminateSelfResponse, error) {
	h.record(c)
	return rpc.Ack{Ack: true}, nil
}

func (h *testHandler) HandleFetchDynamicConfig(_ context.Context, c rpc.Call, req rpc.FetchDynamicConfigRequest) (rpc.FetchDynamicConfigResponse, error) {
	h.record(c)
	if req.CurrentConfigVersion >= 3 {
		return rpc.FetchDynamicConfigResponse{ConfigVersion: 3}, nil
	}
	return rpc.FetchDynamicConfigResponse{ConfigVersion: 3, Config: json.RawMessage(`{"heartbeat_interval_ms":5000}`)}, nil
}

func (h *testHandler) HandleExecuteHostTool(ctx context.Context, c rpc.Call, req rpc.ExecuteHostToolRequest) (rpc.ExecuteHostToolResponse, error) {
	h.record(c)
	switch req.ToolName {
	case "test.panic":
		panic("tool exploded")
	case "test.fail":
		return rpc.ExecuteHostToolResponse{}, errors.New("connect to postgres at 10.0.0.7: password authentication failed")
	case "test.missing":
		return rpc.ExecuteHostToolResponse{}, fmt.Errorf("memory document 42: %w", wire.ErrNotFound)
	case "test.invalid":
		return rpc.ExecuteHostToolResponse{CallID: req.CallID, Status: "maybe", Output: req.Input}, nil
	case "test.cut":
		if h.cutDone.CompareAndSwap(false, true) {
			h.cut() // The call runs, but its response is lost.
		}
		return rpc.ExecuteHostToolResponse{CallID: req.CallID, Status: rpc.ToolSuccess, Output: json.RawMessage(`{"id":"` + uuid.NewString() + `"}`)}, nil
	case "test.block":
		h.blockers.Add(1)
		h.entered <- struct{}{}
		select {
		case <-h.release:
		case <-ctx.Done():
			return rpc.ExecuteHostToolResponse{}, ctx.Err()
		}
		return rpc.ExecuteHostToolResponse{CallID: req.CallID, Status: rpc.ToolSuccess, Output: json.RawMessage(`{"id":"` + uuid.NewString() + `"}`)}, nil
	}
	return rpc.ExecuteHostToolResponse{CallID: req.CallID, Status: rpc.ToolSuccess, Output: req.Input}, nil
}

func (h *testHandler) HandleSendOutbound(_ context.Context, c rpc.Call, req rpc.SendOutboundRequest) (rpc.SendOutboundResponse, error) {
	h.record(c)
	h.mu.Lock()
	defer h.mu.Unlock()
	id, dup := h.outbox[req.MessageID]
	if !dup {
		h.nextID++
		id = h.nextID
		h.outbox[req.MessageID] = id
	}
	return rpc.SendOutboundResponse{MessageID: req.MessageID, OutboxID: id, Status: rpc.OutboundPending, Duplicate: dup}, nil
}

// trackingListener records the connections it accepts, so that a test can
// count them or cut them all.
type trackingListener struct {
	net.Listener
	mu      sync.Mutex
	conns   []net.Conn
	accepts atomic.Int32
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.accepts.Add(1)
		l.mu.Lock()
		l.conns = append(l.conns, c)
		l.mu.Unlock()
	}
	return c, err
}

// dropAll closes every connection accepted so far, as a network failure
// would.
func (l *trackingListener) dropAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, c := range l.conns {
		c.Close()
	}
	l.conns = nil
}

// The transports of the conformance suite.
const (
	transportUDS   = "UDS"
	transportHTTPS = "HTTPS"
	transportHTTP  = "HTTPLoopback"
)

var conformanceTransports = []string{transportUDS, transportHTTPS}

type testBundle struct {
	srv       *rpc.Server
	h         *testHandler
	auth      *testAuth
	ln        *trackingListener
	client    *client.Client
	opts      client.Options // the client's options, to make others
	sessionID string
	token     string
	agentID   string
	// dial opens a raw connection to the server, TLS included.
	dial func(ctx context.Context) (net.Conn, error)
	base string // URL base for raw requests
	// stopServer ends Serve and returns its error; cleanup calls it too.
	stopServer func() error
}

type setupOpts struct {
	limits   rpc.Limits
	ping     time.Duration
	maxConns int
}

// shortTempDir returns a temporary directory with a path short enough for a
// Unix socket (t.TempDir embeds the test name).
func shortTempDir(t testing.TB) string {
	dir, err := os.MkdirTemp("", "choir")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func setup(t testing.TB, transport string, so setupOpts) *testBundle {
	t.Helper()
	b := &testBundle{h: newTestHandler(), auth: newTestAuth(), agentID: "alice"}
	b.h.live = b.auth.active
	b.sessionID, b.token = b.auth.add(b.agentID)
	srv, err := rpc.NewServer(rpc.ServerOptions{
		Handler: b.h, Authenticator: b.auth, Limits: so.limits, StreamPing: so.ping,
		ShutdownTimeout: 2 * time.Second, MaxConns: so.maxConns,
	})
	if err != nil {
		t.Fatal(err)
	}
	b.srv = srv
	ctx := context.Background()
	dir := shortTempDir(t)
	b.opts = client.Options{
		SessionID: b.sessionID, LeaseToken: b.token,
		ReconnectMin: 5 * time.Millisecond, ReconnectMax: 50 * time.Millisecond,
	}
	var ln net.Listener
	switch transport {
	case transportUDS:
		sock := filepath.Join(dir, "choird.sock")
		ln, err = rpc.ListenUnix(ctx, sock)
		b.opts.ControlPlane, b.opts.Socket = client.TransportUDS, sock
		b.base = "http://choird"
		b.dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
	case transportHTTPS, transportHTTP:
		var tlsConf *tls.Config
		scheme := "http"
		if transport == transportHTTPS {
			scheme = "https"
			files, _, err := rpc.EnsureSelfSignedCert(filepath.Join(dir, "tls"), nil)
			if err != nil {
				t.Fatal(err)
			}
			if tlsConf, err = rpc.ServerTLSConfig(files); err != nil {
				t.Fatal(err)
			}
			b.opts.CACert = files.CertFile
		}
		ln, err = rpc.ListenTCP(ctx, "127.0.0.1:0", tlsConf)
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		b.opts.ControlPlane, b.opts.Endpoint = client.TransportHTTP, scheme+"://"+addr
		b.base = b.opts.Endpoint
		b.dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			c, err := d.DialContext(ctx, "tcp", addr)
			if err != nil || tlsConf == nil {
				return c, err
			}
			pool := x509.NewCertPool()
			pem, _ := os.ReadFile(b.opts.CACert)
			pool.AppendCertsFromPEM(pem)
			tc := tls.Client(c, &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", NextProtos: []string{"http/1.1"}})
			if err := tc.HandshakeContext(ctx); err != nil {
				c.Close()
				return nil, err
			}
			return tc, nil
		}
	default:
		t.Fatalf("unknown transport %s", transport)
	}
	if err != nil {
		t.Fatal(err)
	}
	b.ln = &trackingListener{Listener: ln}
	b.h.cut = b.ln.dropAll
	sctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(sctx, b.ln) }()
	// Registered before any client's, so that it runs after them: the
	// clients' idle connections are closed before the server shuts down.
	var once sync.Once
	var serveErr error
	b.stopServer = func() error {
		once.Do(func() { stop(); serveErr = <-done })
		return serveErr
	}
	t.Cleanup(func() {
		if err := b.stopServer(); err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	b.client = b.newClient(t, b.opts)
	return b
}

func (b *testBundle) newClient(t testing.TB, opts client.Options) *client.Client {
	t.Helper()
	c, err := client.New(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// rawClient returns an HTTP client that uses at most one connection, and
// the count of connections it dialled.
func (b *testBundle) rawClient(t testing.TB) (*http.Client, *atomic.Int32) {
	var dials atomic.Int32
	tr := &http.Transport{
		MaxConnsPerHost: 1, MaxIdleConnsPerHost: 1, DisableCompression: true,
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			return b.dial(ctx)
		},
		DialTLSContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			dials.Add(1)
			return b.dial(ctx)
		},
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr}, &dials
}
