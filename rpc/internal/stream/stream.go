// Package stream is the event stream of the agent protocol below its
// messages: choird's per-session queue of encoded pushes, kept for
// resumption after they are written (Queue), the loop that writes them to
// a text/event-stream with keep-alive pings (Serve), the event IDs that
// let a reconnecting agent resume (EventID), and the agent's lenient
// parser of the stream (Reader). Package rpc authenticates the stream and
// encodes the pushes; rpc/client, through rpc/internal/callclient, decodes
// them and drops duplicates.
package stream

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// writeTimeout bounds one write to an event stream, so that an agent that
// stopped reading cannot hold a handler forever.
const writeTimeout = 30 * time.Second

// EventID renders the SSE id of a push.
func EventID(epoch string, seq uint64) string { return epoch + "-" + strconv.FormatUint(seq, 10) }

// ParseEventID reads an SSE id written by EventID.
func ParseEventID(id string) (epoch string, seq uint64, ok bool) {
	epoch, n, found := strings.Cut(id, "-")
	if !found || len(epoch) == 0 || len(epoch) > 64 || strings.Trim(epoch, "0123456789abcdef") != "" {
		return "", 0, false
	}
	seq, err := strconv.ParseUint(n, 10, 64)
	if err != nil || seq == 0 {
		return "", 0, false
	}
	return epoch, seq, true
}

// Serve answers r with an event stream of q's pushes after cursor, tagged
// with epoch, and a ping comment every ping while there are none, until
// sub is replaced, the queue closed, stop closed or the request ended. sub
// must be attached to q.
func Serve(w http.ResponseWriter, r *http.Request, q *Queue, sub *Subscriber, cursor uint64, epoch string, ping time.Duration, stop <-chan struct{}) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{})
	write := func(f func() error) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(writeTimeout)) // Unsupported only in tests' recorders.
		if err := f(); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(func() error { _, err := io.WriteString(w, ": connected\n\n"); return err }) {
		return
	}
	ticker := time.NewTicker(ping)
	defer ticker.Stop()
	for {
		if batch := q.Since(cursor); len(batch) > 0 {
			ok := write(func() error {
				for _, p := range batch {
					if _, err := fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", EventID(epoch, p.Seq), p.Kind, p.Data); err != nil {
						return err
					}
				}
				return nil
			})
			if !ok {
				return
			}
			cursor = batch[len(batch)-1].Seq
			q.MarkWritten(cursor)
			continue
		}
		select {
		case <-sub.Notify:
		case <-ticker.C:
			if !write(func() error { _, err := io.WriteString(w, ": ping\n\n"); return err }) {
				return
			}
		case <-sub.Gone:
			return
		case <-stop:
			return
		case <-r.Context().Done():
			return
		}
	}
}
