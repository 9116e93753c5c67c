package rpc

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"mime"
	"net/http"
	"time"

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
		req.Header.Set(HeaderLastEventID, eventID(st.epoch, st.seq))
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
	rd := newSSEReader(res.Body, c.maxResp)
	for {
		ev, err := rd.next()
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
func (c *Client) deliver(ctx context.Context, st *streamState, ev sseEvent, fn func(Push)) error {
	if ev.comment {
		return nil
	}
	epoch, seq, ok := parseEventID(ev.id)
	if !ok {
		return fmt.Errorf("event stream: push without a valid id")
	}
	if epoch == st.epoch && seq <= st.seq {
		return nil // Already delivered: a resent push.
	}
	p, err := Decode[Push](ev.data, c.maxResp, 0)
	if err != nil || p.Epoch != epoch || p.Seq != seq || string(p.Kind) != ev.event {
		// choird sent something this client cannot read; skipping it
		// (and resuming after it) beats asking for it forever.
		c.log.ErrorContext(ctx, "dropping malformed push", "id", ev.id, "err", err)
	} else {
		fn(p)
	}
	st.epoch, st.seq = epoch, seq
	return nil
}

// sseEvent is one event of a text/event-stream, or a comment.
type sseEvent struct {
	id, event string
	data      []byte
	comment   bool
}

// sseReader parses a text/event-stream (the subset choird writes, read
// leniently as the standard asks: unknown fields are ignored).
type sseReader struct {
	br  *bufio.Reader
	max int
}

func newSSEReader(r io.Reader, maxEvent int) *sseReader {
	return &sseReader{br: bufio.NewReaderSize(r, 16<<10), max: maxEvent}
}

// readLine returns the next line without its terminator (LF, CRLF or CR
// before LF), refusing lines over max.
func (r *sseReader) readLine() ([]byte, error) {
	var line []byte
	for {
		frag, err := r.br.ReadSlice('\n')
		if len(line)+len(frag) > r.max+2 {
			return nil, fmt.Errorf("event stream line over %d bytes", r.max)
		}
		line = append(line, frag...)
		if err == bufio.ErrBufferFull {
			continue
		}
		if err != nil {
			if err == io.EOF && len(line) > 0 {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
		line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
		return line, nil
	}
}

// next returns the next event, or a comment that arrives between events
// (which only proves the connection alive).
func (r *sseReader) next() (sseEvent, error) {
	var ev sseEvent
	started := false
	for {
		line, err := r.readLine()
		if err != nil {
			return sseEvent{}, err
		}
		if len(line) == 0 {
			if started {
				return ev, nil
			}
			continue
		}
		if line[0] == ':' {
			if !started {
				return sseEvent{comment: true}, nil
			}
			continue
		}
		started = true
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			ev.id = string(value)
		case "event":
			ev.event = string(value)
		case "data":
			if len(ev.data)+len(value)+1 > r.max {
				return sseEvent{}, fmt.Errorf("event over %d bytes", r.max)
			}
			if ev.data != nil {
				ev.data = append(ev.data, '\n')
			}
			ev.data = append(ev.data, value...)
		}
	}
}
