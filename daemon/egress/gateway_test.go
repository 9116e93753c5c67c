package egress_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/agent/netout"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/daemon/egress"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/rpc"
	wire "github.com/choirhq/choir/rpc/egress"
	"github.com/choirhq/choir/sql/seam"
)

type testBundle struct {
	pool    *pgxpool.Pool
	agent   string
	socket  string
	session string
	token   string
	policy  atomic.Pointer[egress.Policy]
	lookups atomic.Int64
	// upstream is a local HTTP server; its host:port.
	upstream string
}

const agentID = "scout"

// setup runs a gateway on a fresh database with one live session, an
// upstream server on loopback, and a resolver that knows two names:
// public.test (a public address) and inside.test (a private one).
func setup(t testing.TB, services http.Handler) *testBundle {
	t.Helper()
	return setupWith(t, setupOptions{services: services})
}

// setupOptions vary setup: another database (with the agent in it), the
// session's bindings, an approver.
type setupOptions struct {
	services http.Handler
	pool     *pgxpool.Pool
	agent    string
	bindings string
	approve  func(b *testBundle) func(context.Context, egress.ApprovalRequest) (egress.Approval, error)
}

func setupWith(t testing.TB, o setupOptions) *testBundle {
	t.Helper()
	ctx := context.Background()
	b := &testBundle{pool: o.pool, agent: o.agent}
	if b.pool == nil {
		b.pool, b.agent = dbtest.NewPool(t), agentID
		if _, err := seam.Queries(b.pool).AgentUpsert(ctx, db.AgentUpsertParams{AgentID: agentID, Config: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	if o.bindings == "" {
		o.bindings = "{}"
	}
	token, hash := rpc.NewLeaseToken()
	var sid uuid.UUID
	if err := b.pool.QueryRow(ctx, `INSERT INTO choir_control.sessions (agent_id, lease_token_hash, resource_bindings, hello_at)
		VALUES ($1, $2, $3::jsonb, now()) RETURNING session_id`, b.agent, hash, o.bindings).Scan(&sid); err != nil {
		t.Fatal(err)
	}
	b.session, b.token = sid.String(), token
	b.policy.Store(&egress.Policy{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "upstream saw %s %s", r.Method, r.URL.Path)
	}))
	t.Cleanup(srv.Close)
	b.upstream = strings.TrimPrefix(srv.URL, "http://")
	auth := agentapi.NewSessionAuth(b.pool)
	var approve func(context.Context, egress.ApprovalRequest) (egress.Approval, error)
	if o.approve != nil {
		approve = o.approve(b)
	}
	gw := egress.New(egress.Options{
		ApproveFunc: approve,
		AuthFunc: func(ctx context.Context, sessionID, token string) (string, error) {
			s, err := auth.Authenticate(ctx, sessionID, token)
			return s.AgentID, err
		},
		PolicyFunc: func(string) egress.Policy { return *b.policy.Load() },
		Pool:       b.pool,
		Services:   o.services,
		LookupFunc: func(_ context.Context, host string) ([]netip.Addr, error) {
			b.lookups.Add(1)
			switch host {
			case "public.test":
				return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
			case "inside.test":
				return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
			}
			return nil, fmt.Errorf("no such host %s", host)
		},
	})
	b.socket = filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", b.socket)
	if err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- gw.Serve(sctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return b
}

func (b *testBundle) dialer() *netout.Dialer {
	return &netout.Dialer{Socket: b.socket, SessionID: b.session, LeaseTokenFunc: func() string { return b.token }}
}

// localProxy starts the agent's tool proxy against the gateway.
func (b *testBundle) localProxy(t testing.TB) *url.URL {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &netout.Local{Dialer: b.dialer()}
	if err := l.Listen(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cancel(); l.Wait() })
	return &url.URL{Scheme: "http", Host: l.Addr()}
}

// row is one audit row.
type row struct {
	origin, method, host, decision, reason string
	port                                   int
	up, down                               int64
	ended                                  bool
}

// rows waits until the audit holds n rows, every one ended, and returns
// them in order.
func (b *testBundle) rows(t *testing.T, n int) []row {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		rs, err := b.pool.Query(context.Background(), `SELECT origin, method, host, port, decision, reason, bytes_up, bytes_down,
			ended_at IS NOT NULL FROM choir_audit.egress WHERE agent_id = $1 ORDER BY started_at, host`, b.agent)
		if err != nil {
			t.Fatal(err)
		}
		var out []row
		ended := true
		for rs.Next() {
			var r row
			if err := rs.Scan(&r.origin, &r.method, &r.host, &r.port, &r.decision, &r.reason, &r.up, &r.down, &r.ended); err != nil {
				t.Fatal(err)
			}
			ended = ended && r.ended
			out = append(out, r)
		}
		if len(out) == n && ended {
			return out
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit rows %+v, want %d ended", out, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func get(t *testing.T, c *http.Client, u string) (int, string, error) {
	t.Helper()
	resp, err := c.Get(u)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), nil
}

func TestGateway(t *testing.T) {
	t.Parallel()

	t.Run("BuiltinConnectAllowedAndCounted", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.policy.Store(&egress.Policy{AllowHosts: []string{b.upstream}})
		c := &http.Client{Transport: b.dialer().Transport("builtin:choir.web.fetch")}
		code, body, err := get(t, c, "http://"+b.upstream+"/page")
		if err != nil || code != 200 || body != "upstream saw GET /page" {
			t.Fatalf("GET through the gateway: %d %q %v", code, body, err)
		}
		c.CloseIdleConnections()
		r := b.rows(t, 1)[0]
		if r.decision != "allowed" || r.method != "CONNECT" || r.origin != "builtin:choir.web.fetch" || r.up == 0 || r.down == 0 {
			t.Errorf("audit %+v, want an allowed CONNECT with bytes both ways", r)
		}
		var conns, up int64
		if err := b.pool.QueryRow(context.Background(), `SELECT connections, bytes_up FROM choir_audit.egress_counters
			WHERE agent_id = $1`, agentID).Scan(&conns, &up); err != nil || conns != 1 || up != r.up {
			t.Errorf("counters: %d connections, %d bytes up, %v", conns, up, err)
		}
	})

	t.Run("BuiltinLoopbackRefusedWithoutAllowHosts", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		_, err := b.dialer().DialFunc("builtin:choir.web.fetch")(context.Background(), "tcp", b.upstream)
		var re *wire.RefusedError
		if !errorsAs(err, &re) || re.Status != 403 || !strings.Contains(re.Reason, "loopback") {
			t.Fatalf("dial loopback: %v, want a 403 naming loopback", err)
		}
		if r := b.rows(t, 1)[0]; r.decision != "refused" || !strings.Contains(r.reason, "loopback") {
			t.Errorf("audit %+v", r)
		}
	})

	t.Run("ServiceEndpointPassesNetguard", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.policy.Store(&egress.Policy{Services: []string{b.upstream}})
		c := &http.Client{Transport: b.dialer().Transport(wire.OriginService)}
		if code, _, err := get(t, c, "http://"+b.upstream+"/v1"); err != nil || code != 200 {
			t.Fatalf("the model's endpoint: %d %v", code, err)
		}
		// The same endpoint from a tool's proxy faces the policy.
		b.policy.Store(&egress.Policy{Services: []string{b.upstream}, Egress: config.Egress{Unknown: config.EgressAllow}})
		pc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(b.localProxy(t))}}
		if code, body, err := get(t, pc, "http://"+b.upstream+"/v1"); err != nil || code != 403 || !strings.Contains(body, "loopback") {
			t.Errorf("the endpoint from a tool: %d %q %v, want 403 loopback", code, body, err)
		}
	})

	t.Run("ProxyRefusedNameIsNeverResolved", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.policy.Store(&egress.Policy{Egress: config.Egress{Unknown: config.EgressRefuse, Allow: []string{"*.allowed.test"}}})
		pc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(b.localProxy(t))}}
		code, body, err := get(t, pc, "http://secret-data.exfil.test/")
		if err != nil || code != 403 || !strings.Contains(body, "egress.allow") || !strings.Contains(body, "refuse") {
			t.Fatalf("GET an unlisted host: %d %q %v, want a 403 naming egress.allow", code, body, err)
		}
		if _, err := pc.Get("https://other.exfil.test/"); err == nil || !strings.Contains(err.Error(), "Forbidden") {
			t.Errorf("CONNECT an unlisted host: %v, want Forbidden", err)
		}
		if n := b.lookups.Load(); n != 0 {
			t.Errorf("%d lookups: a refused name must never be resolved", n)
		}
		rs := b.rows(t, 2)
		for _, r := range rs {
			if r.decision != "refused" || r.origin != "proxy" {
				t.Errorf("audit %+v", r)
			}
		}
	})

	t.Run("ApproveWithoutApproverRefuses", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		pc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(b.localProxy(t))}}
		code, body, err := get(t, pc, "http://public.test/")
		if err != nil || code != 403 || !strings.Contains(body, "not available yet") {
			t.Errorf("default policy: %d %q %v, want a refusal saying approval is not available", code, body, err)
		}
	})

	t.Run("AllowedNameResolvingPrivateIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.policy.Store(&egress.Policy{Egress: config.Egress{Allow: []string{"inside.test", "public.test:80"}}})
		pc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(b.localProxy(t))}}
		code, body, err := get(t, pc, "http://inside.test/")
		if err != nil || code != 403 || !strings.Contains(body, "private") {
			t.Errorf("a name resolving to 10.1.2.3: %d %q %v, want 403 private", code, body, err)
		}
		if code, body, _ := get(t, pc, "http://public.test:8080/"); code != 403 || !strings.Contains(body, "egress.allow") {
			t.Errorf("another port of an allowed host: %d %q", code, body)
		}
	})

	t.Run("ProxyAllowedHostWorks", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		b.policy.Store(&egress.Policy{Egress: config.Egress{Allow: []string{b.upstream}}, AllowHosts: []string{b.upstream}})
		pc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(b.localProxy(t)), DisableKeepAlives: true}}
		code, body, err := get(t, pc, "http://"+b.upstream+"/plain")
		if err != nil || code != 200 || body != "upstream saw GET /plain" {
			t.Fatalf("absolute-form GET: %d %q %v", code, body, err)
		}
		if r := b.rows(t, 1)[0]; r.decision != "allowed" || r.method != "GET" || r.down == 0 {
			t.Errorf("audit %+v", r)
		}
	})

	t.Run("WrongTokenGets407", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		d := b.dialer()
		d.LeaseTokenFunc = func() string { return "not-the-token" }
		_, err := d.DialFunc("builtin:choir.web.fetch")(context.Background(), "tcp", "public.test:443")
		var re *wire.RefusedError
		if !errorsAs(err, &re) || re.Status != 407 {
			t.Fatalf("wrong token: %v, want 407", err)
		}
	})

	t.Run("ServiceRoutesSeeTheCaller", func(t *testing.T) {
		t.Parallel()
		b := setup(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			c, ok := egress.CallerFrom(r.Context())
			fmt.Fprintf(w, "%v %s %s %s", ok, c.AgentID, c.SessionID, r.URL.Path)
		}))
		conn, err := b.dialer().Open(context.Background(), wire.Hello{Origin: "builtin:llm"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /svc/llm/v1/models HTTP/1.1\r\nHost: choird\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		if want := "true " + agentID + " " + b.session + " /svc/llm/v1/models"; string(body) != want {
			t.Errorf("service route saw %q, want %q", body, want)
		}
	})

	t.Run("ServiceRoutesWithoutHandlerAre404", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil)
		conn, err := b.dialer().Open(context.Background(), wire.Hello{Origin: "proxy"})
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		fmt.Fprintf(conn, "GET /svc/x HTTP/1.1\r\nHost: choird\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil || resp.StatusCode != 404 {
			t.Errorf("/svc/ without services: %v %v", resp, err)
		}
	})
}

func errorsAs(err error, target any) bool { return err != nil && errors.As(err, target) }
