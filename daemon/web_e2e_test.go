package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestWebToolsAreAudited runs the real agent under the process runtime:
// its model searches (a Brave-protocol fake, with the key from
// secrets.json), fetches a local page and browses it, and every call is in
// choir_audit.tool_calls with the query or URL it was made with.
func TestWebToolsAreAudited(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("chromium"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed: run scripts/testdeps.sh")
		}
		t.Skip("skipped: chromium is not installed (scripts/testdeps.sh installs it)")
	}
	brave := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Subscription-Token") != "brave-test-key" {
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprint(w, `{"type":"ErrorResponse","error":{"status":401,"code":"SUBSCRIPTION_TOKEN_INVALID","detail":"bad token"}}`)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"type":"search","query":{"original":"q"},"web":{"type":"search","results":[`+
			`{"title":"Choir","url":"https://example.com/","description":"agents","age":"1 day ago","profile":{"name":"Example"}}]}}`)
	}))
	t.Cleanup(brave.Close)
	site := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><body><main><p>the page text</p></main></body></html>`)
	}))
	t.Cleanup(site.Close)

	call := func(name string, args map[string]any) llmtest.Call {
		b, _ := json.Marshal(args)
		return llmtest.Call{Name: name, Arguments: string(b)}
	}
	srv := llmtest.NewServer(t,
		llmtest.ToolCalls(call("choir.web.search", map[string]any{"query": "choir agents", "count": 3}),
			call("choir.web.fetch", map[string]any{"url": site.URL + "/fetched"}),
			call("choir.web.browse", map[string]any{"url": site.URL + "/browsed"})),
		llmtest.Text("done"),
		llmtest.Text("The agent searched, fetched and browsed."), // the session summary at the stop
	)
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{ModelEndpoint: srv.BaseURL(),
		Daemon: daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent")},
		Edit: func(cfg *config.Config, s config.Secrets) {
			choirdtest.FastHeartbeat(cfg, nil)
			cfg.Search = map[string]config.SearchProvider{"brave": {Secret: "brave-test-key", Endpoint: brave.URL + "/res/v1"}}
			s["brave-test-key"] = "brave-test-key"
			cfg.Web.AllowHosts = []string{strings.TrimPrefix(site.URL, "http://")}
		}})
	defer d.StopAgents(t)
	if code, _, errs := choirctltest.Run(t, d.Home, "agent", "start", "assistant", "--dm", "console"); code != 0 {
		t.Fatalf("start: %s", errs)
	}
	st := d.WaitState(t, "assistant", admin.AgentActive)
	if _, err := d.Push(st.SessionID, choirdtest.UserMessage("look it up")); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"choir.web.search": "choir agents", "choir.web.fetch": site.URL + "/fetched",
		"choir.web.browse": site.URL + "/browsed"}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		rows, err := d.Pool().Query(context.Background(), `SELECT tool, outcome, input::text FROM choir_audit.tool_calls
			WHERE agent_id = 'assistant' AND tool LIKE 'choir.web.%'`)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]string{}
		for rows.Next() {
			var tool, outcome, input string
			if err := rows.Scan(&tool, &outcome, &input); err != nil {
				t.Fatal(err)
			}
			if outcome != "running" {
				got[tool] = outcome + " " + input
			}
		}
		rows.Close()
		done := len(got) == len(want)
		for tool, arg := range want {
			if done && (!strings.HasPrefix(got[tool], "success ") || !strings.Contains(got[tool], arg)) {
				t.Fatalf("audit of %s: %q, want success with %q", tool, got[tool], arg)
			}
		}
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("audit after two minutes: %q", got)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
