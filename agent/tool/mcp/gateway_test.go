package mcp_test

import (
	"context"
	"net"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/agent/tool/manifest"
	"github.com/choirhq/choir/agent/tool/mcp"
	"github.com/choirhq/choir/rpc/egress"
)

// TestHTTPServerThroughTheGatewayHoldsNoToken: with choird's egress
// gateway, a server that declares a secret is reached at its service
// route (here a local stand-in that adds the token and passes the call on
// to the server, as the route does), never at the URL of mcp.json, and
// the agent holds no token: SecretFunc is never asked. A secret outside
// mcp_secrets still keeps the server from starting.
func TestHTTPServerThroughTheGatewayHoldsNoToken(t *testing.T) {
	t.Parallel()
	server, _ := url.Parse(httpServer(t, "s3cret"))
	var mu sync.Mutex
	var paths, auths []string
	route := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		mu.Lock()
		paths, auths = append(paths, pr.In.URL.Path), append(auths, pr.In.Header.Get("Authorization"))
		mu.Unlock()
		pr.SetURL(server)
		pr.Out.URL.Path = "/"
		pr.Out.Header.Set("Authorization", "Bearer s3cret")
	}})
	t.Cleanup(route.Close)
	// The gateway's dialer: the service host is the gateway itself.
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr != egress.ServiceHost+":80" {
			t.Errorf("dialed %s, want only the gateway's service routes", addr)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, strings.TrimPrefix(route.URL, "http://"))
	}
	cfg := func(mcpSecrets ...string) mcp.Config {
		return mcp.Config{Gateway: true, DialFunc: dial, MCPSecrets: mcpSecrets,
			SecretFunc: func(name string) (string, bool) { t.Errorf("asked for secret %s", name); return "", false }}
	}
	m := manifest.MCP{Servers: map[string]manifest.MCPServer{"pay": {URL: "https://mcp.invalid/pay", Secret: "pay_token"}}}
	if _, err := setupWith(t, m, cfg()); err == nil || !strings.Contains(err.Error(), "mcp_secrets") {
		t.Fatalf("a secret outside mcp_secrets: err = %v, want a refusal naming mcp_secrets", err)
	}
	b, err := setupWith(t, m, cfg("pay_token"))
	if err != nil {
		t.Fatal(err)
	}
	out, _ := b.call(t, "pay.charge", `{"cents":100}`)
	if !strings.Contains(string(out.Result.Output), "charged 1") {
		t.Fatalf("pay.charge through the gateway = %+v", out.Result)
	}
	mu.Lock()
	defer mu.Unlock()
	for i, p := range paths {
		if p != "/svc/mcp/pay" || auths[i] != "" {
			t.Errorf("request %d reached the route at %s with Authorization %q", i, p, auths[i])
		}
	}
	if len(paths) == 0 {
		t.Error("nothing reached the route")
	}
}
