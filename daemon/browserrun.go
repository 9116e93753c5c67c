package daemon

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/browser"
	"github.com/choirhq/choir/rpc"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// browserRetryAfter is how long a failed browser start is remembered
// before the next call tries again.
const browserRetryAfter = 30 * time.Second

// browserReapEvery is how often contexts of agents that stopped are
// disposed of, as a backstop: a session that ends through choird
// (closeSession) disposes of its agent's context at once; only the crash
// detector's heartbeat sweep, which ends sessions in SQL, is left to this.
const browserReapEvery = 5 * time.Second

// sessionCloser is the agent protocol's server as the control layer sees
// it: closing a session's stream also disposes of the agent's browser
// context.
type sessionCloser struct {
	*rpc.Server
	d *Daemon
}

func (s sessionCloser) CloseSession(ctx context.Context, sessionID string) error {
	return s.d.closeSession(ctx, sessionID)
}

// closeSession closes an ended session's stream and disposes of its
// agent's browser context, unless the agent already has another live
// session: a page a session opened never outlives it.
func (d *Daemon) closeSession(ctx context.Context, sessionID string) error {
	err := d.rpc.CloseSession(ctx, sessionID)
	d.browser.sessionEnded(ctx, sessionID)
	return err
}

// sessionEnded disposes of the browser context of the agent whose session
// ended, when the browser runs and the agent has no live session left.
func (b *browserHost) sessionEnded(ctx context.Context, sessionID string) {
	b.mu.Lock()
	w := b.w
	b.mu.Unlock()
	id, err := uuid.Parse(sessionID)
	if w == nil || err != nil {
		return
	}
	q := seam.Queries(b.d.pool)
	s, err := q.SessionGetByID(ctx, id)
	if err != nil {
		b.d.logger.Warn("browser context of an ended session not found", slog.String("session_id", sessionID),
			slog.String("error", err.Error()))
		return
	}
	if _, err := q.SessionGetLiveByAgent(ctx, s.AgentID); errors.Is(err, choirsql.ErrNotFound) {
		w.CloseAgent(s.AgentID)
	}
}

// browserHost runs the browser worker for choir.web.browse. Chromium starts
// on the first browse call, not with choird: most hosts never browse, and
// a missing chromium package must not stop choird. From then on every
// agent that starts gets its context at once, and the context of every
// agent whose session ended is disposed of within browserReapEvery.
type browserHost struct {
	ctx    context.Context // choird's serving context: its end stops the browser
	d      *Daemon
	mu     sync.Mutex
	w      *browser.Worker
	err    error
	failAt time.Time
}

func newBrowserHost(ctx context.Context, d *Daemon) *browserHost {
	return &browserHost{ctx: ctx, d: d}
}

// worker returns the running worker, starting it when needed.
func (b *browserHost) worker() (*browser.Worker, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.w != nil {
		return b.w, nil
	}
	if b.ctx.Err() != nil {
		return nil, errors.New("choird is stopping")
	}
	if b.err != nil && time.Since(b.failAt) < browserRetryAfter {
		return nil, b.err
	}
	logger := b.d.logger.With(slog.String("component", "browser"))
	w, err := browser.New(browser.Config{Logger: logger,
		SettingsFunc: func(agentID string) config.Web { return b.d.Snapshot().Config.WebFor(agentID) }})
	if err != nil {
		b.err, b.failAt = err, time.Now()
		logger.Error("browser worker did not start; choir.web.browse is unavailable", slog.String("error", err.Error()))
		return nil, err
	}
	b.w, b.err = w, nil
	go b.reap(w)
	return w, nil
}

// close stops the browser, if it runs, and waits for it: no Chromium
// outlives choird. Nil-safe.
func (b *browserHost) close() {
	if b == nil {
		return
	}
	b.mu.Lock()
	w := b.w
	b.w, b.err, b.failAt = nil, errors.New("choird is stopping"), time.Now().Add(24*time.Hour)
	b.mu.Unlock()
	if w != nil {
		w.Close()
	}
}

// reap disposes of the contexts of agents without a live session.
func (b *browserHost) reap(w *browser.Worker) {
	t := time.NewTicker(browserReapEvery)
	defer t.Stop()
	for {
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
		}
		q := seam.Queries(b.d.pool)
		for _, id := range w.Agents() {
			_, err := q.SessionGetLiveByAgent(b.ctx, id)
			if errors.Is(err, choirsql.ErrNotFound) {
				w.CloseAgent(id)
			}
		}
	}
}
