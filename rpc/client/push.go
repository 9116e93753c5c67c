package client

import (
	"context"
	"errors"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/internal/callclient"
	"github.com/choirhq/choir/rpc/internal/stream"
	"github.com/choirhq/choir/rpc/wire"
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
// wire.ErrUnauthenticated (or another non-retryable code) when choird refuses
// the stream, as it does once the session is revoked.
func (c *Client) ReceivePushes(ctx context.Context, fn func(rpc.Push)) error {
	r := &callclient.Receiver{
		Conn: c.conn, Path: rpc.PathEvents, LastEventIDHeader: rpc.HeaderLastEventID,
		Refused: func(status int, body []byte) error { return decodeErrorBody(status, body) },
		Permanent: func(err error) bool {
			var e *wire.Error
			return errors.As(err, &e) && permanentCode(e.Code)
		},
		Handle: func(epoch string, seq uint64, ev stream.Event) (bool, error) {
			p, err := rpc.Decode[rpc.Push](ev.Data, c.conn.MaxResponse(), 0)
			if err != nil || p.Epoch != epoch || p.Seq != seq || string(p.Kind) != ev.Event {
				return false, err
			}
			fn(p)
			return true, nil
		},
	}
	return r.Receive(ctx)
}

// permanentCode reports whether reconnecting after an error of code cannot
// help.
func permanentCode(code wire.Code) bool {
	switch code {
	case wire.CodeUnauthenticated, wire.CodePermissionDenied, wire.CodeBadRequest, wire.CodeNotFound, wire.CodeUnknownVerb:
		return true
	}
	return false
}
