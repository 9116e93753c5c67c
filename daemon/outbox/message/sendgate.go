package message

import (
	"context"
	"io"
)

// A send gate makes the delivery worker's "this part is being sent" mark
// and the request that sends it as close to one step as a channel without
// idempotency keys allows. The worker puts a gate in the context of the
// channel's Send (outbox.Sender); the channel passes it once the
// whole request is on its way but for its last bytes, without which it has
// no complete request (GateBody). The gate commits the mark. If the gate
// fails, or choird dies before it returns, the channel never has a
// complete request: the part was not sent, and no mark says otherwise. If
// choird dies after, the mark stands and the part is never sent again. The
// only window left is between the gate's commit and one write of those
// last bytes: no request building, no connection set-up, no upload.

type sendGateKey struct{}

// WithSendGate returns ctx carrying gate for a channel's Send.
func WithSendGate(ctx context.Context, gate func(context.Context) error) context.Context {
	return context.WithValue(ctx, sendGateKey{}, gate)
}

// SendGateFrom returns the send gate ctx carries, or nil.
func SendGateFrom(ctx context.Context) func(context.Context) error {
	gate, _ := ctx.Value(sendGateKey{}).(func(context.Context) error)
	return gate
}

// GateBody wraps the body of a request that sends a message so that the
// send gate of ctx is passed before the request is complete: the body's
// last holdBack bytes are handed over only once the body has ended and the
// gate has passed. Those bytes hold whatever ends the request for a server
// that does not wait for the full length: a JSON object's closing brace,
// a multipart closing delimiter. A failing gate fails the read, so the
// request is abandoned incomplete. Without a gate in ctx the body is
// returned as it is.
func GateBody(ctx context.Context, body io.ReadCloser) io.ReadCloser {
	gate := SendGateFrom(ctx)
	if gate == nil || body == nil {
		return body
	}
	return &gatedBody{ReadCloser: body, ctx: ctx, gate: gate}
}

// holdBack is how much of a body waits for the gate: more than a multipart
// closing delimiter (a boundary is at most 70 characters) or the end of a
// JSON object.
const holdBack = 128

type gatedBody struct {
	io.ReadCloser
	ctx    context.Context
	gate   func(context.Context) error
	passed bool
	err    error
	// What was read and not yet handed over, and whether the body has
	// ended.
	held    []byte
	scratch []byte
	eof     bool
}

func (g *gatedBody) Read(p []byte) (int, error) {
	for {
		if g.passed && g.err != nil {
			return 0, g.err
		}
		free := len(g.held)
		if !g.passed {
			free -= holdBack
		}
		if free > 0 {
			n := copy(p, g.held[:free])
			g.held = g.held[n:]
			return n, nil
		}
		if g.eof {
			if g.passed {
				return 0, io.EOF
			}
			g.passed, g.err = true, g.gate(g.ctx)
			continue
		}
		if g.scratch == nil {
			g.scratch = make([]byte, 32<<10)
		}
		n, err := g.ReadCloser.Read(g.scratch)
		g.held = append(g.held, g.scratch[:n]...)
		switch {
		case err == io.EOF:
			g.eof = true
		case err != nil:
			return 0, err
		}
	}
}
