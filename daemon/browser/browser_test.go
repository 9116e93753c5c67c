package browser_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/browser"
)

// site serves the test pages; private is a loopback server no allowlist
// opens, counting the requests that reach it.
type site struct {
	srv         *httptest.Server
	port        string
	private     *httptest.Server
	privateHits atomic.Int64
	hangHits    atomic.Int64
}

var (
	siteOnce sync.Once
	theSite  *site
)

// hugePage is about 200 KB of article text with boilerplate around it.
func hugePage() string {
	var b strings.Builder
	b.WriteString("<html><head><title>Huge</title></head><body><nav>menu</nav><main>")
	for i := 0; b.Len() < 200<<10; i++ {
		fmt.Fprintf(&b, "<p>Paragraph %d of the long article, with enough words to look like prose.</p>\n", i)
	}
	b.WriteString("</main><footer>foot</footer></body></html>")
	return b.String()
}

func testSite() *site {
	siteOnce.Do(func() {
		s := &site{}
		s.private = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			s.privateHits.Add(1)
			fmt.Fprint(w, "internal secrets")
		}))
		huge := hugePage()
		mux := http.NewServeMux()
		page := func(path, body string) {
			mux.HandleFunc(path, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html; charset=utf-8")
				fmt.Fprint(w, body)
			})
		}
		page("/js", `<html><head><title>JS page</title></head><body><nav>skip me</nav><main><div id="app"></div></main>
<script>document.getElementById("app").textContent = "Rendered by " + "script";</script>
<a href="/form">The form</a> <a href="https://example.com/x">Elsewhere</a></body></html>`)
		page("/form", `<html><body><main><input id="q" type="text"><button id="go" onclick="
  setTimeout(function(){var d=document.createElement('p');d.id='result';d.textContent='You typed: '+document.getElementById('q').value;document.body.appendChild(d);},50)">Go</button></main></body></html>`)
		page("/setcookie", `<html><body><script>document.cookie = "who=" + location.hash.slice(1) + "; path=/";</script><p>set</p></body></html>`)
		page("/showcookie", `<html><body><p id="c"></p><script>document.getElementById("c").textContent = "cookie:[" + document.cookie + "]";</script></body></html>`)
		page("/huge", huge)
		mux.HandleFunc("/subrequest", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<html><body><p>with an image</p><img src="%s/pixel.png"></body></html>`, s.private.URL)
		})
		// A page that tries the paths request interception may not see:
		// a web worker's fetch, a WebSocket and a new window.
		mux.HandleFunc("/sneaky", func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			priv := s.private.URL
			fmt.Fprintf(w, `<html><body><p>sneaky</p><script>
var pending = 2;
function one() { if (--pending === 0) { var d = document.createElement("div"); d.id = "done"; d.textContent = "done"; document.body.appendChild(d); } }
var wk = new Worker(URL.createObjectURL(new Blob(["fetch('%s/worker').then(function(){postMessage(1)}, function(){postMessage(0)})"])));
wk.onmessage = one;
try { var ws = new WebSocket("%s".replace("http", "ws") + "/ws"); ws.onerror = one; ws.onopen = one; } catch (e) { one(); }
try { window.open("%s/popup"); } catch (e) {}
</script></body></html>`, priv, priv, priv)
		})
		mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) {
			s.hangHits.Add(1)
			<-r.Context().Done()
		})
		mux.HandleFunc("/chain/{n}", func(w http.ResponseWriter, r *http.Request) {
			if r.PathValue("n") == "0" {
				http.Redirect(w, r, s.private.URL+"/admin", http.StatusFound)
				return
			}
			http.Redirect(w, r, "/chain/0", http.StatusFound)
		})
		s.srv = httptest.NewServer(mux)
		_, s.port, _ = net.SplitHostPort(s.srv.Listener.Addr().String())
		theSite = s
	})
	return theSite
}

// newWorker starts a worker whose allowlist opens the test site's port
// only. Without Chromium the test fails in CI and is skipped elsewhere.
func newWorker(t testing.TB, w config.Web) *browser.Worker {
	t.Helper()
	return newWorkerLogging(t, w, nil)
}

// newWorkerLogging is newWorker with more hosts opened, logging JSON
// lines to logs (nil discards them).
func newWorkerLogging(t testing.TB, w config.Web, logs io.Writer, hosts ...string) *browser.Worker {
	t.Helper()
	s := testSite()
	w.AllowHosts = append([]string{"127.0.0.1:" + s.port}, hosts...)
	var logger *slog.Logger
	if logs != nil {
		logger = slog.New(slog.NewJSONHandler(logs, nil))
	}
	wk, err := browser.New(browser.Config{SettingsFunc: func(string) config.Web { return w }, Logger: logger})
	if errors.Is(err, browser.ErrNoChromium) && os.Getenv("CI") != "true" {
		t.Skipf("skipped: %v (scripts/testdeps.sh installs it)", err)
	}
	if err != nil {
		t.Fatalf("start the browser worker: %v", err)
	}
	t.Cleanup(wk.Close)
	return wk
}

var (
	sharedOnce sync.Once
	shared     *browser.Worker
	sharedErr  error
)

// sharedWorker is one browser for the tests that do not crash it; each
// test uses its own agent ids.
func sharedWorker(t *testing.T) *browser.Worker {
	t.Helper()
	sharedOnce.Do(func() {
		s := testSite()
		w := config.Web{AllowHosts: []string{"127.0.0.1:" + s.port}, BrowseNavigationTimeoutMS: 20_000}
		shared, sharedErr = browser.New(browser.Config{SettingsFunc: func(string) config.Web { return w }})
	})
	if errors.Is(sharedErr, browser.ErrNoChromium) && os.Getenv("CI") != "true" {
		t.Skipf("skipped: %v (scripts/testdeps.sh installs it)", sharedErr)
	}
	if sharedErr != nil {
		t.Fatalf("start the browser worker: %v", sharedErr)
	}
	return shared
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared != nil {
		shared.Close()
	}
	if theSite != nil {
		theSite.srv.Close()
		theSite.private.Close()
	}
	os.Exit(code)
}

func browse(t testing.TB, w *browser.Worker, agent, ws, input string) (*browser.Output, *browser.Failure) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := w.Browse(ctx, agent, json.RawMessage(input), func(context.Context) (string, error) { return ws, nil })
	var f *browser.Failure
	if errors.As(err, &f) {
		return nil, f
	}
	if err != nil {
		t.Fatalf("browse %s: %v", input, err)
	}
	return out, nil
}

func mustBrowse(t testing.TB, w *browser.Worker, agent, ws, input string) *browser.Output {
	t.Helper()
	out, f := browse(t, w, agent, ws, input)
	if f != nil {
		t.Fatalf("browse %s: %v", input, f)
	}
	return out
}

func TestBrowseModes(t *testing.T) {
	t.Parallel()
	w, s, ws := sharedWorker(t), testSite(), t.TempDir()

	out := mustBrowse(t, w, "modes", ws, `{"url": "`+s.srv.URL+`/js"}`)
	if out.Text != "Rendered by script" || out.Title != "JS page" || len(out.Visited) != 1 {
		t.Errorf("text mode: %+v", out)
	}
	out = mustBrowse(t, w, "modes", ws, `{"mode": "html"}`)
	if !strings.Contains(out.HTML, `<div id="app">Rendered by script</div>`) {
		t.Errorf("html mode: %.300s", out.HTML)
	}
	out = mustBrowse(t, w, "modes", ws, `{"mode": "links"}`)
	if len(out.Links) != 2 || out.Links[0].Text != "The form" || out.Links[0].URL != s.srv.URL+"/form" {
		t.Errorf("links mode: %+v", out.Links)
	}
	for mode, magic := range map[string]string{"screenshot": "\x89PNG", "pdf": "%PDF"} {
		out = mustBrowse(t, w, "modes", ws, `{"mode": "`+mode+`"}`)
		data, err := os.ReadFile(filepath.Join(ws, out.File))
		if !strings.HasPrefix(out.File, ".choirtmp/send/"+mode+"-") || err != nil || !bytes.HasPrefix(data, []byte(magic)) {
			t.Errorf("%s: file %q, %v, %d bytes", mode, out.File, err, len(data))
		}
	}
	out = mustBrowse(t, w, "modes", ws, `{"url": "`+s.srv.URL+`/huge"}`)
	if !out.Truncated || !strings.HasSuffix(out.Text, "[truncated]") || strings.Contains(out.Text, "menu") {
		t.Errorf("huge page: truncated %v, %d bytes", out.Truncated, len(out.Text))
	}
}

func TestBrowseActions(t *testing.T) {
	t.Parallel()
	w, s := sharedWorker(t), testSite()
	out := mustBrowse(t, w, "actions", "", `{"url": "`+s.srv.URL+`/form", "actions": [
		{"action": "type", "selector": "#q", "text": "hello chromedp"},
		{"action": "click", "selector": "#go"},
		{"action": "wait", "selector": "#result"},
		{"action": "scroll"}, {"action": "scroll", "selector": "#result"}]}`)
	if !strings.Contains(out.Text, "You typed: hello chromedp") {
		t.Fatalf("text %q", out.Text)
	}
	out = mustBrowse(t, w, "actions", "", `{"actions": [{"action": "navigate", "url": "`+s.srv.URL+`/js"}, {"action": "back"}]}`)
	if !strings.HasSuffix(out.URL, "/form") {
		t.Fatalf("after back: %s", out.URL)
	}
}

func TestBrowseBadInput(t *testing.T) {
	t.Parallel()
	w, s := sharedWorker(t), testSite()
	before := s.privateHits.Load()
	for _, tc := range []struct{ name, input, kind string }{
		{"FileURL", `{"url": "file:///etc/passwd"}`, "refused_scheme"},
		{"JavascriptURL", `{"url": "javascript:alert(1)"}`, "refused_scheme"},
		{"DataURL", `{"url": "data:text/html,<p>hi</p>"}`, "refused_scheme"},
		{"PrivateAddress", `{"url": "http://10.0.0.1/"}`, "refused_address"},
		{"Metadata", `{"url": "http://169.254.169.254/latest/meta-data/"}`, "refused_address"},
		{"OtherLoopbackPort", `{"url": "` + s.private.URL + `/"}`, "refused_address"},
		{"RedirectToLoopback", `{"url": "` + s.srv.URL + `/chain/2"}`, "refused_address"},
		{"SelectorNeverAppears", `{"url": "` + s.srv.URL + `/js", "actions": [{"action": "wait", "selector": "#nope", "timeout_ms": 500}]}`, "selector_timeout"},
		{"PageNeverLoads", `{"url": "` + s.srv.URL + `/hang", "actions": [{"action": "navigate", "url": "` + s.srv.URL + `/hang", "timeout_ms": 1000}]}`, "navigation_timeout"},
		{"UnknownMode", `{"mode": "pdfx"}`, "bad_input"},
		{"UnknownField", `{"link": "x"}`, "bad_input"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "PageNeverLoads" {
				tc.input = `{"actions": [{"action": "navigate", "url": "` + s.srv.URL + `/hang", "timeout_ms": 1000}]}`
			}
			_, f := browse(t, w, "bad-"+tc.name, "", tc.input)
			if f == nil || f.Kind != tc.kind || f.Message == "" {
				t.Fatalf("failure %+v, want %s", f, tc.kind)
			}
		})
	}
	t.Run("WorkerWebSocketAndPopupBlocked", func(t *testing.T) {
		mustBrowse(t, w, "bad-sneaky", "", `{"url": "`+s.srv.URL+`/sneaky", "actions": [{"action": "wait", "selector": "#done"}]}`)
	})
	t.Run("SubrequestToLoopbackBlocked", func(t *testing.T) {
		out := mustBrowse(t, w, "bad-sub", "", `{"url": "`+s.srv.URL+`/subrequest"}`)
		if len(out.Blocked) == 0 || !strings.Contains(out.Blocked[0], "loopback") {
			t.Fatalf("blocked %v", out.Blocked)
		}
	})
	if n := s.privateHits.Load() - before; n != 0 {
		t.Fatalf("the private server was reached %d times", n)
	}
}

func TestAgentsAreIsolated(t *testing.T) {
	t.Parallel()
	w, s := sharedWorker(t), testSite()
	var wg sync.WaitGroup
	got := map[string]string{}
	var mu sync.Mutex
	for _, agent := range []string{"alice", "bob"} {
		wg.Go(func() {
			mustBrowse(t, w, "iso-"+agent, "", `{"url": "`+s.srv.URL+`/setcookie#`+agent+`"}`)
			out := mustBrowse(t, w, "iso-"+agent, "", `{"url": "`+s.srv.URL+`/showcookie", "tab": "second"}`)
			mu.Lock()
			got[agent] = out.Text
			mu.Unlock()
		})
	}
	wg.Wait()
	if got["alice"] != "cookie:[who=alice]" || got["bob"] != "cookie:[who=bob]" {
		t.Fatalf("cookies seen: %q", got)
	}
	// A stopped agent's context is gone with its cookies.
	w.CloseAgent("iso-alice")
	out := mustBrowse(t, w, "iso-alice", "", `{"url": "`+s.srv.URL+`/showcookie"}`)
	if out.Text != "cookie:[]" {
		t.Fatalf("after stop and start: %q", out.Text)
	}
}

func TestTabLimit(t *testing.T) {
	t.Parallel()
	w, s := newWorker(t, config.Web{BrowseMaxTabs: 2}), testSite()
	mustBrowse(t, w, "tabs", "", `{"url": "`+s.srv.URL+`/js", "tab": "a"}`)
	if _, f := browse(t, w, "tabs", "", `{"url": "`+s.srv.URL+`/js", "tab": "b"}`); f == nil || f.Kind != "too_many_tabs" {
		t.Fatalf("third tab: %+v", f)
	}
	mustBrowse(t, w, "tabs", "", `{"tab": "a", "close_tab": true}`)
	mustBrowse(t, w, "tabs", "", `{"url": "`+s.srv.URL+`/js", "tab": "b"}`)
}

func TestCrashRecovery(t *testing.T) {
	t.Parallel()
	w, s := newWorker(t, config.Web{BrowseNavigationTimeoutMS: 60_000}), testSite()
	mustBrowse(t, w, "crash", "", `{"url": "`+s.srv.URL+`/js"}`)

	// A call hangs on a page that never loads; the browser dies under it.
	res := make(chan *browser.Failure, 1)
	hangs := s.hangHits.Load()
	go func() {
		_, f := browse(t, w, "crash", "", `{"url": "`+s.srv.URL+`/hang"}`)
		res <- f
	}()
	waitFor(t, func() bool { return s.hangHits.Load() > hangs })
	pid := w.PID("crash")
	p, err := os.FindProcess(pid)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	f := <-res
	if f == nil || !f.Retryable || (f.Kind != "browser_crashed" && f.Kind != "browser_restarting") {
		t.Fatalf("call during the crash: %+v", f)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := w.WaitReady(ctx, "crash"); err != nil {
		t.Fatal(err)
	}
	out := mustBrowse(t, w, "crash", "", `{"url": "`+s.srv.URL+`/js"}`)
	if out.Text != "Rendered by script" || w.Restarts() != 1 || w.PID("crash") == pid {
		t.Fatalf("after restart: %+v, restarts %d", out, w.Restarts())
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in a minute")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestAllowHostsPerAgent opens the test site to one agent only: another
// agent's navigation, and its page's sub-requests, are refused.
func TestAllowHostsPerAgent(t *testing.T) {
	t.Parallel()
	s := testSite()
	wk, err := browser.New(browser.Config{SettingsFunc: func(agentID string) config.Web {
		w := config.Web{BrowseNavigationTimeoutMS: 20_000}
		if agentID == "opened" {
			w.AllowHosts = []string{"127.0.0.1:" + s.port}
		}
		return w
	}})
	if errors.Is(err, browser.ErrNoChromium) && os.Getenv("CI") != "true" {
		t.Skipf("skipped: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wk.Close)
	if out := mustBrowse(t, wk, "opened", "", `{"url": "`+s.srv.URL+`/js"}`); out.Text != "Rendered by script" {
		t.Fatalf("the opened agent: %+v", out)
	}
	_, f := browse(t, wk, "closed", "", `{"url": "`+s.srv.URL+`/js"}`)
	if f == nil || f.Kind != "refused_address" || !strings.Contains(f.Message, "127.0.0.1:"+s.port) {
		t.Fatalf("the other agent: %+v, want refused_address naming the site", f)
	}
}
