package browser

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/dom"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/netguard"
	"github.com/choirhq/choir/internal/readable"
	"github.com/choirhq/choir/strictjson"
)

// ToolName is the host tool the worker serves.
const ToolName = "choir.web.browse"

// sendDir is where screenshots and PDFs go, relative to the workspace:
// choir.send.file's staging directory.
const sendDir = ".choirtmp/send"

// Input is choir.web.browse's input.
type Input struct {
	URL      string   `json:"url,omitempty"`
	Tab      string   `json:"tab,omitempty"`
	Mode     string   `json:"mode,omitempty"`
	Actions  []Action `json:"actions,omitempty"`
	FullPage bool     `json:"full_page,omitempty"`
	CloseTab bool     `json:"close_tab,omitempty"`
}

// Action is one step within the tab.
type Action struct {
	Action    string `json:"action"`
	URL       string `json:"url,omitempty"`
	Selector  string `json:"selector,omitempty"`
	Text      string `json:"text,omitempty"`
	Pixels    int    `json:"pixels,omitempty"`
	TimeoutMS int    `json:"timeout_ms,omitempty"`
}

// Output is what the model gets.
type Output struct {
	URL   string `json:"url"`
	Title string `json:"title,omitempty"`
	Tab   string `json:"tab"`
	Mode  string `json:"mode"`
	// Visited lists the URLs navigated to in this call, in order.
	Visited []string        `json:"visited,omitempty"`
	Text    string          `json:"text,omitempty"`
	HTML    string          `json:"html,omitempty"`
	Links   []readable.Link `json:"links,omitempty"`
	// File is the workspace-relative path of a screenshot or PDF.
	File  string `json:"file,omitempty"`
	Bytes int    `json:"bytes,omitempty"`
	// Blocked lists the page's requests the guard refused.
	Blocked []string `json:"blocked_requests,omitempty"`
	// Truncated says text, html or links were cut at the configured cap.
	Truncated bool `json:"truncated,omitempty"`
}

var tabName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)

// parse decodes and checks an input.
func parse(raw json.RawMessage) (Input, error) {
	var in Input
	if err := strictjson.Decode(raw, &in, strictjson.Limits{MaxBytes: 1 << 20}); err != nil {
		return in, &Failure{Kind: "bad_input", Message: err.Error(), Fix: "see the tool's parameters"}
	}
	if in.Tab == "" {
		in.Tab = MainTab
	}
	if in.Mode == "" {
		in.Mode = "text"
	}
	var problems []string
	if !tabName.MatchString(in.Tab) {
		problems = append(problems, fmt.Sprintf("tab %q: want 1-32 letters, digits, '_' or '-'", in.Tab))
	}
	switch in.Mode {
	case "text", "html", "links", "screenshot", "pdf":
	default:
		problems = append(problems, fmt.Sprintf("mode %q: want text, html, links, screenshot or pdf", in.Mode))
	}
	for i, a := range in.Actions {
		need := func(field, v string) {
			if v == "" {
				problems = append(problems, fmt.Sprintf("actions[%d]: %s needs %s", i, a.Action, field))
			}
		}
		switch a.Action {
		case "navigate":
			need("url", a.URL)
		case "click", "wait":
			need("selector", a.Selector)
		case "type":
			need("selector", a.Selector)
		case "scroll", "back":
		default:
			problems = append(problems, fmt.Sprintf("actions[%d]: action %q: want navigate, click, type, wait, scroll or back", i, a.Action))
		}
	}
	if len(problems) > 0 {
		return in, &Failure{Kind: "bad_input", Message: strings.Join(problems, "; "), Fix: "fix the input and call again"}
	}
	return in, nil
}

// Browse runs one choir.web.browse call for the agent. workspace returns
// the host path of the agent's workspace, for screenshots and PDFs. A
// *Failure is for the model; any other error is the worker's own.
func (w *Worker) Browse(ctx context.Context, agentID string, raw json.RawMessage,
	workspace func(context.Context) (string, error)) (*Output, error) {
	in, err := parse(raw)
	if err != nil {
		w.logger.Warn("browse input refused", slog.String("agent_id", agentID), slog.String("error", err.Error()))
		return nil, err
	}
	log := w.logger.With(slog.String("agent_id", agentID), slog.String("tab", in.Tab), slog.String("mode", in.Mode))
	a, err := w.agent(agentID)
	if err != nil {
		return nil, err
	}
	a.call.Lock()
	defer a.call.Unlock()
	lim := w.settings(agentID)
	t, err := a.tab(in.Tab, lim.BrowseMaxTabs)
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	inst := a.inst
	a.mu.Unlock()
	// The page was frozen when the last call ended; it runs only during
	// calls. A page that floods the guard ends the call (floodLimit).
	// Waking it is a round trip in the tab, after which the call begins.
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	w.setLifecycle(ctx, t, page.SetWebLifecycleStateStateActive)
	t.takeRefused(w.logger)
	t.begin(stop)
	defer t.setStop(nil)
	defer w.setLifecycle(ctx, t, page.SetWebLifecycleStateStateFrozen)
	fail := func(s Action, err error) error {
		if errors.Is(context.Cause(ctx), errFlood) {
			log.Warn("browse call ended: the page flooded the guard; the tab left it", slog.Int("refused", floodLimit))
			if !w.leave(ctx, t) {
				// Without interception the tab must not serve another
				// call: the agent gets a fresh browser context.
				log.Error("browser tab left without interception; the agent's browser context is reset")
				a.mu.Lock()
				if a.inst != nil {
					a.reset(a.inst)
				}
				a.mu.Unlock()
			}
			return &Failure{Kind: "page_flood", Message: fmt.Sprintf("the page fired over %d requests the guard refused; "+
				"the tab left it (about:blank)", floodLimit), Fix: "do not use this page; try another source"}
		}
		return w.explain(inst, t, s, err)
	}

	out := &Output{Tab: in.Tab, Mode: in.Mode}
	steps := in.Actions
	if in.URL != "" {
		steps = append([]Action{{Action: "navigate", URL: in.URL}}, steps...)
	}
	for i, s := range steps {
		if err := w.act(ctx, t, s, lim, out); err != nil {
			log.Warn("browse action failed", slog.Int("step", i), slog.String("action", s.Action), slog.String("error", err.Error()))
			return nil, fail(s, err)
		}
	}
	// The workspace is looked up with the call's context, which carries
	// the session; the render's context is the tab's.
	callWS := func(context.Context) (string, error) {
		if workspace == nil {
			return "", errors.New("no workspace")
		}
		return workspace(ctx)
	}
	if err := w.render(ctx, t, in, lim, out, callWS); err != nil {
		log.Warn("browse render failed", slog.String("error", err.Error()))
		return nil, fail(Action{Action: in.Mode}, err)
	}
	out.Blocked = t.takeRefused(w.logger)
	if in.CloseTab {
		a.closeTab(in.Tab)
	}
	log.Info("browse done", slog.String("url", out.URL), slog.Any("visited", out.Visited))
	return out, nil
}

// act runs one action.
func (w *Worker) act(ctx context.Context, t *tab, s Action, lim config.Web, out *Output) error {
	timeout := time.Duration(lim.BrowseNavigationTimeoutMS) * time.Millisecond
	if s.TimeoutMS > 0 {
		timeout = time.Duration(s.TimeoutMS) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(tabCtx(ctx, t), timeout)
	defer cancel()
	sel := chromedp.CSS(s.Selector)
	switch s.Action {
	case "navigate":
		g, err := netguard.New(lim.AllowHosts)
		if err != nil {
			return &Failure{Kind: "config", Message: "web.allow_hosts is invalid: " + err.Error(), Fix: "fix config.json"}
		}
		if _, err := g.CheckURL(s.URL); err != nil {
			return refused(err)
		}
		out.Visited = append(out.Visited, s.URL)
		return chromedp.Do(ctx, chromedp.Navigate(s.URL))
	case "click":
		return chromedp.Do(ctx, chromedp.WaitVisible(sel), chromedp.Click(sel))
	case "type":
		return w.typeText(ctx, t, s)
	case "wait":
		// In the page, not through chromedp's copy of the DOM, which would
		// ship every node of a huge page into choird.
		sel, _ := json.Marshal(s.Selector)
		_, err := chromedp.Run(ctx, chromedp.Evaluate[bool](fmt.Sprintf(waitJS, sel), chromedp.EvalAwaitPromise))
		return err
	case "scroll":
		if s.Selector != "" {
			return chromedp.Do(ctx, chromedp.ScrollIntoView(sel))
		}
		js := "window.scrollBy(0, window.innerHeight)"
		if s.Pixels != 0 {
			js = fmt.Sprintf("window.scrollBy(0, %d)", s.Pixels)
		}
		_, err := chromedp.Run(ctx, chromedp.Evaluate[any](js+", null"))
		return err
	case "back":
		return chromedp.Do(ctx, chromedp.NavigateBack())
	}
	return fmt.Errorf("unknown action %q", s.Action)
}

// typeText types s.Text into the element s.Selector names, refusing a
// file input: chromedp's SendKeys would turn the text into
// DOM.setFileInputFiles and upload whatever host file it names. The
// element's type is read live in the page, not from chromedp's cached DOM,
// and the keys go through key events only, which can never choose a file.
func (w *Worker) typeText(ctx context.Context, t *tab, s Action) error {
	nodes, err := chromedp.Run(ctx, chromedp.Nodes(s.Selector, chromedp.NodeVisible))
	if err != nil {
		return err
	}
	if len(nodes) == 0 {
		return fmt.Errorf("selector %q matched nothing", s.Selector)
	}
	n := nodes[0]
	obj, err := chromedp.Call(ctx, dom.ResolveNode, dom.ResolveNodeParams{NodeID: n.NodeID})
	if err != nil {
		return fmt.Errorf("resolve %s: %w", s.Selector, err)
	}
	if obj.Object == nil {
		return fmt.Errorf("resolve %s: no object", s.Selector)
	}
	byValue := true
	res, err := chromedp.Call(ctx, runtime.CallFunctionOn, runtime.CallFunctionOnParams{ObjectID: obj.Object.ObjectID,
		FunctionDeclaration: `function() { return this instanceof HTMLInputElement && this.type === "file"; }`,
		ReturnByValue:       &byValue})
	if err != nil {
		return fmt.Errorf("inspect %s: %w", s.Selector, err)
	}
	if res.Result == nil || string(res.Result.Value) != "false" {
		w.logger.Warn("browser host file access refused", slog.String("agent_id", t.agentID),
			slog.String("what", "type into file input"), slog.String("selector", s.Selector))
		return &Failure{Kind: "refused_file_input", Message: fmt.Sprintf("type into %q refused: it is a file input (<input type=file>), "+
			"and the browser never uploads a host file for a page", s.Selector),
			Fix: "do not type into file inputs; to send a file, use choir.send.file"}
	}
	return chromedp.Do(ctx, chromedp.KeyEventNode(n, s.Text))
}

// waitJS resolves once an element matching the selector (%s, a JSON
// string) is visible; the call's context bounds the wait.
const waitJS = `new Promise(function(resolve) {
  (function check() {
    var e = document.querySelector(%s);
    if (e && (e.offsetWidth || e.offsetHeight || e.getClientRects().length) && getComputedStyle(e).visibility !== "hidden") { resolve(true); return; }
    setTimeout(check, 50);
  })();
})`

// tabCtx is the tab's chromedp context, ended also by the call's ctx.
func tabCtx(call context.Context, t *tab) context.Context {
	ctx, cancel := context.WithCancel(t.ctx)
	stop := context.AfterFunc(call, cancel)
	context.AfterFunc(ctx, func() { stop() })
	return ctx
}

// setLifecycle freezes a tab's page after a call, so that its scripts,
// timers and requests stop until the next call wakes it: a hostile page
// cannot load the host between calls. A failure is logged only (a closed
// tab has no page to freeze).
func (w *Worker) setLifecycle(ctx context.Context, t *tab, state page.SetWebLifecycleStateState) {
	ctx, cancel := context.WithTimeout(tabCtx(context.WithoutCancel(ctx), t), 10*time.Second)
	defer cancel()
	if _, err := chromedp.Call(ctx, page.SetWebLifecycleState, page.SetWebLifecycleStateParams{State: state}); err != nil &&
		t.ctx.Err() == nil {
		w.logger.Warn("browser page lifecycle not set", slog.String("agent_id", t.agentID), slog.String("state", string(state)),
			slog.String("error", err.Error()))
	}
}

// leave takes the tab away from a hostile page. It freezes the page
// first: its scripts and timers stop at once, where a flooding page keeps
// a loaded browser too busy to navigate for many seconds. It then
// navigates to about:blank and flushes the requests the page left paused:
// interception is turned off, which lets the browser drop them (anything
// that still goes out meets the agent's guarded proxy), and on again. The
// browser answers the turning off after every event it sent before it,
// so no request of the left page is paused afterwards: none can be
// counted against the tab's next page. It reports whether interception
// is on again: when it is not, the caller must not use the tab.
func (w *Worker) leave(ctx context.Context, t *tab) bool {
	step := func(what string, d time.Duration, f func(ctx context.Context) error) bool {
		ctx, cancel := context.WithTimeout(tabCtx(context.WithoutCancel(ctx), t), d)
		defer cancel()
		if err := f(ctx); err != nil {
			w.logger.Warn("browser tab leaving a hostile page: "+what+" failed", slog.String("agent_id", t.agentID),
				slog.String("error", err.Error()))
			return false
		}
		return true
	}
	step("freeze", 10*time.Second, func(ctx context.Context) error {
		_, err := chromedp.Call(ctx, page.SetWebLifecycleState, page.SetWebLifecycleStateParams{State: page.SetWebLifecycleStateStateFrozen})
		return err
	})
	step("navigation to about:blank", 20*time.Second, func(ctx context.Context) error {
		return chromedp.Do(ctx, chromedp.Navigate("about:blank"))
	})
	step("turning interception off", 10*time.Second, func(ctx context.Context) error {
		_, err := chromedp.Call(ctx, fetch.Disable, cdp.Empty{})
		return err
	})
	for range 3 {
		if step("turning interception on", 10*time.Second, func(ctx context.Context) error {
			_, err := chromedp.Call(ctx, fetch.Enable, interceptAll)
			return err
		}) {
			return true
		}
	}
	return false
}

// pageJS reads what the modes need in one round trip: the URL, the title
// and the document's HTML, cut inside the page (%d UTF-16 units, then to
// bytes in Go) so that a huge DOM never crosses into choird whole.
const pageJS = `(function(n) {
  var h = document.documentElement ? document.documentElement.outerHTML : "";
  return {url: String(location.href).slice(0, 8192), title: String(document.title).slice(0, 1024),
    html: h.length > n ? h.slice(0, n) : h, cut: h.length > n};
})(%d)`

type pageState struct {
	URL   string `json:"url"`
	Title string `json:"title"`
	HTML  string `json:"html"`
	Cut   bool   `json:"cut"`
}

// render produces the call's output in its mode.
func (w *Worker) render(ctx context.Context, t *tab, in Input, lim config.Web, out *Output,
	workspace func(context.Context) (string, error)) error {
	ctx, cancel := context.WithTimeout(tabCtx(ctx, t), time.Duration(lim.BrowseNavigationTimeoutMS)*time.Millisecond)
	defer cancel()
	n := lim.BrowseMaxPageBytes
	if in.Mode == "screenshot" || in.Mode == "pdf" {
		n = 0 // no need to ship the page
	}
	st, err := chromedp.Run(ctx, chromedp.Evaluate[pageState](fmt.Sprintf(pageJS, n)))
	if err != nil {
		return err
	}
	out.URL, out.Title, out.Truncated = st.URL, st.Title, st.Cut && n > 0
	html := st.HTML
	if int64(len(html)) > lim.BrowseMaxPageBytes {
		html, out.Truncated = cutUTF8(html, int(lim.BrowseMaxPageBytes)), true
	}
	maxText := int(lim.BrowseMaxTextBytes)
	switch in.Mode {
	case "text":
		p, err := readable.Extract(strings.NewReader(html))
		if err != nil {
			return err
		}
		out.Text = p.Text
		if len(out.Text) > maxText {
			out.Text, out.Truncated = cutUTF8(out.Text, maxText)+"\n[truncated]", true
		}
	case "html":
		out.HTML = html
		if len(out.HTML) > maxText {
			out.HTML, out.Truncated = cutUTF8(out.HTML, maxText), true
		}
	case "links":
		base, _ := url.Parse(st.URL)
		links, err := readable.Links(strings.NewReader(html), base)
		if err != nil {
			return err
		}
		size := 0
		for i, l := range links {
			if size += len(l.Text) + len(l.URL) + 20; size > maxText {
				links, out.Truncated = links[:i], true
				break
			}
		}
		out.Links = links
	case "screenshot", "pdf":
		var data []byte
		ext := ".png"
		switch {
		case in.Mode == "pdf":
			data, err = chromedp.Run(ctx, chromedp.PrintToPDF(chromedp.PDFPrintBackground()))
			ext = ".pdf"
		case in.FullPage:
			data, err = chromedp.Run(ctx, chromedp.FullScreenshot(100))
		default:
			data, err = chromedp.Run(ctx, chromedp.CaptureScreenshot())
		}
		if err != nil {
			return err
		}
		if workspace == nil {
			return &Failure{Kind: "no_workspace", Message: "the session has no workspace to save the file in"}
		}
		ws, err := workspace(ctx)
		if err != nil {
			return &Failure{Kind: "no_workspace", Message: "cannot find the session's workspace: " + err.Error()}
		}
		name, err := saveSend(ws, in.Mode, ext, data)
		if err != nil {
			return err
		}
		out.File, out.Bytes = name, len(data)
	}
	return nil
}

// saveSend writes data to .choirtmp/send under a fresh name, through an
// os.Root so that a link the agent planted cannot redirect the write.
func saveSend(ws, kind, ext string, data []byte) (string, error) {
	root, err := os.OpenRoot(ws)
	if err != nil {
		return "", fmt.Errorf("open workspace: %w", err)
	}
	defer root.Close()
	if err := root.MkdirAll(sendDir, 0o755); err != nil {
		return "", fmt.Errorf("create %s: %w", sendDir, err)
	}
	var rnd [4]byte
	_, _ = rand.Read(rnd[:])
	name := path.Join(sendDir, fmt.Sprintf("%s-%s-%s%s", kind, time.Now().UTC().Format("20060102-150405"), hex.EncodeToString(rnd[:]), ext))
	f, err := root.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", fmt.Errorf("save %s: %w", name, err)
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return "", fmt.Errorf("save %s: %w", name, err)
	}
	return name, f.Close()
}

// explain turns an action's error into a Failure for the model.
func (w *Worker) explain(inst *instance, t *tab, s Action, err error) error {
	var f *Failure
	if errors.As(err, &f) {
		return f
	}
	if inst.dead() {
		return &Failure{Kind: "browser_crashed", Message: "the browser crashed during the call; it is restarting",
			Fix: "call choir.web.browse again in a few seconds; open tabs were lost", Retryable: true}
	}
	if r := t.takeRefused(w.logger); len(r) > 0 && s.Action == "navigate" {
		return &Failure{Kind: "refused_address", Message: r[0], Fix: "use a public http or https URL"}
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded) && (s.Action == "click" || s.Action == "type" || s.Action == "wait"):
		return &Failure{Kind: "selector_timeout", Message: fmt.Sprintf("selector %q did not appear in time", s.Selector),
			Fix: "check the selector against the page's html (mode html), or wait longer with timeout_ms"}
	case errors.Is(err, context.DeadlineExceeded) && s.Action == "navigate":
		return &Failure{Kind: "navigation_timeout", Message: fmt.Sprintf("%s did not load in time", s.URL),
			Fix: "try again later, or raise web.browse_navigation_timeout_ms in config.json", Retryable: true}
	case errors.Is(err, context.DeadlineExceeded):
		return &Failure{Kind: "timeout", Message: s.Action + " did not finish in time", Retryable: true}
	case errors.Is(err, context.Canceled):
		return err
	}
	return &Failure{Kind: "browser_error", Message: fmt.Sprintf("%s: %v", s.Action, err)}
}

// refused is the model's view of a guard refusal.
func refused(err error) *Failure {
	if errors.Is(err, netguard.ErrScheme) {
		return &Failure{Kind: "refused_scheme", Message: err.Error(), Fix: "use an http or https URL"}
	}
	return &Failure{Kind: "refused_address", Message: err.Error(), Fix: "use a public http or https URL"}
}

// cutUTF8 cuts s to at most n bytes on a character boundary.
func cutUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
