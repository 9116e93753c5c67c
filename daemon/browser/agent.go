package browser

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	cdpbrowser "github.com/chromedp/cdproto/browser"
	"github.com/chromedp/cdproto/fetch"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/target"
	"github.com/chromedp/chromedp"

	"github.com/choirhq/choir/internal/netguard"
)

// MainTab is the tab a call uses when it names none: the first target of
// the agent's browser context, which lives as long as the context.
const MainTab = "main"

// agent is one agent's browser, its browser context and its tabs.
type agent struct {
	id      string
	w       *Worker
	call    sync.Mutex // one browse call at a time (the agent holds browser_tab:X)
	mu      sync.Mutex // guards the fields below
	inst    *instance  // the agent's own browser; nil while it restarts
	root    context.Context
	cancel  context.CancelFunc
	tabs    map[string]*tab
	proxy   *proxy // the context's own, guarded by the agent's allowlist
	err     error  // why the browser or its context could not be made
	closed  bool
	changed chan struct{} // closed and replaced whenever inst changes
	done    chan struct{} // closed with the agent
}

// tab is one tab and the requests its interception refused.
type tab struct {
	ctx     context.Context
	cancel  context.CancelFunc
	agentID string
	mu      sync.Mutex
	refused []string
	// dropped counts the refusals past maxRefused since the last take;
	// logged counts the refusals logged since then.
	dropped, logged int
	// stop ends the call running in the tab, if any (floodLimit).
	stop context.CancelCauseFunc
	// epoch counts the tab's calls. A refusal counts for the call during
	// which its request was paused: one an earlier page made (a flood
	// the tab left) is refused, but neither listed, logged nor counted
	// towards floodLimit in a later call.
	epoch int
}

// floodLimit is how many refused requests a page may fire within one
// call: past it the call ends at once with errFlood, and the page is
// frozen with the call's end, so that a page firing blocked requests in a
// loop cannot keep the worker busy at the other agents' expense.
const floodLimit = 500

// errFlood ends a call whose page passed floodLimit.
var errFlood = errors.New("the page fired too many refused requests")

// setStop sets the function that ends the tab's running call.
func (t *tab) setStop(stop context.CancelCauseFunc) {
	t.mu.Lock()
	t.stop = stop
	t.mu.Unlock()
}

// begin starts a call in the tab: refusals of requests paused from now on
// count for it, and stop ends it. Call it after a round trip in the tab,
// whose answer comes after every event of an earlier page.
func (t *tab) begin(stop context.CancelCauseFunc) {
	t.mu.Lock()
	t.epoch++
	t.stop = stop
	t.mu.Unlock()
}

// now is the tab's current epoch.
func (t *tab) now() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.epoch
}

// paused returns the epoch a request paused now belongs to.
func (t *tab) paused() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.epoch
}

// maxRefused caps the refusals a call's result lists, and maxLogged the
// refusal lines a tab logs between two calls; the rest are counted, in
// the result's last entry and in one summary line. A page firing
// thousands of blocked requests can then neither grow choird's memory nor
// flood its log.
const (
	maxRefused = 20
	maxLogged  = 10
)

// Open starts the agent's browser and gives it its browser context, at
// agent start; an agent that has one keeps it. A call for an agent that
// was never opened opens it.
func (w *Worker) Open(agentID string) error {
	_, err := w.agent(agentID)
	return err
}

// agent returns the agent, starting its browser when missing.
func (w *Worker) agent(agentID string) (*agent, error) {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return nil, &Failure{Kind: "browser_unavailable", Message: "the browser worker is shut down (choird is stopping)",
			Fix: "call again once the agent is running again", Retryable: true}
	}
	a, ok := w.agents[agentID]
	if !ok {
		a = &agent{id: agentID, w: w, changed: make(chan struct{}), done: make(chan struct{})}
		w.agents[agentID] = a
		// Held until the browser runs: a concurrent first call waits
		// for it rather than failing.
		a.mu.Lock()
	}
	w.mu.Unlock()
	if !ok {
		a.start()
		a.mu.Unlock()
	}
	a.mu.Lock()
	err, inst := a.err, a.inst
	a.mu.Unlock()
	if err != nil {
		// Forget it, so that the next call tries again.
		w.mu.Lock()
		if w.agents[agentID] == a {
			delete(w.agents, agentID)
		}
		w.mu.Unlock()
		a.close()
		return nil, err
	}
	if inst == nil || inst.dead() {
		return nil, &Failure{Kind: "browser_restarting", Message: "the agent's browser crashed and is restarting",
			Fix: "call choir.web.browse again in a few seconds; open tabs were lost", Retryable: true}
	}
	return a, nil
}

// CloseAgent stops the agent's browser, with its context, tabs and
// cookies, at agent stop.
func (w *Worker) CloseAgent(agentID string) {
	w.mu.Lock()
	a, ok := w.agents[agentID]
	delete(w.agents, agentID)
	w.mu.Unlock()
	if ok {
		a.close()
		w.logger.Info("browser context disposed of", slog.String("agent_id", agentID))
	}
}

// Agents lists the agents that have a browser.
func (w *Worker) Agents() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	ids := make([]string, 0, len(w.agents))
	for id := range w.agents {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// start launches the agent's browser and makes its context; a.mu is
// held. A failure is left in a.err.
func (a *agent) start() {
	inst, err := a.w.launch(a.id)
	if err != nil {
		a.err = &Failure{Kind: "browser_unavailable", Message: err.Error(), Retryable: true,
			Fix: "call again in a while; the operator should check choird's log and the chromium package"}
		return
	}
	a.install(inst)
	if a.err != nil {
		a.inst = nil
		inst.stop()
		return
	}
	a.w.logger.Info("browser context created", slog.String("agent_id", a.id))
}

// install makes inst the agent's browser, gives the agent a fresh context
// in it and watches it for a crash; a.mu is held.
func (a *agent) install(inst *instance) {
	a.inst = inst
	close(a.changed)
	a.changed = make(chan struct{})
	a.reset(inst)
	if a.err != nil {
		return
	}
	a.w.wg.Go(func() {
		select {
		case <-inst.lost:
			a.recover(inst)
		case <-a.done:
		}
	})
}

// recover replaces the agent's crashed browser: its context died with
// it, and the agent gets a fresh one in the new browser.
func (a *agent) recover(dead *instance) {
	a.mu.Lock()
	if a.closed || a.inst != dead {
		a.mu.Unlock()
		return
	}
	a.inst = nil
	a.dropContext()
	a.mu.Unlock()
	a.w.mu.Lock()
	a.w.restarts++
	a.w.mu.Unlock()
	log := a.w.logger.With(slog.String("agent_id", a.id))
	log.Error("browser lost; restarting it", slog.Int("pid", dead.pid))
	dead.stop()

	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 10*time.Second) {
		inst, err := a.w.launch(a.id)
		if err == nil {
			a.mu.Lock()
			if a.closed { // stopped meanwhile
				a.mu.Unlock()
				inst.stop()
				return
			}
			a.install(inst)
			err = a.err
			a.mu.Unlock()
			if err == nil {
				log.Info("browser restarted", slog.Int("pid", inst.pid))
				return
			}
			a.mu.Lock()
			a.inst = nil
			a.mu.Unlock()
			inst.stop()
		}
		log.Error("browser restart failed; retrying", slog.String("error", err.Error()), slog.Duration("backoff", backoff))
		select {
		case <-time.After(backoff):
		case <-a.done:
			return
		}
	}
}

// reset gives the agent a fresh browser context in inst; a.mu is held.
func (a *agent) reset(inst *instance) {
	a.dropContext()
	a.tabs, a.err = map[string]*tab{}, nil
	id := a.id
	px, err := startProxy(func() *netguard.Guard { return a.w.netGuard(id) }, a.w.logger.With(slog.String("agent_id", id)))
	if err != nil {
		a.err = fmt.Errorf("start the browser proxy of agent %s: %w", a.id, err)
		return
	}
	root, cancel := chromedp.NewContext(inst.ctx, chromedp.WithNewBrowserContext(func(p *target.CreateBrowserContextParams) {
		// Every connection of the agent's pages, loopback included, goes
		// through the agent's own guarded proxy.
		p.ProxyServer, p.ProxyBypassList = "http://"+px.addr(), "<-loopback>"
	}))
	t := &tab{ctx: root, cancel: cancel, agentID: a.id}
	err = withinSetup(cancel, func() error {
		if err := a.w.guard(t); err != nil {
			return err
		}
		return denyDownloads(root)
	})
	if errors.Is(err, errSetupTimeout) {
		// A browser that cannot open a tab serves no call: it is given
		// up, and the next call starts another (agentFor).
		cancel()
		px.close()
		a.w.logger.Error("the browser did not answer while making the agent's context; it is stopped",
			slog.String("agent_id", a.id), slog.Duration("waited", contextSetupTimeout))
		a.err = &Failure{Kind: "browser_unavailable", Retryable: true,
			Message: fmt.Sprintf("the agent's browser did not answer within %s and was stopped", contextSetupTimeout),
			Fix:     "call choir.web.browse again: a new browser starts; open tabs were lost"}
		inst.stop()
		return
	}
	if err != nil {
		cancel()
		px.close()
		a.err = fmt.Errorf("create the browser context of agent %s: %w", a.id, err)
		return
	}
	a.root, a.cancel, a.proxy = root, cancel, px
	a.tabs[MainTab] = t
}

// dropContext disposes of the agent's context and its proxy; a.mu is
// held.
func (a *agent) dropContext() {
	if a.cancel != nil {
		for name, t := range a.tabs {
			if name != MainTab {
				t.cancel()
			}
		}
		a.cancel()
	}
	if a.proxy != nil {
		a.proxy.close()
	}
	a.cancel, a.root, a.tabs, a.proxy = nil, nil, nil, nil
}

// close disposes of the context and stops the agent's browser.
func (a *agent) close() {
	a.mu.Lock()
	if a.closed {
		a.mu.Unlock()
		return
	}
	a.closed = true
	close(a.done)
	a.dropContext()
	inst := a.inst
	a.inst = nil
	a.mu.Unlock()
	inst.stop()
}

// tab returns the named tab, opening it in the agent's context when
// missing, within the tab limit.
func (a *agent) tab(name string, maxTabs int) (*tab, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.root == nil {
		return nil, &Failure{Kind: "browser_restarting", Message: "the agent's browser context is not ready",
			Fix: "call again in a few seconds", Retryable: true}
	}
	if t, ok := a.tabs[name]; ok {
		return t, nil
	}
	if len(a.tabs) >= maxTabs {
		names := make([]string, 0, len(a.tabs))
		for n := range a.tabs {
			names = append(names, n)
		}
		slices.Sort(names)
		return nil, &Failure{Kind: "too_many_tabs", Message: fmt.Sprintf("%d tabs are open (%s), the most allowed",
			len(a.tabs), strings.Join(names, ", ")),
			Fix: "reuse a tab, or close one with close_tab (the limit is web.browse_max_tabs in config.json)"}
	}
	ctx, cancel := chromedp.NewContext(a.root) // same browser context: shares the agent's cookies only
	t := &tab{ctx: ctx, cancel: cancel, agentID: a.id}
	if err := a.w.guard(t); err != nil {
		cancel()
		return nil, fmt.Errorf("open tab %s: %w", name, err)
	}
	a.tabs[name] = t
	return t, nil
}

// closeTab closes a tab; the main tab is blanked instead, since the
// context lives in it.
func (a *agent) closeTab(name string) {
	a.mu.Lock()
	t, ok := a.tabs[name]
	if ok && name != MainTab {
		delete(a.tabs, name)
	}
	a.mu.Unlock()
	if !ok {
		return
	}
	if name == MainTab {
		ctx, cancel := context.WithTimeout(t.ctx, 10*time.Second)
		defer cancel()
		_ = chromedp.Do(ctx, chromedp.Navigate("about:blank"))
		return
	}
	t.cancel()
}

// interceptAll pauses every request of a tab until the guard decides it.
var interceptAll = fetch.EnableParams{Patterns: []*fetch.RequestPattern{{URLPattern: "*"}}}

// guard turns on request interception in the tab: every request, a
// navigation, a redirect or a sub-request, waits until the guard allows it.
// It also keeps the host's files out of the page's reach: a file chooser
// (an <input type=file>, showOpenFilePicker) is intercepted and never
// answered, so no file is ever chosen, and drags are intercepted, so no
// file is ever dropped; each is refused in the call's result and logged.
func (w *Worker) guard(t *tab) error {
	if err := chromedp.Listen(t.ctx, func(ev any) {
		switch e := ev.(type) {
		case *fetch.EventRequestPaused:
			// Never call the browser from the listener; the epoch is read
			// here, in the order of the tab's events and answers.
			go w.decide(t, e, t.paused())
		case *page.EventFileChooserOpened:
			w.refuseHostFile(t, "file chooser", "the page opened a file chooser ("+string(e.Mode)+"); it was left unanswered")
		case *input.EventDragIntercepted:
			w.refuseHostFile(t, "drag and drop", "a drag was intercepted and not dropped")
		}
	}); err != nil {
		return err
	}
	if _, err := chromedp.Call(t.ctx, fetch.Enable, interceptAll); err != nil {
		return err
	}
	if _, err := chromedp.Call(t.ctx, page.SetInterceptFileChooserDialog, page.SetInterceptFileChooserDialogParams{Enabled: true}); err != nil {
		return fmt.Errorf("intercept file choosers: %w", err)
	}
	if _, err := chromedp.Call(t.ctx, input.SetInterceptDrags, input.SetInterceptDragsParams{Enabled: true}); err != nil {
		return fmt.Errorf("intercept drags: %w", err)
	}
	return nil
}

// refuseHostFile records and logs a page's attempt at a host file.
func (w *Worker) refuseHostFile(t *tab, what, detail string) {
	msg := what + " refused: " + detail + "; the browser never reads a host file for a page"
	if !t.refuse(t.now(), msg) {
		return
	}
	w.logger.Warn("browser host file access refused", slog.String("agent_id", t.agentID), slog.String("what", what),
		slog.String("detail", detail))
}

// denyDownloads makes the browser context refuse every download, so that
// no page writes to the host's disk.
func denyDownloads(root context.Context) error {
	id := chromedp.FromContext(root).BrowserContextID
	if _, err := chromedp.CallBrowser(root, cdpbrowser.SetDownloadBehavior, cdpbrowser.SetDownloadBehaviorParams{
		Behavior: cdpbrowser.SetDownloadBehaviorBehaviorDeny, BrowserContextID: id}); err != nil {
		return fmt.Errorf("deny downloads: %w", err)
	}
	return nil
}

// decide lets one paused request go on, or fails it.
func (w *Worker) decide(t *tab, e *fetch.EventRequestPaused, epoch int) {
	ctx, cancel := context.WithTimeout(t.ctx, 30*time.Second)
	defer cancel()
	u := e.Request.URL
	var err error
	if !strings.HasPrefix(u, "data:") && !strings.HasPrefix(u, "blob:") {
		err = w.netGuard(t.agentID).CheckResolved(u, func(host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		})
	}
	if err != nil {
		if t.refuse(epoch, err.Error()) {
			w.logger.Warn("browser request refused", slog.String("agent_id", t.agentID), slog.String("url", shorten(u)),
				slog.String("error", err.Error()))
		}
		_, _ = chromedp.Call(ctx, fetch.FailRequest, fetch.FailRequestParams{RequestID: e.RequestID,
			ErrorReason: network.ErrorReasonBlockedByClient})
		return
	}
	_, _ = chromedp.Call(ctx, fetch.ContinueRequest, fetch.ContinueRequestParams{RequestID: e.RequestID})
}

// refuse records a refusal of a request paused in epoch, within
// maxRefused, and reports whether it may be logged (within maxLogged).
func (t *tab) refuse(epoch int, msg string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if epoch != t.epoch {
		return false // an earlier call's page: refused, counted for none
	}
	if len(t.refused) < maxRefused {
		t.refused = append(t.refused, msg)
	} else {
		t.dropped++
	}
	t.logged++
	if t.logged == floodLimit && t.stop != nil {
		t.stop(errFlood)
	}
	return t.logged <= maxLogged
}

// takeRefused returns and forgets the refusals seen so far, the last
// entry counting those past maxRefused; log receives one summary line of
// the refusals that were not logged one by one.
func (t *tab) takeRefused(log *slog.Logger) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	r := t.refused
	if t.dropped > 0 {
		r = append(r, fmt.Sprintf("... and %d more requests refused", t.dropped))
	}
	if quiet := t.logged - maxLogged; quiet > 0 && log != nil {
		log.Warn("browser requests refused without a line each", slog.String("agent_id", t.agentID), slog.Int("count", quiet))
	}
	t.refused, t.dropped, t.logged = nil, 0, 0
	return r
}

// shorten shortens a URL for a log line.
func shorten(s string) string {
	if len(s) > 200 {
		return s[:200] + "..."
	}
	return s
}

// contextSetupTimeout bounds the browser calls that make an agent's
// context (a new tab, request interception). They are answered in
// milliseconds; a browser that has not answered them in this time, a
// wedged one, would hold the agent's lock and every later call forever.
const contextSetupTimeout = 30 * time.Second

// errSetupTimeout is a context setup the browser never answered.
var errSetupTimeout = errors.New("the browser did not answer")

// withinSetup runs f, the setup of a context that cancel disposes of, for
// at most contextSetupTimeout: then it cancels the context, which ends
// the browser calls f waits on, and returns errSetupTimeout.
func withinSetup(cancel context.CancelFunc, f func() error) error {
	done := make(chan error, 1)
	go func() { done <- f() }()
	timer := time.NewTimer(contextSetupTimeout)
	defer timer.Stop()
	select {
	case err := <-done:
		return err
	case <-timer.C:
		cancel()
		<-done
		return errSetupTimeout
	}
}
