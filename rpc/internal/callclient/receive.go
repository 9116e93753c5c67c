package callclient

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"time"

	"github.com/choirhq/choir/rpc/internal/stream"
	"github.com/choirhq/choir/rpc/internal/transport"
)

// Receiver holds the event stream open.
type Receiver struct {
	Conn *Conn
	// Path is the event stream's; LastEventIDHeader carries the resume
	// position.
	Path, LastEventIDHeader string
	// Refused turns a refusal of the stream into an error; Permanent
	// reports whether reconnecting after err cannot help.
	Refused   func(status int, body []byte) error
	Permanent func(err error) bool
	// Handle decodes and delivers a push that was not delivered before,
	// and reports false if it cannot: the push is then logged and skipped.
	Handle func(epoch string, seq uint64, ev stream.Event) (delivered bool, err error)
}

// Receive delivers pushes to r.Handle until ctx ends or the stream is
// refused for good, reconnecting with exponential backoff, with jitter,
// when it breaks or falls silent. It returns ctx's error, or the refusal
// wrapped.
func (r *Receiver) Receive(ctx context.Context) error {
	var st position
	delay := r.Conn.cfg.Backoff[0]
	for {
		connected, err := r.stream(ctx, &st)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if r.Permanent(err) {
			return fmt.Errorf("receive pushes via %s: %w", r.Conn.Name, err)
		}
		if connected {
			delay = r.Conn.cfg.Backoff[0]
		}
		// Full jitter on the upper half, so that agents that lost choird
		// together do not reconnect in lockstep.
		wait := delay/2 + rand.N(delay/2+1)
		r.Conn.cfg.Log.WarnContext(ctx, "push stream lost; reconnecting", "via", r.Conn.Name, "err", err, "in", wait)
		if err := Sleep(ctx, wait); err != nil {
			return err
		}
		delay = min(2*delay, r.Conn.cfg.Backoff[1])
	}
}

// position is that of the last push delivered.
type position struct {
	epoch string
	seq   uint64
}

// stream runs one connection of the event stream. connected reports
// whether choird accepted it.
func (r *Receiver) stream(ctx context.Context, st *position) (connected bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.Conn.Base+r.Path, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set(r.Conn.cfg.SessionIDHeader, r.Conn.cfg.SessionID)
	req.Header.Set("Authorization", r.Conn.cfg.Auth)
	if st.epoch != "" {
		req.Header.Set(r.LastEventIDHeader, stream.EventID(st.epoch, st.seq))
	}
	res, err := r.Conn.HC.Do(req)
	if err != nil {
		return false, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, err := transport.ReadCapped(res.Body, 1<<20)
		if err != nil {
			return false, err
		}
		return false, r.Refused(res.StatusCode, b)
	}
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt != "text/event-stream" {
		return false, fmt.Errorf("event stream answered with content type %q", res.Header.Get("Content-Type"))
	}

	idle := make(chan struct{})
	watchdog := time.AfterFunc(r.Conn.cfg.Idle, func() { close(idle); cancel() })
	defer watchdog.Stop()
	rd := stream.NewReader(res.Body, r.Conn.cfg.MaxResponse)
	for {
		ev, err := rd.Next()
		if err != nil {
			select {
			case <-idle:
				return true, fmt.Errorf("event stream silent for %s", r.Conn.cfg.Idle)
			default:
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return true, fmt.Errorf("read event stream: %w", err)
		}
		if !watchdog.Stop() {
			return true, fmt.Errorf("event stream silent for %s", r.Conn.cfg.Idle)
		}
		if err := r.deliver(ctx, st, ev); err != nil {
			return true, err
		}
		watchdog.Reset(r.Conn.cfg.Idle)
	}
}

// deliver hands one event to r.Handle unless it is a duplicate.
func (r *Receiver) deliver(ctx context.Context, st *position, ev stream.Event) error {
	if ev.Comment {
		return nil
	}
	epoch, seq, ok := stream.ParseEventID(ev.ID)
	if !ok {
		return fmt.Errorf("event stream: push without a valid id")
	}
	if epoch == st.epoch && seq <= st.seq {
		return nil // Already delivered: a resent push.
	}
	if ok, err := r.Handle(epoch, seq, ev); !ok {
		// choird sent something this client cannot read; skipping it
		// (and resuming after it) beats asking for it forever.
		r.Conn.cfg.Log.ErrorContext(ctx, "dropping malformed push", "id", ev.ID, "err", err)
	}
	st.epoch, st.seq = epoch, seq
	return nil
}
