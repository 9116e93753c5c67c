package agent

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
)

// TestMCPServerGetsOnlyItsAgentsMCPSecrets runs the agent against a real
// choird whose agent has mcp_secrets ["mcp-token"] and a model key: an
// mcp.json (the repo is the model's to propose) that hands the model's
// key to a server fails the session's start, naming the secret; one that
// declares the MCP token starts, the server receiving that token.
func TestMCPServerGetsOnlyItsAgentsMCPSecrets(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	mcpSrv := sdk.NewServer(&sdk.Implementation{Name: "notes", Version: "1"}, nil)
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return mcpSrv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	u, _ := url.Parse(hs.URL)
	srv := llmtest.NewServer(t)
	d := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL(), Edit: func(c *config.Config, s config.Secrets) {
		m := c.Models["local"]
		m.Secret = "model-key"
		c.Models["local"] = m
		s["model-key"], s["mcp-token"] = "sk-model-canary", "mcp-token-value"
		a := c.Agents["assistant"]
		a.MCPSecrets = []string{"mcp-token"}
		c.Agents["assistant"] = a
		c.Web.AllowHosts = []string{u.Host}
	}})
	open := func(secret string) error {
		dir := t.TempDir()
		manifest := `{"servers": {"notes": {"url": "` + hs.URL + `", "secret": "` + secret + `"}}}`
		if err := os.WriteFile(filepath.Join(dir, "mcp.json"), []byte(manifest), 0o600); err != nil {
			t.Fatal(err)
		}
		id, token := d.StartSession(t, "assistant")
		s, err := openSession(context.Background(), Options{Socket: d.Socket(), AgentID: "assistant", SessionID: id,
			LeaseToken: token, Workspace: d.Workspace("main"), ChoirDir: dir})
		if err == nil {
			s.close()
		}
		if _, serr := d.AgentStop(context.Background(), control.Scope{Admin: true, Actor: "test"}, "assistant"); serr != nil {
			t.Fatal(serr)
		}
		return err
	}
	err := open("model-key")
	if err == nil || !strings.Contains(err.Error(), `"model-key"`) || !strings.Contains(err.Error(), "mcp_secrets") {
		t.Fatalf("a server declaring the model's key: err = %v, want a refusal naming the secret and mcp_secrets", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, a := range seen {
		if strings.Contains(a, "sk-model-canary") {
			t.Fatalf("the MCP server received the model's key")
		}
	}
	mu.Unlock()
	if err := open("mcp-token"); err != nil {
		t.Fatalf("a server declaring one of mcp_secrets: %v", err)
	}
	mu.Lock()
	if len(seen) == 0 || seen[0] != "Bearer mcp-token-value" {
		t.Errorf("the MCP server saw Authorization %q, want its token", seen)
	}
}
