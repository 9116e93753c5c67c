package svc_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
)

// TestMCPServerGetsItsSecretBelowItsURL forwards an agent's MCP calls to
// the URL its config names, with the server's secret as the bearer
// token, at that URL or below it; refuses a path that would climb out of
// it, a server another agent's config names, and a server whose secret
// left the agent's mcp_secrets.
func TestMCPServerGetsItsSecretBelowItsURL(t *testing.T) {
	t.Parallel()
	b := setup(t)
	type seen struct{ uri, auth string }
	got := make(chan seen, 10)
	server := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- seen{r.URL.RequestURI(), r.Header.Get("Authorization")}
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{}`)
	}))
	t.Cleanup(server.Close)
	b.setConfig(func(c *config.Config) {
		c.Agents["ada"] = config.Agent{MCPSecrets: []string{"mcp-key"},
			MCPServers: map[string]config.MCPServer{"pay": {URL: server.URL + "/mcp?team=7", Secret: "mcp-key"}}}
	})
	call := func(t *testing.T, agent, method, path string) int {
		t.Helper()
		req, _ := http.NewRequest(method, b.gateway(t, agent).URL+path, strings.NewReader(`{"jsonrpc":"2.0"}`))
		req.Header.Set("Authorization", "Bearer agent-tried")
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		return res.StatusCode
	}

	t.Run("AtAndBelowTheURL", func(t *testing.T) {
		for _, tc := range []struct{ method, path, want string }{
			{"POST", "/svc/mcp/pay", "/mcp?team=7"},
			{"GET", "/svc/mcp/pay/", "/mcp?team=7"},
			{"DELETE", "/svc/mcp/pay/sessions/s-1?x=y", "/mcp/sessions/s-1?x=y"},
		} {
			if code := call(t, "ada", tc.method, tc.path); code != http.StatusOK {
				t.Fatalf("%s %s: status %d", tc.method, tc.path, code)
			}
			if s := <-got; s.uri != tc.want || s.auth != "Bearer mcp-secret" {
				t.Errorf("%s %s reached the server as %s with %q", tc.method, tc.path, s.uri, s.auth)
			}
		}
	})
	t.Run("NoClimbingOut", func(t *testing.T) {
		for _, path := range []string{"/svc/mcp/pay/../admin", "/svc/mcp/pay/a/%2e%2e/b", "/svc/mcp/pay/a%2Fb", "/svc/mcp/pay/.hidden"} {
			if code := call(t, "ada", "POST", path); code != http.StatusNotFound {
				t.Errorf("POST %s: status %d, want 404", path, code)
			}
		}
		if code := call(t, "ada", "PUT", "/svc/mcp/pay"); code != http.StatusNotFound {
			t.Errorf("PUT: status %d, want 404", code)
		}
	})
	t.Run("AnotherAgentsServer", func(t *testing.T) {
		if code := call(t, "bob", "POST", "/svc/mcp/pay"); code != http.StatusNotFound {
			t.Errorf("bob calling ada's server: status %d, want 404", code)
		}
	})
	t.Run("SecretLeftMCPSecrets", func(t *testing.T) {
		b.setConfig(func(c *config.Config) {
			a := c.Agents["ada"]
			a.MCPSecrets = nil
			c.Agents["ada"] = a
		})
		if code := call(t, "ada", "POST", "/svc/mcp/pay"); code != http.StatusForbidden {
			t.Errorf("a secret no longer in mcp_secrets: status %d, want 403", code)
		}
	})
	select {
	case s := <-got:
		t.Errorf("a refused call reached the server: %s", s.uri)
	default:
	}
}
