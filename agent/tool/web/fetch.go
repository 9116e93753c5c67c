package web

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/internal/netguard"
	"github.com/choirhq/choir/internal/readable"
	"github.com/choirhq/choir/rpc/egress"
)

// MaxRedirects is the most redirects a fetch follows.
const MaxRedirects = 5

// downloadDir is where binaries are saved, relative to the workspace.
const downloadDir = tool.DownloadDir

// userAgent names Choir to the sites it fetches.
const userAgent = "Mozilla/5.0 (compatible; Choir/1.0; +https://github.com/choirhq/choir)"

type fetchTool struct{ cfg Config }

type fetchInput struct {
	URL      string `json:"url"`
	MaxBytes int64  `json:"max_bytes,omitempty"`
}

// fetchOutput is what the model gets.
type fetchOutput struct {
	URL         string   `json:"url"`
	FinalURL    string   `json:"final_url"`
	Redirects   []string `json:"redirects,omitempty"`
	Status      int      `json:"status"`
	ContentType string   `json:"content_type"`
	Bytes       int      `json:"bytes"`
	Title       string   `json:"title,omitempty"`
	Text        string   `json:"text,omitempty"`
	// SavedTo is the workspace-relative path of a saved binary.
	SavedTo   string `json:"saved_to,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
}

func (*fetchTool) Spec() tool.Spec {
	return tool.Spec{
		LLM: tool.LLMView{
			Name: NameFetch,
			Description: "Fetch a URL with a plain HTTP GET (no JavaScript): a web page comes back as its readable text, " +
				"plain text and JSON as they are, and anything else (PDF, images, archives) is saved under " +
				".choirtmp/downloads/ in the workspace and its path returned. Follows at most 5 redirects. " +
				"For pages that need JavaScript or interaction use choir.web.browse.",
			Parameters: json.RawMessage(`{
  "type": "object",
  "properties": {
    "url": {"type": "string", "minLength": 1, "maxLength": 8192, "description": "An http or https URL."},
    "max_bytes": {"type": "integer", "minimum": 1024, "description": "Download at most this many bytes (capped by the configured limit)."}
  },
  "required": ["url"],
  "additionalProperties": false
}`),
		},
		// Saved files go under .choirtmp/downloads with names unique to
		// their content, written atomically: a shared choirtmp lock is
		// enough, and fetches run concurrently.
		Runtime: tool.Runtime{TimeoutMS: 120_000, SideEffect: tool.SideEffectRead, Idempotent: true, Version: "1.0",
			Network: true, Locks: []tool.LockTemplate{{Resource: "choirtmp", Mode: tool.ModeShared}}},
	}
}

func (f *fetchTool) Execute(ctx context.Context, env tool.Env, input json.RawMessage) (tool.Result, error) {
	var in fetchInput
	if err := json.Unmarshal(input, &in); err != nil {
		return errorResult("bad_input", "input: "+err.Error(), "pass {\"url\": \"https://...\"}", nil), nil
	}
	w := f.cfg.settings()
	log := f.cfg.logger().With(slog.String("tool", NameFetch), slog.String("url", in.URL))
	guard, err := netguard.New(w.AllowHosts)
	if err != nil {
		return errorResult("config", "web.allow_hosts is invalid: "+err.Error(), "fix web.allow_hosts in config.json", nil), nil
	}
	if _, err := guard.CheckURL(in.URL); err != nil {
		log.Warn("fetch refused", slog.String("error", err.Error()))
		return refusedResult(err), nil
	}
	limit := w.FetchMaxBytes
	if in.MaxBytes > 0 && in.MaxBytes < limit {
		limit = in.MaxBytes
	}
	ctx, cancel := context.WithTimeout(ctx, time.Duration(w.FetchTimeoutMS)*time.Millisecond)
	defer cancel()

	var redirects []string
	tr := &http.Transport{DialContext: guard.DialContext(15 * time.Second), TLSHandshakeTimeout: 15 * time.Second,
		ForceAttemptHTTP2: true, MaxIdleConns: 1}
	if f.cfg.DialFunc != nil {
		tr.DialContext = f.cfg.DialFunc
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, CheckRedirect: func(req *http.Request, via []*http.Request) error {
		if len(via) > MaxRedirects {
			return fmt.Errorf("%w: more than %d redirects", errTooManyRedirects, MaxRedirects)
		}
		redirects = append(redirects, req.URL.String())
		_, err := guard.CheckURL(req.URL.String())
		return err
	}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.URL, nil)
	if err != nil {
		return errorResult("bad_url", err.Error(), "pass an http or https URL", nil), nil
	}
	req.Header.Set("User-Agent", userAgent)
	req.Header.Set("Accept", "text/html,application/xhtml+xml,text/plain,application/json;q=0.9,*/*;q=0.8")
	resp, err := client.Do(req)
	if err != nil {
		return f.transportError(ctx, log, in.URL, err, redirects), nil
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil && !errors.Is(err, io.EOF) {
		return f.transportError(ctx, log, in.URL, err, redirects), nil
	}
	out := fetchOutput{URL: in.URL, FinalURL: resp.Request.URL.String(), Redirects: redirects, Status: resp.StatusCode,
		ContentType: resp.Header.Get("Content-Type"), Bytes: len(body)}
	if int64(len(body)) > limit {
		body, out.Truncated, out.Bytes = body[:limit], true, int(limit)
	}
	if resp.StatusCode >= 400 {
		log.Info("fetch got an HTTP error", slog.Int("status", resp.StatusCode))
		return errorResult("http_status", fmt.Sprintf("%s answered %s", out.FinalURL, resp.Status), "",
			map[string]any{"status": resp.StatusCode, "final_url": out.FinalURL, "body": tool.TruncateUTF8(string(body), 2048)}), nil
	}
	return f.shapeBody(env, out, body)
}

var errTooManyRedirects = errors.New("too many redirects")

// shapeBody turns the body into text, or saves it.
func (f *fetchTool) shapeBody(env tool.Env, out fetchOutput, body []byte) (tool.Result, error) {
	mt, _, _ := mime.ParseMediaType(out.ContentType)
	if mt == "" {
		mt, _, _ = mime.ParseMediaType(http.DetectContentType(body))
	}
	switch {
	case mt == "text/html" || mt == "application/xhtml+xml":
		p, err := readable.Extract(bytes.NewReader(body))
		if err != nil {
			return errorResult("parse", "cannot read the page: "+err.Error(), "", nil), nil
		}
		out.Title, out.Text = p.Title, p.Text
	case textual(mt) && utf8.Valid(body):
		out.Text = string(body)
	default:
		if out.Truncated {
			return errorResult("too_large", fmt.Sprintf("%s is larger than %d bytes", out.FinalURL, out.Bytes),
				"raise max_bytes (up to web.fetch_max_bytes in config.json) or fetch a smaller file", nil), nil
		}
		rel, err := saveDownload(env.Workspace, out.FinalURL, body)
		if err != nil {
			return errorResult("save", "cannot save the download: "+err.Error(), "", nil), nil
		}
		out.SavedTo = rel
		return tool.SuccessResult(fmt.Sprintf("saved %d bytes of %s to %s", len(body), mt, rel), out), nil
	}
	sum := fmt.Sprintf("fetched %s (%d bytes)", out.FinalURL, out.Bytes)
	if out.Truncated {
		sum += ", truncated at the size cap"
	}
	return tool.SuccessResult(sum, out), nil
}

// textual reports whether a media type is text a model can read as is.
func textual(mt string) bool {
	return strings.HasPrefix(mt, "text/") || mt == "application/json" || strings.HasSuffix(mt, "+json") ||
		mt == "application/xml" || strings.HasSuffix(mt, "+xml") || mt == "application/javascript"
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// saveDownload writes body under .choirtmp/downloads, named after the
// URL's last path segment and the content's hash, and returns the path.
func saveDownload(ws, rawURL string, body []byte) (string, error) {
	name := "download"
	if u, err := url.Parse(rawURL); err == nil {
		if n := unsafeName.ReplaceAllString(path.Base(u.Path), "_"); strings.Trim(n, "._/") != "" {
			name = tool.TruncateUTF8(n, 80)
		}
	}
	sum := sha256.Sum256(body)
	ext := path.Ext(name)
	rel := path.Join(downloadDir, strings.TrimSuffix(name, ext)+"-"+hex.EncodeToString(sum[:4])+ext)
	root, err := os.OpenRoot(ws)
	if err != nil {
		return "", err
	}
	defer root.Close()
	if err := root.MkdirAll(downloadDir, 0o755); err != nil {
		return "", err
	}
	return rel, tool.WriteFileAtomic(root, rel, body, 0o644)
}

// transportError describes a failed request for the model.
func (f *fetchTool) transportError(ctx context.Context, log *slog.Logger, target string, err error, redirects []string) tool.Result {
	var refused *netguard.RefusedError
	var gw *egress.RefusedError
	switch {
	case errors.As(err, &gw):
		log.Warn("fetch refused by the egress gateway", slog.String("error", gw.Error()), slog.Any("redirects", redirects))
		r := errorResult("refused_address", gw.Error(), "use a public http or https URL", nil)
		if len(redirects) > 0 {
			r.Summary = "redirected to a refused address: " + r.Summary
		}
		return r
	case errors.As(err, &refused):
		log.Warn("fetch refused", slog.String("error", refused.Error()), slog.Any("redirects", redirects))
		r := refusedResult(refused)
		if len(redirects) > 0 {
			r.Summary = "redirected to a refused address: " + r.Summary
		}
		return r
	case errors.Is(err, errTooManyRedirects):
		log.Info("fetch gave up on redirects", slog.Any("redirects", redirects))
		return errorResult("too_many_redirects", fmt.Sprintf("%s redirected more than %d times", target, MaxRedirects), "",
			map[string]any{"redirects": redirects})
	case ctx.Err() != nil:
		log.Info("fetch timed out")
		return errorResult("timeout", target+" did not answer in time",
			"try again later, or raise web.fetch_timeout_ms in config.json", nil)
	}
	log.Info("fetch failed", slog.String("error", err.Error()))
	return errorResult("network", "cannot fetch "+target+": "+err.Error(), "check the URL; the site may be down", nil)
}

// refusedResult is the model's view of an SSRF refusal.
func refusedResult(err error) tool.Result {
	kind := "refused_address"
	if errors.Is(err, netguard.ErrScheme) {
		kind = "refused_scheme"
	}
	var re *netguard.RefusedError
	msg := err.Error()
	if errors.As(err, &re) {
		msg = re.Error()
	}
	return errorResult(kind, msg, "use a public http or https URL", nil)
}
