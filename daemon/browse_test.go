package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
)

// TestBrowseThroughExecuteHostTool browses a local page through
// EXECUTE_HOST_TOOL: the page's text comes back, a screenshot lands in the
// session's workspace, and a file: URL is refused with a structured error.
func TestBrowseThroughExecuteHostTool(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("chromium"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed: run scripts/testdeps.sh")
		}
		t.Skip("skipped: chromium is not installed (scripts/testdeps.sh installs it)")
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<html><head><title>T</title></head><body><main id="m"></main>
<script>document.getElementById("m").textContent = "hello from the browser";</script></body></html>`)
	}))
	t.Cleanup(srv.Close)
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(cfg *config.Config, _ config.Secrets) {
		// The agent's own allowlist opens the site; the global one does not.
		a := cfg.Agents["assistant"]
		a.Web.AllowHosts = []string{strings.TrimPrefix(srv.URL, "http://")}
		cfg.Agents["assistant"] = a
		// The test's session sends no heartbeats: it must outlive a
		// browser's start on a loaded machine.
		cfg.CrashDetectionThresholdMS = 10 * 60 * 1000
	}})
	_, client, _ := d.HelloSession(t, "assistant")
	ctx := context.Background()
	dyn, err := client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{})
	var dc rpc.DynamicConfig
	if err != nil || json.Unmarshal(dyn.Config, &dc) != nil ||
		!slices.Equal(dc.Web.AllowHosts, []string{strings.TrimPrefix(srv.URL, "http://")}) {
		t.Errorf("the agent's dynamic config opens %v (%v), want its own allow_hosts (choir.web.fetch reads it)", dc.Web.AllowHosts, err)
	}
	call := func(id, input string) rpc.ExecuteHostToolResponse {
		t.Helper()
		resp, err := client.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.web.browse", CallID: id,
			Input: json.RawMessage(input)})
		if err != nil {
			t.Fatalf("EXECUTE_HOST_TOOL %s: %v", input, err)
		}
		return resp
	}

	resp := call("b1", `{"url": "`+srv.URL+`/"}`)
	var out struct {
		Text string `json:"text"`
		File string `json:"file"`
	}
	if err := json.Unmarshal(resp.Output, &out); err != nil || resp.Status != rpc.ToolSuccess || out.Text != "hello from the browser" {
		t.Fatalf("text mode: %s %s", resp.Status, resp.Output)
	}
	resp = call("b2", `{"mode": "screenshot"}`)
	if err := json.Unmarshal(resp.Output, &out); err != nil || resp.Status != rpc.ToolSuccess {
		t.Fatalf("screenshot: %s %s", resp.Status, resp.Output)
	}
	ws := d.Snapshot().Config.Workspaces["main"].Path
	if fi, err := os.Stat(filepath.Join(ws, out.File)); err != nil || fi.Size() == 0 || !strings.HasPrefix(out.File, ".choirtmp/send/") {
		t.Fatalf("screenshot file %q: %v", out.File, err)
	}
	resp = call("b3", `{"url": "file:///etc/passwd"}`)
	var f struct {
		Error string `json:"error"`
		Fix   string `json:"fix"`
	}
	if err := json.Unmarshal(resp.Output, &f); err != nil || resp.Status != rpc.ToolError || f.Error != "refused_scheme" || f.Fix == "" {
		t.Fatalf("file URL: %s %s", resp.Status, resp.Output)
	}

	// The agent stops: its browser context is disposed of.
	if got := d.BrowserAgents(); !slices.Equal(got, []string{"assistant"}) {
		t.Fatalf("browser contexts %v", got)
	}
	if _, err := client.TerminateSelf(ctx, rpc.TerminateSelfRequest{Reason: "done"}); err != nil {
		t.Fatal(err)
	}
	// At once, not on the reaper's next sweep: the page dies with the
	// session.
	if got := d.BrowserAgents(); len(got) > 0 {
		t.Fatalf("browser contexts %v when the session's end was acknowledged", got)
	}
}
