package console

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/daemon/control"
)

// recheckEvery is how often an open event stream checks that its session
// still lives: a revoked or expired session's stream ends.
const recheckEvery = 2 * time.Second

// snapshot is what the live pages show: the agents' table, rendered as the
// overview renders it, and the pending approvals' count and fingerprint.
type snapshot struct {
	agents    string
	approvals string
}

// feed looks for changes once for every open page: while any page
// listens, one goroutine reads the overview every PollInterval and hands
// each listener the latest snapshot (a slow listener skips to the newest).
// Every console session is the operator's, so all see the same.
type feed struct {
	c    *Console
	mu   sync.Mutex
	subs map[chan snapshot]struct{}
	last snapshot
	stop context.CancelFunc
}

// subscribe adds a listener, starting the poller for the first one, and
// returns its channel, already holding the latest snapshot, if any, and
// the function that removes it.
func (f *feed) subscribe() (<-chan snapshot, func()) {
	ch := make(chan snapshot, 1)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.subs == nil {
		f.subs = map[chan snapshot]struct{}{}
	}
	f.subs[ch] = struct{}{}
	if f.last != (snapshot{}) {
		ch <- f.last
	}
	if f.stop == nil {
		ctx, cancel := context.WithCancel(context.Background())
		f.stop = cancel
		go f.poll(ctx)
	}
	return ch, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		delete(f.subs, ch)
		if len(f.subs) == 0 && f.stop != nil {
			f.stop()
			f.stop, f.last = nil, snapshot{}
		}
	}
}

// poll reads the overview every PollInterval until ctx ends, and
// publishes what changed.
func (f *feed) poll(ctx context.Context) {
	tick := time.NewTicker(f.c.o.PollInterval)
	defer tick.Stop()
	for {
		if s, err := f.c.snapshot(ctx); err == nil {
			f.publish(ctx, s)
		} else if ctx.Err() == nil {
			f.c.o.Logger.WarnContext(ctx, "console live update failed", slog.String("error", err.Error()))
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func (f *feed) publish(ctx context.Context, s snapshot) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if ctx.Err() != nil || s == f.last {
		return
	}
	f.last = s
	for ch := range f.subs {
		select {
		case <-ch: // the listener has not taken the older one: skip it
		default:
		}
		ch <- s
	}
}

// feedScope is the scope the live feed reads with: the operator's, as
// every console session's is. Reads are not audited.
var feedScope = control.Scope{Admin: true, Actor: "console"}

// snapshot reads and renders what the live pages show.
func (c *Console) snapshot(ctx context.Context) (snapshot, error) {
	pending, err := c.o.Approvals.List(ctx, feedScope, "")
	if err != nil {
		return snapshot{}, err
	}
	agents, err := c.agents(ctx, feedScope, feedUsageAge)
	if err != nil {
		return snapshot{}, err
	}
	var buf bytes.Buffer
	if err := c.tmpl.ExecuteTemplate(&buf, "agents", agents); err != nil {
		return snapshot{}, err
	}
	h := sha256.New()
	for _, a := range pending {
		h.Write([]byte(a.ID))
	}
	return snapshot{agents: buf.String(), approvals: fmt.Sprintf("%d %x", len(pending), h.Sum(nil)[:8])}, nil
}

// events streams the live pages' changes (Server-Sent Events): event
// "agents" carries the agents' table, rendered as the page renders it,
// whenever it changed; event "approvals" the number of pending approvals
// and a fingerprint of them, whenever they changed; event "ended" that
// the session ended, after which the stream closes.
func (c *Console) events(w http.ResponseWriter, r *http.Request, _ login.Session) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		c.fail(w, r, http.StatusInternalServerError, "This server cannot stream.")
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 1000\n\n")
	flusher.Flush()

	ctx := r.Context()
	updates, done := c.feed.subscribe()
	defer done()
	recheck := time.NewTicker(recheckEvery)
	defer recheck.Stop()
	var sent snapshot
	for {
		select {
		case <-ctx.Done():
			return
		case <-recheck.C:
			if _, err := c.o.Logins.Authenticate(ctx, cookieValue(r)); err != nil {
				fmt.Fprint(w, "event: ended\ndata: your session has ended\n\n")
				flusher.Flush()
				return
			}
		case s := <-updates:
			if s.agents != sent.agents && writeEvent(w, "agents", s.agents) != nil {
				return
			}
			if s.approvals != sent.approvals && writeEvent(w, "approvals", s.approvals) != nil {
				return
			}
			sent = s
			flusher.Flush()
		}
	}
}

// writeEvent writes one event, each line of data on a data: line.
func writeEvent(w http.ResponseWriter, name, data string) error {
	var b strings.Builder
	b.WriteString("event: " + name + "\n")
	for l := range strings.SplitSeq(data, "\n") {
		b.WriteString("data: " + strings.TrimSuffix(l, "\r") + "\n")
	}
	b.WriteString("\n")
	_, err := fmt.Fprint(w, b.String())
	return err
}

func cookieValue(r *http.Request) string {
	if ck, err := r.Cookie(CookieName); err == nil {
		return ck.Value
	}
	return ""
}
