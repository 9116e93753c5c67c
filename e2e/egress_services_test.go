package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/tool/notion/notiontest"
	"github.com/choirhq/choir/agent/tool/tts/ttstest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// The keys of the services, as secrets.json holds them and as the fake
// services accept them.
const (
	braveKey = "brave-key-e2e"
	mcpKey   = "mcp-token-e2e"
)

// TestServicesGoThroughTheGateway is issue 34 for the agent's other
// built-in clients: an agent that choird starts (the process runtime
// hands it the egress gateway) searches, speaks, reads Notion and calls an
// MCP server over HTTP, each through the gateway's service route. Each
// fake service gets its key from choird and the agent holds none:
// GET_SECRETS refuses every one of them, naming the gateway. The search
// and the speech are metered in the spend ledger and counted once in
// choir_audit.usage, though the agent's log records them too.
func TestServicesGoThroughTheGateway(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	brave := newBraveService(t)
	eleven := ttstest.NewServer(t)
	notes := notiontest.NewServer(t)
	pay := newMCPService(t)
	toolOK := func(want string) func(testing.TB, *llmtest.Request) {
		return func(t testing.TB, r *llmtest.Request) {
			if m := r.Last(); m.Role != "tool" || !strings.Contains(m.Content, want) {
				t.Errorf("the model got %s %q, want a tool result containing %q", m.Role, m.Content, want)
			}
		}
	}
	llm := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{ID: "s1", Name: "choir.web.search", Arguments: `{"query": "choir agents"}`}),
		llmtest.ToolCalls(llmtest.Call{ID: "t1", Name: "choir.tts.speak", Arguments: `{"text": "Sunny today."}`}).
			Expect(toolOK("https://example.com/choir")),
		llmtest.ToolCalls(llmtest.Call{ID: "n1", Name: "choir.notion.query", Arguments: `{"action": "search", "query": "travel"}`}).
			Expect(toolOK("voice_profile")),
		llmtest.ToolCalls(llmtest.Call{ID: "m1", Name: "pay.charge", Arguments: `{"cents": 100}`}).
			Expect(toolOK(notiontest.PageID)),
		llmtest.Text("All four went through.").Expect(toolOK("charged 100")),
		summaryReply,
	)
	global := repoWith(t, map[string]string{
		"Dockerfile.base":       "ARG CHOIR_OS_IMAGE=scratch\nFROM ${CHOIR_OS_IMAGE}\n",
		"identity/USER.md":      "# The user\n",
		"identity/SOUL.md":      "global soul\n",
		"identity/SOUL-CORE.md": "global core soul\n",
	})
	agentRepo := repoWith(t, map[string]string{
		// The URL here is never used: choird sends the calls to the one
		// agents.<id>.mcp_servers names.
		".choir/mcp.json": `{"servers": {"pay": {"url": "https://mcp.invalid/pay", "secret": "mcp-token"}}}`,
	})
	e := newTGEnvSecrets(t, llm, func(c *config.Config, secrets config.Secrets) {
		c.Search = map[string]config.SearchProvider{"brave": {Secret: "brave-key", Endpoint: brave.URL + "/res/v1"}}
		c.TTS = map[string]config.TTS{"eleven": {Provider: "elevenlabs", ModelID: "eleven_multilingual_v2",
			Endpoint: eleven.Endpoint(), Secret: "eleven-key"}}
		c.VoiceProfiles = map[string]config.VoiceProfile{"calm": {TTS: "eleven", VoiceID: "v-calm", OutputFormat: "opus_48000_64",
			VoiceSettings: config.VoiceSettings{Speed: 1}}}
		c.NotionIntegrations = map[string]config.NotionIntegration{"notes": {Secret: "notion-key", Endpoint: notes.URL()}}
		secrets["brave-key"], secrets["eleven-key"], secrets["notion-key"], secrets["mcp-token"] = braveKey, eleven.Key, notes.Token, mcpKey
		c.GlobalRepo = config.Repo{URL: global, Ref: "main"}
		a := c.Agents["assistant"]
		a.Defaults.VoiceProfile, a.Defaults.Notion = "calm", "notes"
		a.Repo = config.Repo{URL: agentRepo, Ref: "main"}
		a.MCPSecrets = []string{"mcp-token"}
		a.MCPServers = map[string]config.MCPServer{"pay": {URL: pay.srv.URL + "/mcp", Secret: "mcp-token"}}
		// The search's results are strangers' words; what the lane may
		// do after reading them is another test's business.
		a.UntrustedInput = config.UntrustedInput{Mode: config.UntrustedAllow}
		c.Agents["assistant"] = a
	})
	e.dumpLogsOnFailure(t, "assistant")
	d := choirdtest.Start(t, e.options(t))
	sc := control.Scope{Admin: true, Actor: actorAdmin}
	if _, err := d.AgentStart(ctx, sc, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	sessionID := liveSession(t, d.Pool(), "assistant")
	e.bot.SendText(userAlice, "search, speak, read my notes and pay")
	waitSentTo(t, e.bot, userAlice, "the reply", containsText("All four went through."))
	if _, err := d.AgentStop(ctx, sc, "assistant"); err != nil {
		t.Fatal(err)
	}

	t.Run("EachServiceGotItsKey", func(t *testing.T) {
		if got := brave.keys(); len(got) != 1 || got[0] != braveKey {
			t.Errorf("Brave saw keys %q, want choird's once", got)
		}
		if c := eleven.Calls(); len(c) != 1 || c[0].Key != eleven.Key {
			t.Errorf("the TTS provider accepted %+v, want one call with choird's key", c)
		}
		auths := notes.Authorizations()
		for i, a := range auths {
			if a != "Bearer "+notes.Token {
				t.Errorf("Notion request %d carried %q, want choird's secret", i, a)
			}
		}
		if len(auths) == 0 {
			t.Error("Notion saw no request")
		}
		paths, auths := pay.seen()
		for i, a := range auths {
			if a != "Bearer "+mcpKey || paths[i] != "/mcp" {
				t.Errorf("MCP request %d reached %s with %q, want /mcp with choird's token", i, paths[i], a)
			}
		}
		if len(auths) == 0 {
			t.Error("the MCP server saw no request")
		}
	})
	t.Run("MeteredOnceEach", func(t *testing.T) {
		for _, kind := range []string{"search", "tts"} {
			waitUntil(t, kind+" settled in the spend ledger", func() bool {
				var n int
				if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM choir_control.spend
					WHERE session_id = $1 AND kind = $2 AND state = 'settled' AND outcome = 'ok'`, sessionID, kind).Scan(&n); err != nil {
					t.Fatal(err)
				}
				return n == 1
			})
			var n int
			if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM choir_audit.usage WHERE session_id = $1 AND kind = $2`,
				sessionID, kind).Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("choir_audit.usage counts %d %s uses, want 1", n, kind)
			}
		}
	})
	t.Run("SecretsRefused", func(t *testing.T) {
		agent := d.StandIn(t, "assistant", admin.StartOverrides{})
		defer agent.Terminate(t, "test over")
		for _, name := range []string{"brave-key", "eleven-key", "notion-key", "mcp-token"} {
			if slices.Contains(agent.Hello.ResourceBindings.Secrets, name) {
				t.Errorf("the hello lists %s", name)
			}
			_, err := agent.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{name}})
			if !errors.Is(err, wire.ErrPermissionDenied) || !strings.Contains(err.Error(), "egress gateway") {
				t.Errorf("GET_SECRETS %s: %v, want a refusal naming the egress gateway", name, err)
			}
		}
	})
	llm.Done()
}

// braveService speaks the Brave Search API's web search and records the
// key of each query.
type braveService struct {
	*httptest.Server
	mu   sync.Mutex
	seen []string
}

func newBraveService(t *testing.T) *braveService {
	b := &braveService{}
	b.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.seen = append(b.seen, r.Header.Get("X-Subscription-Token"))
		b.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path != "/res/v1/web/search" || r.Header.Get("X-Subscription-Token") != braveKey {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"type": "ErrorResponse", "error": {"status": 401, "code": "SUBSCRIPTION_TOKEN_INVALID", "detail": "bad token"}}`)
			return
		}
		fmt.Fprint(w, `{"query": {"original": "choir agents"}, "web": {"results": [
			{"title": "Choir", "url": "https://example.com/choir", "description": "Personal agents."}]}}`)
	}))
	t.Cleanup(b.Close)
	return b
}

func (b *braveService) keys() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.seen...)
}

// mcpService is a streamable-HTTP MCP server with one tool, charge, that
// answers only its bearer token.
type mcpService struct {
	srv   *httptest.Server
	mu    sync.Mutex
	paths []string
	auths []string
}

func newMCPService(t *testing.T) *mcpService {
	m := &mcpService{}
	s := sdk.NewServer(&sdk.Implementation{Name: "pay", Version: "1"}, nil)
	s.AddTool(&sdk.Tool{Name: "charge", Description: "Charge a card.",
		InputSchema: json.RawMessage(`{"type":"object","properties":{"cents":{"type":"integer"}},"required":["cents"]}`)},
		func(_ context.Context, r *sdk.CallToolRequest) (*sdk.CallToolResult, error) {
			var in struct {
				Cents int `json:"cents"`
			}
			if err := json.Unmarshal(r.Params.Arguments, &in); err != nil {
				return nil, err
			}
			return &sdk.CallToolResult{Content: []sdk.Content{&sdk.TextContent{Text: fmt.Sprintf("charged %d", in.Cents)}}}, nil
		})
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s }, nil)
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.mu.Lock()
		m.paths, m.auths = append(m.paths, r.URL.Path), append(m.auths, r.Header.Get("Authorization"))
		m.mu.Unlock()
		if r.Header.Get("Authorization") != "Bearer "+mcpKey {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *mcpService) seen() (paths, auths []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.paths...), append([]string(nil), m.auths...)
}
