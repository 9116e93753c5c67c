// Package browser is choird's browser worker for choir.web.browse (spec 8.7,
// 14.3, 18): one headless Chromium (Debian's chromium package) driven by
// chromedp, with one isolated browser context per running agent, created
// when the agent starts and disposed of when it stops, so that no agent
// sees another's tabs or cookies. Every request a page makes, navigations,
// redirects and sub-requests alike, is paused by request interception and
// checked by internal/netguard after DNS resolution. When the browser
// crashes the worker starts a new one and gives every agent a fresh
// context; a call made meanwhile gets a retryable error.
package browser

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/netguard"
)

// ErrNoChromium says no Chromium executable was found.
var ErrNoChromium = errors.New("no chromium executable found: install Debian's chromium package (apt-get install chromium)")

// Failure is a browse failure the model should see: a stable kind, what
// happened, what to do, and whether calling again can succeed.
type Failure struct {
	Kind      string `json:"error"`
	Message   string `json:"message"`
	Fix       string `json:"fix,omitempty"`
	Retryable bool   `json:"retryable,omitempty"`
}

func (f *Failure) Error() string { return f.Kind + ": " + f.Message }

// Config configures a Worker.
type Config struct {
	// ExecPath is the Chromium executable; empty takes Debian's binary
	// (not its launcher script) or chromium, chromium-browser or
	// google-chrome on PATH.
	ExecPath string
	// SettingsFunc returns the current web limits and allowlist of an
	// agent (choird's configuration, config.Config.WebFor); nil means the
	// defaults. An agent's pages reach only what its own allowlist opens.
	SettingsFunc func(agentID string) config.Web
	// Logger receives the worker's lines; nil discards them.
	Logger *slog.Logger
	// MemoryMax (bytes) and CPUMax (cores) limit the cgroup the browser
	// runs in; zero takes DefaultMemoryMax and DefaultCPUMax.
	MemoryMax int64
	CPUMax    float64
}

// Worker owns the browser process and the agents' contexts. It is safe
// for concurrent use.
type Worker struct {
	cfg    Config
	path   string
	logger *slog.Logger
	proxy  *proxy

	mu       sync.Mutex
	inst     *instance // nil while restarting
	agents   map[string]*agent
	closed   bool
	restarts int
	changed  chan struct{} // closed and replaced whenever inst changes
	done     chan struct{}
	wg       sync.WaitGroup
}

// instance is one browser process.
type instance struct {
	ctx         context.Context // the browser's first chromedp context
	cancel      context.CancelFunc
	allocCancel context.CancelFunc
	lost        <-chan struct{}
	pid         int
	cgroup      *cgroup // nil when the host offers none
}

// dead reports whether the browser's connection is lost (a crash that
// recover may not have seen yet).
func (i *instance) dead() bool {
	select {
	case <-i.lost:
		return true
	default:
		return false
	}
}

// New starts the browser. It fails when no Chromium can be found or
// started.
func New(cfg Config) (*Worker, error) {
	path := cfg.ExecPath
	if path == "" {
		if path = findChromium(); path == "" {
			return nil, ErrNoChromium
		}
	}
	w := &Worker{cfg: cfg, path: path, logger: cfg.Logger, agents: map[string]*agent{},
		changed: make(chan struct{}), done: make(chan struct{})}
	if w.logger == nil {
		w.logger = slog.New(slog.DiscardHandler)
	}
	w.logger = w.logger.With(slog.String("component", "browser"))
	// The browser's own proxy serves only its default context, which no
	// agent uses: it opens nothing. Each agent's context has its own.
	px, err := startProxy(func() *netguard.Guard { g, _ := netguard.New(nil); return g }, w.logger)
	if err != nil {
		return nil, fmt.Errorf("start the browser's proxy: %w", err)
	}
	w.proxy = px
	inst, err := w.launch()
	if err != nil {
		px.close()
		return nil, err
	}
	w.setInstance(inst)
	return w, nil
}

func (w *Worker) settings(agentID string) config.Web {
	if w.cfg.SettingsFunc == nil {
		return config.Web{}.WithDefaults()
	}
	return w.cfg.SettingsFunc(agentID).WithDefaults()
}

// netGuard is the SSRF guard of the agent's current configuration; an
// invalid allowlist (config validation refuses one) opens nothing.
func (w *Worker) netGuard(agentID string) *netguard.Guard {
	g, err := netguard.New(w.settings(agentID).AllowHosts)
	if err != nil {
		g, _ = netguard.New(nil)
	}
	return g
}

// launch starts a browser process.
func (w *Worker) launch() (*instance, error) {
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(w.path),
		chromedp.WindowSize(1280, 900), chromedp.Flag("mute-audio", true),
		// No service workers: their requests would bypass the page's
		// request interception. No back-forward cache: a page restored
		// from it fires no load event, and back would wait for one.
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,ServiceWorker,BackForwardCache"),
		// Every connection, loopback included, goes through the guarded
		// proxy; pages cannot open windows (new targets would not be
		// intercepted).
		chromedp.ProxyServer("http://"+w.proxy.addr()), chromedp.Flag("proxy-bypass-list", "<-loopback>"),
		chromedp.Flag("disable-popup-blocking", false), chromedp.Flag("block-new-web-contents", true),
		// WebRTC would send UDP (host and STUN candidates) around the
		// proxy: only proxied connections, and the proxy speaks no UDP.
		chromedp.Flag("force-webrtc-ip-handling-policy", "disable_non_proxied_udp"),
		chromedp.Flag("webrtc-ip-handling-policy", "disable_non_proxied_udp"))
	if os.Geteuid() == 0 {
		// Chromium refuses to run its sandbox as root; choird's systemd
		// unit runs it as an unprivileged user, where the sandbox is on.
		opts = append(opts, chromedp.NoSandbox)
	}
	allocCtx, allocCancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(allocCtx)
	if err := chromedp.Do(ctx); err != nil {
		cancel()
		allocCancel()
		return nil, fmt.Errorf("start chromium %s: %w", w.path, err)
	}
	b := chromedp.FromContext(ctx).Browser
	inst := &instance{ctx: ctx, cancel: cancel, allocCancel: allocCancel, lost: b.LostConnection}
	if p := b.Process(); p != nil {
		inst.pid = p.Pid
	}
	w.logger.Info("browser started", slog.String("path", w.path), slog.Int("pid", inst.pid))
	w.confine(inst)
	return inst, nil
}

// confine puts the browser's processes in a cgroup with memory and CPU
// limits, or says clearly in the log why it cannot.
func (w *Worker) confine(inst *instance) {
	mem, cpu := cmp.Or(w.cfg.MemoryMax, DefaultMemoryMax), cmp.Or(w.cfg.CPUMax, DefaultCPUMax)
	cg, err := confine(inst.pid, mem, cpu)
	if err != nil {
		w.logger.Warn("browser runs WITHOUT memory and CPU limits: no cgroup could be made for it",
			slog.Int("pid", inst.pid), slog.String("error", err.Error()))
		return
	}
	inst.cgroup = cg
	w.logger.Info("browser confined to a cgroup", slog.Int("pid", inst.pid), slog.Any("cgroup", cg.dirs),
		slog.Int64("memory_max", mem), slog.Float64("cpu_max", cpu))
}

// CgroupDirs lists the cgroup directories the running browser is confined
// to; none when it runs unconfined.
func (w *Worker) CgroupDirs() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inst == nil || w.inst.cgroup == nil {
		return nil
	}
	return slices.Clone(w.inst.cgroup.dirs)
}

// setInstance installs inst and watches it for a crash.
func (w *Worker) setInstance(inst *instance) {
	w.mu.Lock()
	w.inst = inst
	close(w.changed)
	w.changed = make(chan struct{})
	w.mu.Unlock()
	w.wg.Go(func() {
		select {
		case <-inst.lost:
			w.recover(inst)
		case <-w.done:
		}
	})
}

// recover replaces a crashed browser: the agents' contexts die with it,
// and each agent gets a fresh one in the new browser.
func (w *Worker) recover(dead *instance) {
	w.mu.Lock()
	if w.closed || w.inst != dead {
		w.mu.Unlock()
		return
	}
	w.inst = nil
	w.restarts++
	agents := make([]*agent, 0, len(w.agents))
	for _, a := range w.agents {
		agents = append(agents, a)
	}
	w.mu.Unlock()
	w.logger.Error("browser lost; restarting it", slog.Int("pid", dead.pid))
	dead.cancel()
	dead.allocCancel()
	dead.cgroup.remove()

	for backoff := 100 * time.Millisecond; ; backoff = min(2*backoff, 10*time.Second) {
		inst, err := w.launch()
		if err == nil {
			for _, a := range agents {
				w.mu.Lock()
				live := w.agents[a.id] == a // not stopped meanwhile
				w.mu.Unlock()
				if live {
					a.reset(inst)
				}
			}
			w.setInstance(inst)
			w.logger.Info("browser restarted", slog.Int("pid", inst.pid), slog.Int("agents", len(agents)))
			return
		}
		w.logger.Error("browser restart failed; retrying", slog.String("error", err.Error()), slog.Duration("backoff", backoff))
		select {
		case <-time.After(backoff):
		case <-w.done:
			return
		}
	}
}

// current returns the live browser, or a retryable failure while it
// restarts.
func (w *Worker) current() (*instance, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.closed:
		return nil, &Failure{Kind: "browser_unavailable", Message: "the browser worker is shut down (choird is stopping)",
			Fix: "call again once the agent is running again", Retryable: true}
	case w.inst == nil || w.inst.dead():
		return nil, &Failure{Kind: "browser_restarting", Message: "the browser crashed and is restarting",
			Fix: "call choir.web.browse again in a few seconds; open tabs were lost", Retryable: true}
	}
	return w.inst, nil
}

// WaitReady blocks until a browser runs or ctx ends; for tests and
// start-up.
func (w *Worker) WaitReady(ctx context.Context) error {
	for {
		w.mu.Lock()
		ok, ch := w.inst != nil && !w.inst.dead(), w.changed
		w.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Restarts says how often the browser was restarted after a crash.
func (w *Worker) Restarts() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.restarts
}

// PID returns the browser process id, or 0 while it restarts.
func (w *Worker) PID() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.inst == nil {
		return 0
	}
	return w.inst.pid
}

// Close disposes of every agent's context and stops the browser.
func (w *Worker) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	close(w.done)
	inst, agents := w.inst, w.agents
	w.agents = map[string]*agent{}
	w.mu.Unlock()
	for _, a := range agents {
		a.close()
	}
	if inst != nil {
		inst.cancel()
		inst.allocCancel() // waits for the browser to exit
		inst.cgroup.remove()
	}
	w.wg.Wait()
	w.proxy.close()
	w.logger.Info("browser stopped")
}
