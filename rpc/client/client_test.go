package client_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestNew(t *testing.T) {
	t.Parallel()
	token, _ := rpc.NewLeaseToken()
	base := client.Options{SessionID: "00000000-0000-0000-0000-000000000001", LeaseToken: token}
	for _, c := range []struct {
		name    string
		edit    func(*client.Options)
		wantErr string
	}{
		{"UDSIsTheDefault", func(o *client.Options) {}, ""},
		{"HTTPSEndpoint", func(o *client.Options) { o.ControlPlane, o.Endpoint = "http", "https://choird.internal:9400" }, ""},
		{"PlaintextToLoopback", func(o *client.Options) { o.ControlPlane, o.Endpoint = "http", "http://127.0.0.1:9400" }, ""},
		{"PlaintextBeyondLoopbackRefused", func(o *client.Options) { o.ControlPlane, o.Endpoint = "http", "http://10.0.0.2:9400" }, "only to a loopback"},
		{"EndpointWithPathRefused", func(o *client.Options) { o.ControlPlane, o.Endpoint = "http", "https://h:1/api" }, "want https://host:port"},
		{"UnknownTransportRefused", func(o *client.Options) { o.ControlPlane = "carrier-pigeon" }, "want uds or http"},
		{"MissingCACertRefused", func(o *client.Options) {
			o.ControlPlane, o.Endpoint, o.CACert = "http", "https://h:1", "/nonexistent/ca.pem"
		}, "read CA certificate"},
		{"MissingTokenRefused", func(o *client.Options) { o.LeaseToken = "" }, "lease token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o := base
			c.edit(&o)
			cl, err := client.New(o)
			if c.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				cl.Close()
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("got %v, want %q", err, c.wantErr)
			}
		})
	}
}

// TestErrorResponses answers a call with each kind of error response: the
// error form comes back as its *wire.Error, and any other body (a proxy's
// HTML page, plain text) as an *wire.Error of its status's class.
func TestErrorResponses(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		status       int
		body         string
		want         error
		wantContains string
		retryAfter   time.Duration
	}{
		{"ErrorForm", http.StatusTooManyRequests, `{"error":"slow down","code":"rate_limited","retry_after_ms":250}`, wire.ErrRateLimited, "slow down", 250 * time.Millisecond},
		{"UnknownCodeKeptAsSent", http.StatusBadGateway, `{"error":"odd","code":"from_the_future"}`, nil, "from_the_future: odd", 0},
		{"HTMLPage", http.StatusServiceUnavailable, "<html>maintenance</html>", wire.ErrUnavailable, "HTTP 503 with a body that is not an error: <html>maintenance</html>", 0},
		{"NotFoundIsNotUnknownVerb", http.StatusNotFound, "404 page not found\n", wire.ErrNotFound, "not_found: HTTP 404", 0},
		{"ErrorFormWithoutCode", http.StatusForbidden, `{"error":"no"}`, wire.ErrPermissionDenied, "not an error", 0},
		{"UnmappedStatus", http.StatusTeapot, "short and stout", wire.ErrInternal, "HTTP 418", 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
				w.WriteHeader(c.status)
				io.WriteString(w, c.body)
			}))
			defer srv.Close()
			token, _ := rpc.NewLeaseToken()
			cl, err := client.New(client.Options{ControlPlane: client.TransportHTTP, Endpoint: srv.URL,
				SessionID: "00000000-0000-0000-0000-000000000001", LeaseToken: token, Retries: -1})
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			_, err = cl.ReportStatus(t.Context(), rpc.ReportStatusRequest{Lane: "edge", State: "EDGE_IDLE"})
			var e *wire.Error
			if !errors.As(err, &e) || !strings.Contains(err.Error(), c.wantContains) || e.RetryAfter != c.retryAfter {
				t.Fatalf("got %v (%#v), want an *wire.Error containing %q, retry after %v", err, e, c.wantContains, c.retryAfter)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("got %v, want it to match %v", err, c.want)
			}
		})
	}
}
