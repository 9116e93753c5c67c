package notion_test

import (
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/notion"
	"github.com/choirhq/choir/agent/tool/notion/notiontest"
	"github.com/choirhq/choir/agent/tool/tooltest"
)

// TestQueryThroughTheGatewayHoldsNoSecret: with the integration behind
// choird's egress gateway's service route (here a local stand-in that
// adds the secret and passes the call on to the fake Notion, as the route
// does), the tool needs no secret and sends no Authorization of its own.
func TestQueryThroughTheGatewayHoldsNoSecret(t *testing.T) {
	t.Parallel()
	fake := notiontest.NewServer(t)
	var mu sync.Mutex
	var sent []string
	target, _ := url.Parse(fake.URL())
	route := httptest.NewServer(&httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {
		mu.Lock()
		sent = append(sent, pr.In.Header.Get("Authorization"))
		mu.Unlock()
		pr.SetURL(target)
		pr.Out.URL.Path = strings.TrimPrefix(pr.In.URL.Path, "/svc/notion/notes")
		pr.Out.Header.Set("Authorization", "Bearer "+fake.Token)
	}})
	t.Cleanup(route.Close)
	b := tooltest.Setup(t, builtin.Config{Notion: notion.Config{Gateway: true,
		EndpointFunc: func() string { return route.URL + "/svc/notion/notes" }}})
	b.Env.SecretFunc = func(string) (string, bool) { return "", false }

	r := b.MustCall(t, notion.Name, `{"action": "search", "query": "travel"}`)
	if r.Status != tool.StatusSuccess {
		t.Fatalf("search through the gateway: %s", r.Summary)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(sent) == 0 || strings.Join(sent, "") != "" {
		t.Errorf("the tool sent Authorization %q, want none", sent)
	}
	if reqs := fake.Requests(); len(reqs) == 0 || reqs[0] != "POST /search" {
		t.Errorf("Notion saw %q", reqs)
	}
}
