package browser_test

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/logbuf"
)

// canarySite plants a canary file outside every workspace, with random
// content, and serves pages whose scripts try every path a page has to a
// host file: a file input the model types a path into, a file chooser
// opened by a click, the File System Access picker, navigations to file:
// (window.location, an iframe, a redirect) and a download. Whatever a page
// reads it puts in its DOM and posts back, so posted collects it.
type canarySite struct {
	path, secret string
	srv          *httptest.Server
	mu           sync.Mutex
	posted       []string
}

func newCanarySite(t *testing.T) *canarySite {
	t.Helper()
	var rnd [16]byte
	_, _ = rand.Read(rnd[:])
	c := &canarySite{secret: "CANARY-" + hex.EncodeToString(rnd[:])}
	c.path = filepath.Join(t.TempDir(), "secrets.json")
	if err := os.WriteFile(c.path, []byte(`{"token": "`+c.secret+`"}`), 0o600); err != nil {
		t.Fatal(err)
	}
	// report shows what a page read and posts it back to the site.
	const report = `<script>
function report(s) { var d = document.createElement("pre"); d.className = "got"; d.textContent = s; document.body.appendChild(d);
  fetch("/post", {method: "POST", body: s}); }
function readAll(files) { for (var i = 0; i < files.length; i++) files[i].text().then(report); }
</script>`
	mux := http.NewServeMux()
	page := func(p, body string) {
		mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, "<html><body>"+report+body+"</body></html>")
		})
	}
	page("/upload", `<input id="f" type="file" onchange="readAll(this.files)">
<div id="drop" style="width:200px;height:200px" ondragover="event.preventDefault()" ondrop="event.preventDefault(); readAll(event.dataTransfer.files)">drop</div>`)
	page("/picker", `<button id="p" onclick="window.showOpenFilePicker().then(function(hs){hs.forEach(function(h){h.getFile().then(function(f){readAll([f])})})}, function(e){report('picker: '+e)})">pick</button>`)
	page("/location", `<script>try { location.href = "file://`+c.path+`"; } catch (e) { report("location: " + e); }</script><p id="stayed">stayed</p>`)
	page("/iframe", `<iframe id="fr" src="file://`+c.path+`" onload="try { report(this.contentDocument.body.innerText) } catch (e) { report('iframe: ' + e) }"></iframe>`)
	page("/fetchfile", `<script>fetch("file://`+c.path+`").then(function(r){return r.text()}).then(report, function(e){report("fetch: "+e)});
var x = new XMLHttpRequest(); try { x.open("GET", "file://`+c.path+`", false); x.send(); report(x.responseText); } catch (e) { report("xhr: " + e); }</script>`)
	page("/download", `<a id="d" href="/canarycopy" download="secrets.json">download</a>`)
	mux.HandleFunc("/redirect", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "file://"+c.path, http.StatusFound)
	})
	mux.HandleFunc("/canarycopy", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Disposition", `attachment; filename="x.bin"`)
		fmt.Fprint(w, "download body")
	})
	mux.HandleFunc("/post", func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.posted = append(c.posted, string(b))
		c.mu.Unlock()
	})
	c.srv = httptest.NewServer(mux)
	t.Cleanup(c.srv.Close)
	return c
}

// leaked reports whether the canary reached the site.
func (c *canarySite) leaked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Contains(strings.Join(c.posted, "\n"), c.secret)
}

// TestBrowseNeverReadsAHostFile plays each path from the model's side:
// the canary reaches neither the tool result (what the model and Telegram
// see) nor the page's server, and typing into a file input is refused
// with a failure that names it.
func TestBrowseNeverReadsAHostFile(t *testing.T) {
	t.Parallel()
	c := newCanarySite(t)
	_, port, _ := net.SplitHostPort(c.srv.Listener.Addr().String())
	var logs logbuf.Buffer
	w := newWorkerLogging(t, config.Web{BrowseNavigationTimeoutMS: 20_000}, &logs, "127.0.0.1:"+port)
	home, _ := os.UserHomeDir() // Chromium saves downloads under it
	ws := t.TempDir()
	calls := []struct{ name, input, wantKind string }{
		{"TypeIntoFileInput", `{"url": "` + c.srv.URL + `/upload", "actions": [{"action": "type", "selector": "#f", "text": "` + c.path + `"}, {"action": "wait", "selector": ".got", "timeout_ms": 3000}], "mode": "html"}`, "refused_file_input"},
		{"ClickFileInput", `{"url": "` + c.srv.URL + `/upload", "actions": [{"action": "click", "selector": "#f"}], "mode": "html"}`, ""},
		{"TypeEnterOnFileInput", `{"url": "` + c.srv.URL + `/upload", "actions": [{"action": "type", "selector": "#f", "text": "\n"}], "mode": "html"}`, "refused_file_input"},
		{"FilePicker", `{"url": "` + c.srv.URL + `/picker", "actions": [{"action": "click", "selector": "#p"}], "mode": "html"}`, ""},
		{"Location", `{"url": "` + c.srv.URL + `/location", "mode": "html"}`, ""},
		{"Iframe", `{"url": "` + c.srv.URL + `/iframe", "mode": "html"}`, ""},
		{"FetchAndXHR", `{"url": "` + c.srv.URL + `/fetchfile", "mode": "html"}`, ""},
		{"Redirect", `{"url": "` + c.srv.URL + `/redirect", "mode": "html"}`, ""},
		{"NavigateFile", `{"url": "file://` + c.path + `", "mode": "html"}`, "refused_scheme"},
		{"Download", `{"url": "` + c.srv.URL + `/download", "actions": [{"action": "click", "selector": "#d"}], "mode": "html"}`, ""},
	}
	var blocked []string
	for _, call := range calls {
		out, f := browse(t, w, "hostfile", ws, call.input)
		if out != nil {
			blocked = append(blocked, out.Blocked...)
		}
		res, _ := json.Marshal(out)
		if f != nil {
			res, _ = json.Marshal(f)
		}
		if strings.Contains(string(res), c.secret) {
			t.Errorf("%s: the canary reached the tool result: %s", call.name, res)
		}
		switch {
		case call.wantKind != "" && (f == nil || f.Kind != call.wantKind):
			t.Errorf("%s: want a %s failure, got %s", call.name, call.wantKind, res)
		case call.wantKind == "refused_file_input" && !strings.Contains(f.Message, "#f"):
			t.Errorf("%s: the refusal does not name the input: %s", call.name, f.Message)
		}
	}
	// A later call reads whatever the pages managed meanwhile.
	for _, p := range []string{"/upload", "/picker", "/iframe"} {
		out, f := browse(t, w, "hostfile", ws, `{"url": "`+c.srv.URL+p+`", "mode": "html"}`)
		if res, _ := json.Marshal(out); f == nil && strings.Contains(string(res), c.secret) {
			t.Errorf("%s: the canary reached a later result", p)
		}
	}
	if b := strings.Join(blocked, "\n"); !strings.Contains(b, "file chooser refused") {
		t.Errorf("the file chooser's refusal is not in any result's blocked_requests: %q", b)
	}
	for _, want := range []string{`"what":"type into file input","selector":"#f"`, `"what":"file chooser"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("no log line with %s:\n%s", want, logs.String())
		}
	}
	if c.leaked() {
		t.Errorf("the canary reached the page's server")
	}
	_ = filepath.WalkDir(filepath.Join(home, "Downloads"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && (d.Name() == "x.bin" || strings.HasPrefix(d.Name(), "x (")) {
			t.Errorf("a download landed on the host: %s", p)
		}
		return nil
	})
}
