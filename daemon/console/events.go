package console

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/choirhq/choir/daemon/console/login"
)

// recheckEvery is how often an open event stream checks that its session
// still lives: a revoked or expired session's stream ends.
const recheckEvery = 5 * time.Second

// events streams the overview's live changes (Server-Sent Events): event
// "agents" carries the agents' table, rendered as the page renders it,
// whenever it changed; event "approvals" the number of pending approvals
// and a fingerprint of them, whenever they changed. It looks every
// PollInterval, so a change shows within that and a render.
func (c *Console) events(w http.ResponseWriter, r *http.Request, sess login.Session) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		c.fail(w, r, http.StatusInternalServerError, "This server cannot stream.")
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	fmt.Fprint(w, "retry: 1000\n\n")
	flusher.Flush()

	ctx := r.Context()
	tick := time.NewTicker(c.o.PollInterval)
	defer tick.Stop()
	var lastAgents, lastApprovals [32]byte
	checked := time.Now()
	for {
		if err := c.sendChanges(w, r, sess, &lastAgents, &lastApprovals); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if time.Since(checked) >= recheckEvery {
			checked = time.Now()
			if _, err := c.o.Logins.Authenticate(ctx, cookieValue(r)); err != nil {
				fmt.Fprint(w, "event: ended\ndata: your session has ended\n\n")
				flusher.Flush()
				return
			}
		}
	}
}

// sendChanges writes the events whose content changed since last time.
func (c *Console) sendChanges(w http.ResponseWriter, r *http.Request, sess login.Session, lastAgents, lastApprovals *[32]byte) error {
	ctx := r.Context()
	agents, err := c.agents(ctx, sess.Scope())
	if err != nil {
		return nil // shown again at the next look
	}
	var buf bytes.Buffer
	if err := c.tmpl.ExecuteTemplate(&buf, "agents", agents); err != nil {
		return err
	}
	if sum := sha256.Sum256(buf.Bytes()); sum != *lastAgents {
		*lastAgents = sum
		if err := writeEvent(w, "agents", buf.String()); err != nil {
			return err
		}
	}
	pending, err := c.o.Approvals.List(ctx, sess.Scope(), "")
	if err != nil {
		return nil
	}
	var ids strings.Builder
	for _, a := range pending {
		ids.WriteString(a.ID)
	}
	if sum := sha256.Sum256([]byte(ids.String())); sum != *lastApprovals {
		*lastApprovals = sum
		return writeEvent(w, "approvals", fmt.Sprintf("%d %x", len(pending), sum[:8]))
	}
	return nil
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
