package web_test

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"github.com/choirhq/choir/agent/tool/web"
	"github.com/choirhq/choir/config"
)

type fetchOut struct {
	URL       string   `json:"url"`
	FinalURL  string   `json:"final_url"`
	Redirects []string `json:"redirects"`
	Title     string   `json:"title"`
	Text      string   `json:"text"`
	SavedTo   string   `json:"saved_to"`
	Truncated bool     `json:"truncated"`
	Bytes     int      `json:"bytes"`
}

type errOut struct {
	Error   string         `json:"error"`
	Message string         `json:"message"`
	Fix     string         `json:"fix"`
	Code    string         `json:"code"`
	Retry   int            `json:"retry_after_seconds"`
	Rate    map[string]any `json:"rate_limit"`
}

// site is a local web site: pages, a binary, redirect chains, a huge page
// and a page that never answers. Its port is allowlisted; other loopback
// ports are not.
type site struct {
	srv     *httptest.Server
	port    string
	private *httptest.Server // a loopback server no allowlist opens
}

func newSite(t *testing.T) *site {
	t.Helper()
	s := &site{}
	s.private = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "internal secrets")
	}))
	t.Cleanup(s.private.Close)
	mux := http.NewServeMux()
	mux.HandleFunc("/page", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<html><head><title>Hello</title></head><body><nav>menu</nav><main><p>Main text.</p></main></body></html>`)
	})
	mux.HandleFunc("/data.json", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"a":1}`)
	})
	mux.HandleFunc("/files/report.pdf", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/pdf")
		fmt.Fprint(w, "%PDF-1.4\n\x00\x01binary")
	})
	mux.HandleFunc("/huge", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprint(w, strings.Repeat("x", 64<<10))
	})
	mux.HandleFunc("/hang", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	mux.HandleFunc("/chain/{n}", func(w http.ResponseWriter, r *http.Request) {
		var n int
		fmt.Sscan(r.PathValue("n"), &n)
		if n == 0 {
			http.Redirect(w, r, "/page", http.StatusFound)
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/chain/%d", n-1), http.StatusFound)
	})
	mux.HandleFunc("/to-private", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/to-private2", http.StatusMovedPermanently)
	})
	mux.HandleFunc("/to-private2", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s.private.URL+"/admin", http.StatusFound)
	})
	s.srv = httptest.NewServer(mux)
	t.Cleanup(s.srv.Close)
	_, s.port, _ = net.SplitHostPort(s.srv.Listener.Addr().String())
	return s
}

func setupFetch(t *testing.T, s *site, w config.Web) *tooltest.Bundle {
	t.Helper()
	w.AllowHosts = append(w.AllowHosts, "127.0.0.1:"+s.port)
	return tooltest.Setup(t, builtin.Config{Tools: web.Tools(web.Config{SettingsFunc: func() config.Web { return w }})})
}

func TestFetch(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	b := setupFetch(t, s, config.Web{})

	t.Run("PageBecomesReadableText", func(t *testing.T) {
		r := b.MustCall(t, web.NameFetch, `{"url": "`+s.srv.URL+`/page"}`)
		out := tooltest.Output[fetchOut](t, r)
		if r.Status != tool.StatusSuccess || out.Title != "Hello" || out.Text != "Main text." {
			t.Fatalf("result %+v", r)
		}
	})
	t.Run("JSONAsIs", func(t *testing.T) {
		out := tooltest.Output[fetchOut](t, b.MustCall(t, web.NameFetch, `{"url": "`+s.srv.URL+`/data.json"}`))
		if out.Text != `{"a":1}` {
			t.Fatalf("text %q", out.Text)
		}
	})
	t.Run("BinarySavedToWorkspace", func(t *testing.T) {
		out := tooltest.Output[fetchOut](t, b.MustCall(t, web.NameFetch, `{"url": "`+s.srv.URL+`/files/report.pdf?x=1"}`))
		if !strings.HasPrefix(out.SavedTo, ".choirtmp/downloads/report-") || !strings.HasSuffix(out.SavedTo, ".pdf") {
			t.Fatalf("saved_to %q", out.SavedTo)
		}
		got, err := os.ReadFile(filepath.Join(b.WS, out.SavedTo))
		if err != nil || string(got) != "%PDF-1.4\n\x00\x01binary" {
			t.Fatalf("saved file: %q, %v", got, err)
		}
	})
	t.Run("FiveRedirectsFollowed", func(t *testing.T) {
		out := tooltest.Output[fetchOut](t, b.MustCall(t, web.NameFetch, `{"url": "`+s.srv.URL+`/chain/4"}`))
		if len(out.Redirects) != 5 || out.Text != "Main text." {
			t.Fatalf("out %+v", out)
		}
	})
	t.Run("SixRedirectsRefused", func(t *testing.T) {
		r := b.MustCall(t, web.NameFetch, `{"url": "`+s.srv.URL+`/chain/5"}`)
		if e := tooltest.Output[errOut](t, r); r.Status != tool.StatusError || e.Error != "too_many_redirects" {
			t.Fatalf("result %+v", r)
		}
	})
	t.Run("RedirectChainToLoopbackRefused", func(t *testing.T) {
		r := b.MustCall(t, web.NameFetch, `{"url": "`+s.srv.URL+`/to-private"}`)
		e := tooltest.Output[errOut](t, r)
		if r.Status != tool.StatusError || e.Error != "refused_address" || !strings.Contains(e.Message, "loopback") ||
			strings.Contains(string(r.Output), "internal secrets") {
			t.Fatalf("result %+v", r)
		}
	})
	t.Run("LargePageTruncated", func(t *testing.T) {
		out := tooltest.Output[fetchOut](t, b.MustCall(t, web.NameFetch, `{"url": "`+s.srv.URL+`/huge", "max_bytes": 4096}`))
		if !out.Truncated || len(out.Text) != 4096 {
			t.Fatalf("truncated %v, %d bytes", out.Truncated, len(out.Text))
		}
	})
	for _, bad := range []struct{ name, url, kind string }{
		{"FileScheme", "file:///etc/passwd", "refused_scheme"},
		{"JavascriptScheme", "javascript:alert(1)", "refused_scheme"},
		{"DataScheme", "data:text/html,<b>hi</b>", "refused_scheme"},
		{"PrivateAddress", "http://10.0.0.1/", "refused_address"},
		{"MetadataAddress", "http://169.254.169.254/latest/meta-data/", "refused_address"},
		{"Localhost", "http://localhost:" + "1/", "refused_address"},
	} {
		t.Run(bad.name, func(t *testing.T) {
			r := b.MustCall(t, web.NameFetch, `{"url": "`+strings.ReplaceAll(bad.url, `"`, `\"`)+`"}`)
			if e := tooltest.Output[errOut](t, r); r.Status != tool.StatusError || e.Error != bad.kind || e.Fix == "" {
				t.Fatalf("result %+v", r)
			}
		})
	}
	t.Run("UnallowlistedLoopbackPortRefused", func(t *testing.T) {
		r := b.MustCall(t, web.NameFetch, `{"url": "`+s.private.URL+`/"}`)
		if e := tooltest.Output[errOut](t, r); e.Error != "refused_address" {
			t.Fatalf("result %+v", r)
		}
	})
}

func TestFetchTimeout(t *testing.T) {
	t.Parallel()
	s := newSite(t)
	b := setupFetch(t, s, config.Web{FetchTimeoutMS: 300})
	r := b.MustCall(t, web.NameFetch, `{"url": "`+s.srv.URL+`/hang"}`)
	if e := tooltest.Output[errOut](t, r); r.Status != tool.StatusError || e.Error != "timeout" {
		t.Fatalf("result %+v", r)
	}
}
