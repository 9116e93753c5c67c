// Package browser is choird's browser worker for choir.web.browse (spec 8.7,
// 14.3, 18): headless Chromium (Debian's chromium package) driven by
// chromedp, one browser process per running agent that browses, started
// at its first call and stopped when it stops, each in a cgroup of its own with
// memory and CPU limits, so that no agent sees another's tabs or cookies
// and a hostile page loads only its own agent's browser: the browser
// process, its network service and its DevTools connection are never
// shared with another agent's pages. Every request a page makes,
// navigations, redirects and sub-requests alike, is paused by request
// interception and checked by internal/netguard after DNS resolution.
// When an agent's browser crashes the worker starts a new one and gives
// the agent a fresh context; a call made meanwhile gets a retryable error.
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
	// MemoryMax (bytes) and CPUMax (cores) limit the cgroup each agent's
	// browser runs in; zero takes DefaultMemoryMax and DefaultCPUMax.
	MemoryMax int64
	CPUMax    float64
}

// Worker owns the agents' browsers. It is safe for concurrent use.
type Worker struct {
	cfg    Config
	path   string
	logger *slog.Logger
	proxy  *proxy // for the browsers' default contexts, which no agent uses

	mu       sync.Mutex
	agents   map[string]*agent
	closed   bool
	restarts int
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
// recover may not have seen yet), or there is no browser.
func (i *instance) dead() bool {
	if i == nil {
		return true
	}
	select {
	case <-i.lost:
		return true
	default:
		return false
	}
}

// stop ends the browser, waits for it to exit and removes its cgroup.
// Nil-safe.
func (i *instance) stop() {
	if i == nil {
		return
	}
	i.cancel()
	i.allocCancel() // waits for the browser to exit
	i.cgroup.remove()
}

// New makes the worker. It fails when no Chromium can be found; each
// agent's browser starts at its first call (or Open).
func New(cfg Config) (*Worker, error) {
	path := cfg.ExecPath
	if path == "" {
		if path = findChromium(); path == "" {
			return nil, ErrNoChromium
		}
	}
	w := &Worker{cfg: cfg, path: path, logger: cfg.Logger, agents: map[string]*agent{}, done: make(chan struct{})}
	if w.logger == nil {
		w.logger = slog.New(slog.DiscardHandler)
	}
	w.logger = w.logger.With(slog.String("component", "browser"))
	// A browser's own proxy serves only its default context, which no
	// agent uses: it opens nothing. Each agent's context has its own.
	px, err := startProxy(func() *netguard.Guard { g, _ := netguard.New(nil); return g }, w.logger)
	if err != nil {
		return nil, fmt.Errorf("start the browser's proxy: %w", err)
	}
	w.proxy = px
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

// launch starts a browser process for the agent, in a cgroup of its own.
func (w *Worker) launch(agentID string) (*instance, error) {
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
	// chromedp gives each allocator a fresh profile directory, removed
	// when the browser stops: agents share no profile either.
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
	w.logger.Info("browser started", slog.String("agent_id", agentID), slog.String("path", w.path), slog.Int("pid", inst.pid))
	w.confine(inst, agentID)
	return inst, nil
}

// confine puts the browser's processes in a cgroup with memory and CPU
// limits, or says clearly in the log why it cannot.
func (w *Worker) confine(inst *instance, agentID string) {
	mem, cpu := cmp.Or(w.cfg.MemoryMax, DefaultMemoryMax), cmp.Or(w.cfg.CPUMax, DefaultCPUMax)
	cg, err := confine(inst.pid, mem, cpu)
	if err != nil {
		w.logger.Warn("browser runs WITHOUT memory and CPU limits: no cgroup could be made for it", slog.String("agent_id", agentID),
			slog.Int("pid", inst.pid), slog.String("error", err.Error()))
		return
	}
	inst.cgroup = cg
	w.logger.Info("browser confined to a cgroup", slog.String("agent_id", agentID), slog.Int("pid", inst.pid),
		slog.Any("cgroup", cg.dirs), slog.Int64("memory_max", mem), slog.Float64("cpu_max", cpu))
}

// running returns the agent's live browser, or nil.
func (w *Worker) running(agentID string) *instance {
	w.mu.Lock()
	a := w.agents[agentID]
	w.mu.Unlock()
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inst == nil || a.inst.dead() {
		return nil
	}
	return a.inst
}

// CgroupDirs lists the cgroup directories the agent's running browser is
// confined to; none when it runs unconfined or not at all.
func (w *Worker) CgroupDirs(agentID string) []string {
	inst := w.running(agentID)
	if inst == nil || inst.cgroup == nil {
		return nil
	}
	return slices.Clone(inst.cgroup.dirs)
}

// PID returns the process id of the agent's browser, or 0 while it does
// not run.
func (w *Worker) PID(agentID string) int {
	if inst := w.running(agentID); inst != nil {
		return inst.pid
	}
	return 0
}

// WaitReady blocks until the agent's browser runs or ctx ends; for tests.
func (w *Worker) WaitReady(ctx context.Context, agentID string) error {
	for {
		w.mu.Lock()
		a := w.agents[agentID]
		w.mu.Unlock()
		if a == nil {
			return fmt.Errorf("agent %s has no browser", agentID)
		}
		a.mu.Lock()
		ok, ch := a.inst != nil && !a.inst.dead() && a.root != nil, a.changed
		a.mu.Unlock()
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

// Restarts says how often a browser was restarted after a crash.
func (w *Worker) Restarts() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.restarts
}

// Close stops every agent's browser.
func (w *Worker) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	close(w.done)
	agents := w.agents
	w.agents = map[string]*agent{}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, a := range agents {
		wg.Go(a.close)
	}
	wg.Wait()
	w.wg.Wait()
	w.proxy.close()
	w.logger.Info("browser stopped")
}
