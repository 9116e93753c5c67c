package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// choirDir returns a fresh Choir directory with a path short enough for a
// Unix socket.
func choirDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "adm")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return filepath.Join(dir, ".choir.d")
}

var started = time.Date(2026, 11, 21, 9, 0, 0, 0, time.UTC)

func sampleStatus() admin.StatusResponse {
	hb := started.Add(time.Hour)
	return admin.StatusResponse{
		Choird:        admin.DaemonStatus{Version: "0.1.0", PID: 4242, StartedAt: started, UptimeMS: 3_600_000},
		Postgres:      admin.PostgresStatus{Reachable: true, ServerVersion: "15.20"},
		ConfigVersion: 7,
		Agents: []admin.AgentStatus{
			{AgentID: "alice", State: admin.AgentActive, SessionID: "6f1c2b0e-3b8e-4c1e-9d36-0d7a2b1f9e11", Runtime: "docker", StartedAt: &started, LastHeartbeatAt: &hb},
			{AgentID: "bob", State: admin.AgentStopped},
		},
	}
}

type echoIn struct {
	Name string `json:"name"`
}

func (e echoIn) Validate() error {
	if e.Name == "" {
		return errors.New("$.name: required")
	}
	return nil
}

type echoOut struct {
	Greeting string `json:"greeting"`
	UID      uint32 `json:"uid"`
}

type bundle struct {
	path   string
	client *admin.Client
}

// start serves a Mux with the status endpoint and a few test endpoints.
func start(t *testing.T, opts admin.ServeOptions) bundle {
	t.Helper()
	path := admin.SocketPath(choirDir(t))
	ln, err := admin.Listen(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	m := admin.NewMux(nil)
	admin.Handle(m, http.MethodGet, admin.PathStatus, func(context.Context, admin.Empty) (admin.StatusResponse, error) {
		return sampleStatus(), nil
	})
	admin.Handle(m, http.MethodPost, "/v1/echo", func(ctx context.Context, in echoIn) (echoOut, error) {
		p, _ := admin.PeerFromContext(ctx)
		return echoOut{Greeting: "hello " + in.Name, UID: p.UID}, nil
	})
	admin.Handle(m, http.MethodPost, "/v1/agents/{id}/stop", func(ctx context.Context, _ admin.Empty) (admin.Empty, error) {
		id := admin.PathValue(ctx, "id")
		switch id {
		case "ghost":
			return admin.Empty{}, fmt.Errorf("agent %s: %w", id, wire.ErrNotFound)
		case "broken":
			return admin.Empty{}, errors.New("pq: connection reset by peer at 10.0.0.5")
		}
		return admin.Empty{}, nil
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- admin.Serve(ctx, ln, m, opts) }()
	c := admin.NewClient(path)
	t.Cleanup(func() {
		c.Close()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return bundle{path: path, client: c}
}

func TestAdmin(t *testing.T) {
	t.Parallel()

	t.Run("StatusRoundTrips", func(t *testing.T) {
		t.Parallel()
		b := start(t, admin.ServeOptions{})
		got, err := b.client.Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if want := sampleStatus(); !reflect.DeepEqual(got, want) {
			t.Errorf("got %+v\nwant %+v", got, want)
		}
		if got.Choird.Uptime() != time.Hour {
			t.Errorf("uptime %s", got.Choird.Uptime())
		}
	})

	t.Run("SocketIsPrivate", func(t *testing.T) {
		t.Parallel()
		b := start(t, admin.ServeOptions{})
		fi, err := os.Lstat(b.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("mode %s", fi.Mode())
		}
	})

	t.Run("HandlerSeesThePeer", func(t *testing.T) {
		t.Parallel()
		b := start(t, admin.ServeOptions{})
		var out echoOut
		if err := b.client.Do(t.Context(), http.MethodPost, "/v1/echo", echoIn{Name: "ann"}, &out); err != nil {
			t.Fatal(err)
		}
		if out.Greeting != "hello ann" || int(out.UID) != os.Getuid() {
			t.Errorf("got %+v", out)
		}
	})

	t.Run("OtherUIDIsRefused", func(t *testing.T) {
		t.Parallel()
		// Admit only a uid this test does not run as: the peer check
		// must read the real uid and refuse.
		b := start(t, admin.ServeOptions{AllowUIDs: []uint32{54321}})
		_, err := b.client.Status(t.Context())
		var e *wire.Error
		if !errors.Is(err, wire.ErrPermissionDenied) || !errors.As(err, &e) ||
			!strings.Contains(e.Message, fmt.Sprintf("uid %d may not", os.Getuid())) {
			t.Errorf("got %v", err)
		}
	})

	t.Run("ErrorsHaveCodes", func(t *testing.T) {
		t.Parallel()
		b := start(t, admin.ServeOptions{})
		for _, c := range []struct {
			name, method, path string
			in                 any
			sentinel           error
			want               string
		}{
			{"UnknownPath", http.MethodGet, "/v1/nope", nil, wire.ErrNotFound, "no such admin endpoint GET /v1/nope"},
			{"WrongMethod", http.MethodDelete, admin.PathStatus, nil, wire.ErrBadRequest, "method DELETE not allowed"},
			{"UnknownField", http.MethodPost, "/v1/echo", map[string]string{"name": "x", "nmae": "y"}, wire.ErrBadRequest, "$.nmae: unknown field"},
			{"FailsValidation", http.MethodPost, "/v1/echo", map[string]string{}, wire.ErrBadRequest, "$.name: required"},
			{"HandlerNotFound", http.MethodPost, "/v1/agents/ghost/stop", nil, wire.ErrNotFound, "agent ghost"},
			{"HandlerInternal", http.MethodPost, "/v1/agents/broken/stop", nil, wire.ErrInternal, "see choird's log"},
		} {
			t.Run(c.name, func(t *testing.T) {
				err := b.client.Do(t.Context(), c.method, c.path, c.in, nil)
				if !errors.Is(err, c.sentinel) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("got %v, want %v containing %q", err, c.sentinel, c.want)
				}
				if strings.Contains(fmt.Sprint(err), "10.0.0.5") {
					t.Errorf("internal detail leaked: %v", err)
				}
			})
		}
		if err := b.client.Do(t.Context(), http.MethodPost, "/v1/agents/alice/stop", nil, nil); err != nil {
			t.Errorf("valid call: %v", err)
		}
	})

	t.Run("ErrorBodyForm", func(t *testing.T) {
		t.Parallel()
		b := start(t, admin.ServeOptions{})
		hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", b.path)
		}}}
		defer hc.CloseIdleConnections()
		res, err := hc.Get("http://choird/v1/nope")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != 404 || string(body) != `{"error":"no such admin endpoint GET /v1/nope","code":"not_found"}` {
			t.Errorf("got %d %s", res.StatusCode, body)
		}
	})

	t.Run("SecondDaemonIsRefusedNamingTheFirst", func(t *testing.T) {
		t.Parallel()
		b := start(t, admin.ServeOptions{})
		_, err := admin.Listen(t.Context(), b.path)
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) {
			t.Errorf("got %v", err)
		}
	})
}

func TestClientWhenChoirdIsNotRunning(t *testing.T) {
	t.Parallel()

	t.Run("NoSocket", func(t *testing.T) {
		t.Parallel()
		path := admin.SocketPath(choirDir(t))
		c := admin.NewClient(path)
		defer c.Close()
		_, err := c.Status(t.Context())
		want := "choird is not running (no socket at " + path + "); start it with: choird"
		if !errors.Is(err, admin.ErrNotRunning) || err.Error() != want {
			t.Errorf("got %q, want %q", err, want)
		}
	})

	t.Run("StaleSocket", func(t *testing.T) {
		t.Parallel()
		path := admin.SocketPath(choirDir(t))
		os.MkdirAll(filepath.Dir(path), 0o700)
		ln, err := net.Listen("unix", path)
		if err != nil {
			t.Fatal(err)
		}
		ln.(*net.UnixListener).SetUnlinkOnClose(false)
		ln.Close()
		c := admin.NewClient(path)
		defer c.Close()
		_, err = c.Status(t.Context())
		want := "choird is not running (socket " + path + " refuses connections); start it with: choird"
		if !errors.Is(err, admin.ErrNotRunning) || err.Error() != want {
			t.Errorf("got %q, want %q", err, want)
		}
	})
}
