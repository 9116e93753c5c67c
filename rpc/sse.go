package rpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrPushBufferFull is returned by Server.Push when a session already has
// Limits.PushBuffer pushes that no event stream has taken.
var ErrPushBufferFull = errors.New("push buffer full")

// streamWriteTimeout bounds one write to an event stream, so that an agent
// that stopped reading cannot hold a handler forever.
const streamWriteTimeout = 30 * time.Second

// pushQueue holds a session's pushes, encoded, in sequence order.
//
// Pushes stay in the queue after they are written to a stream, because a
// write that succeeded may still not reach the agent; a reconnecting agent
// resumes from the last push it saw (Last-Event-ID). The queue holds at
// most cap pushes: a new push evicts the oldest written one, and is refused
// (ErrPushBufferFull) when all cap are still unwritten.
type pushQueue struct {
	mu      sync.Mutex
	cap     int
	last    uint64 // sequence number of the newest push
	written uint64 // highest sequence number written to a stream
	items   []queuedPush
	sub     *subscriber
	closed  bool
}

type queuedPush struct {
	seq  uint64
	kind PushKind
	data []byte
}

// subscriber is the event stream currently attached to a queue. There is
// at most one: a new stream of the same session replaces the old one, which
// is then likely a dead connection the agent has given up on.
type subscriber struct {
	notify chan struct{} // a push is waiting; capacity 1
	gone   chan struct{} // closed when replaced or the session is closed
}

func newPushQueue(capacity int) *pushQueue { return &pushQueue{cap: capacity} }

func (q *pushQueue) add(p Push, epoch string) (uint64, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.last-q.written >= uint64(q.cap) {
		return 0, fmt.Errorf("%w: %d pushes not yet taken by an event stream", ErrPushBufferFull, q.last-q.written)
	}
	p.Epoch, p.Seq = epoch, q.last+1
	data, err := json.Marshal(p)
	if err != nil {
		return 0, fmt.Errorf("encode push: %w", err)
	}
	q.last++
	if len(q.items) == q.cap {
		q.items[0] = queuedPush{}
		q.items = q.items[1:]
	}
	q.items = append(q.items, queuedPush{seq: q.last, kind: p.Kind, data: data})
	if q.sub != nil {
		select {
		case q.sub.notify <- struct{}{}:
		default:
		}
	}
	return q.last, nil
}

// since returns the pushes after seq. The slice is clipped, so later
// appends to the queue never write into it.
func (q *pushQueue) since(seq uint64) []queuedPush {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil
	}
	// Sequence numbers in the queue are consecutive.
	i := 0
	if first := q.items[0].seq; seq >= first {
		i = int(min(seq-first+1, uint64(len(q.items))))
	}
	return slices.Clip(q.items[i:])
}

func (q *pushQueue) markWritten(seq uint64) {
	q.mu.Lock()
	q.written = max(q.written, seq)
	q.mu.Unlock()
}

func (q *pushQueue) newest() uint64 {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.last
}

func (q *pushQueue) attach() *subscriber {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return nil
	}
	if q.sub != nil {
		close(q.sub.gone)
	}
	q.sub = &subscriber{notify: make(chan struct{}, 1), gone: make(chan struct{})}
	return q.sub
}

func (q *pushQueue) detach(s *subscriber) {
	q.mu.Lock()
	if q.sub == s {
		q.sub = nil
	}
	q.mu.Unlock()
}

func (q *pushQueue) attached() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.sub != nil
}

func (q *pushQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.closed = true
	if q.sub != nil {
		close(q.sub.gone)
		q.sub = nil
	}
}

// Push queues p for the session's agent and returns its sequence number. It
// never blocks: the session's event stream delivers the push as soon as it
// is attached, and a reconnecting stream resumes where its agent left off.
//
// The queue is bounded by Limits.PushBuffer. When it is full of pushes no
// stream has taken yet (the agent is away), Push returns an error wrapping
// ErrPushBufferFull and queues nothing: the caller keeps its durable record
// (inbox row, pending approval) and redelivers later. Pushes already
// written are kept for resumption only while there is room; an agent that
// resumes after they were evicted sees a gap in Seq.
func (s *Server) Push(sessionID string, p Push) (uint64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("push %s to session %s: %w: %w", p.Kind, sessionID, ErrBadRequest, err)
	}
	seq, err := s.session(sessionID).pushes.add(p, s.epoch)
	if err != nil {
		return 0, fmt.Errorf("push %s to session %s: %w", p.Kind, sessionID, err)
	}
	return seq, nil
}

// StreamAttached reports whether the session's agent has an event stream
// open.
func (s *Server) StreamAttached(sessionID string) bool {
	s.mu.Lock()
	st := s.sessions[sessionID]
	s.mu.Unlock()
	return st != nil && st.pushes.attached()
}

// eventID renders the SSE id of a push.
func eventID(epoch string, seq uint64) string { return epoch + "-" + strconv.FormatUint(seq, 10) }

// parseEventID reads an SSE id written by eventID.
func parseEventID(id string) (epoch string, seq uint64, ok bool) {
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

func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		s.reject(w, r, Errorf(CodeBadRequest, "method %s not allowed for %s; use GET", quotePath(r.Method), PathEvents))
		return
	}
	if id := r.Header.Get(HeaderRequestID); id != "" && !ValidID(id) {
		s.reject(w, r, Errorf(CodeBadRequest, "header %s: not a valid ID", HeaderRequestID))
		return
	}
	sessionID, token, err := parseAuth(r.Header)
	if err != nil {
		s.reject(w, r, err.(*Error))
		return
	}
	_, st, aerr := s.authenticate(r.Context(), "", sessionID, token)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	var cursor uint64
	if last := r.Header.Get(HeaderLastEventID); last != "" {
		epoch, seq, ok := parseEventID(last)
		if !ok {
			s.reject(w, r, Errorf(CodeBadRequest, "header %s: not a push ID (want <epoch>-<seq>)", HeaderLastEventID))
			return
		}
		// A push ID of another epoch (an earlier run of choird) says
		// nothing about this queue: start from its beginning.
		if epoch == s.epoch {
			if seq > st.pushes.newest() {
				s.reject(w, r, Errorf(CodeBadRequest, "header %s: push %d was never sent", HeaderLastEventID, seq))
				return
			}
			cursor = seq
		}
	}
	sub := st.pushes.attach()
	if sub == nil {
		s.reject(w, r, Errorf(CodeUnavailable, "session %s is closed", sessionID))
		return
	}
	defer st.pushes.detach(sub)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{})
	write := func(f func() error) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(streamWriteTimeout)) // Unsupported only in tests' recorders.
		if err := f(); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write(func() error { _, err := io.WriteString(w, ": connected\n\n"); return err }) {
		return
	}
	stop, _ := r.Context().Value(stopKey{}).(<-chan struct{})
	ticker := time.NewTicker(s.ping)
	defer ticker.Stop()
	for {
		if batch := st.pushes.since(cursor); len(batch) > 0 {
			ok := write(func() error {
				for _, p := range batch {
					if _, err := fmt.Fprintf(w, "id: %s\nevent: %s\ndata: %s\n\n", eventID(s.epoch, p.seq), p.kind, p.data); err != nil {
						return err
					}
				}
				return nil
			})
			if !ok {
				return
			}
			cursor = batch[len(batch)-1].seq
			st.pushes.markWritten(cursor)
			continue
		}
		select {
		case <-sub.notify:
		case <-ticker.C:
			if !write(func() error { _, err := io.WriteString(w, ": ping\n\n"); return err }) {
				return
			}
		case <-sub.gone:
			return
		case <-stop:
			return
		case <-r.Context().Done():
			return
		}
	}
}
