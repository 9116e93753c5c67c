package rpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"time"

	"github.com/choirhq/choir/rpc/internal/stream"
	"github.com/choirhq/choir/rpc/internal/transport"
)

// ReceivePushes delivers choird's pushes to fn, in order and without
// duplicates, until ctx ends or the session is revoked. It holds the event
// stream open, calling fn for each push in sequence order, and reconnects with
// exponential backoff (ReconnectMin doubling to ReconnectMax, with jitter)
// when the stream breaks or falls silent, sending the last push ID it
// delivered so that choird resumes after it. A push already delivered in
// the same epoch is dropped. fn runs on ReceivePushes' goroutine; while it
// runs no further push is read.
//
// It returns ctx's error when ctx ends, and an error matching
// ErrUnauthenticated (or another non-retryable code) when choird refuses
// the stream, as it does once the session is revoked.
func (c *Client) ReceivePushes(ctx context.Context, fn func(Push)) error {
	var st streamState
	delay := c.backoff[0]
	for {
		connected, err := c.stream(ctx, &st, fn)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		var e *Error
		if errors.As(err, &e) && permanentCode(e.Code) {
			return fmt.Errorf("receive pushes via %s: %w", c.transport, err)
		}
		if connected {
			delay = c.backoff[0]
		}
		// Full jitter on the upper half, so that agents that lost choird
		// together do not reconnect in lockstep.
		wait := delay/2 + rand.N(delay/2+1)
		c.log.WarnContext(ctx, "push stream lost; reconnecting", "via", c.transport, "err", err, "in", wait)
		if err := sleep(ctx, wait); err != nil {
			return err
		}
		delay = min(2*delay, c.backoff[1])
	}
}

// permanentCode reports whether reconnecting after an error of code cannot
// help.
func permanentCode(code Code) bool {
	switch code {
	case CodeUnauthenticated, CodePermissionDenied, CodeBadRequest, CodeNotFound, CodeUnknownVerb:
		return true
	}
	return false
}

// streamState is the position of the last push delivered.
type streamState struct {
	epoch string
	seq   uint64
}

// stream runs one connection of the event stream. connected reports
// whether choird accepted it.
func (c *Client) stream(ctx context.Context, st *streamState, fn func(Push)) (connected bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+PathEvents, nil)
	if err != nil {
		return false, err
	}
	req.Header.Set("Accept", "text/event-stream")
	c.setAuth(req)
	if st.epoch != "" {
		req.Header.Set(HeaderLastEventID, stream.EventID(st.epoch, st.seq))
	}
	res, err := c.hc.Do(req)
	if err != nil {
		return false, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, err := transport.ReadCapped(res.Body, 1<<20)
		if err != nil {
			return false, err
		}
		return false, decodeErrorBody(res.StatusCode, b)
	}
	if mt, _, _ := mime.ParseMediaType(res.Header.Get("Content-Type")); mt != "text/event-stream" {
		return false, fmt.Errorf("event stream answered with content type %q", res.Header.Get("Content-Type"))
	}

	idle := make(chan struct{})
	watchdog := time.AfterFunc(c.idle, func() { close(idle); cancel() })
	defer watchdog.Stop()
	rd := stream.NewReader(res.Body, c.maxResp)
	for {
		ev, err := rd.Next()
		if err != nil {
			select {
			case <-idle:
				return true, fmt.Errorf("event stream silent for %s", c.idle)
			default:
			}
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return true, fmt.Errorf("read event stream: %w", err)
		}
		if !watchdog.Stop() {
			return true, fmt.Errorf("event stream silent for %s", c.idle)
		}
		if err := c.deliver(ctx, st, ev, fn); err != nil {
			return true, err
		}
		watchdog.Reset(c.idle)
	}
}

// deliver decodes one event and hands it to fn unless it is a duplicate.
func (c *Client) deliver(ctx context.Context, st *streamState, ev stream.Event, fn func(Push)) error {
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
	p, err := Decode[Push](ev.Data, c.maxResp, 0)
	if err != nil || p.Epoch != epoch || p.Seq != seq || string(p.Kind) != ev.Event {
		// choird sent something this client cannot read; skipping it
		// (and resuming after it) beats asking for it forever.
		c.log.ErrorContext(ctx, "dropping malformed push", "id", ev.ID, "err", err)
	} else {
		fn(p)
	}
	st.epoch, st.seq = epoch, seq
	return nil
}
