package egress

import "context"

// Caller is the agent session a gateway connection belongs to, as choird
// authenticated it from the lease token; never from anything the agent's
// tools can write into a request.
type Caller struct {
	AgentID   string
	SessionID string
}

type callerKey struct{}

// WithCaller returns ctx carrying c.
func WithCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerFrom returns the caller ctx carries, and false when it carries none
// (a handler must then refuse the request).
func CallerFrom(ctx context.Context) (Caller, bool) {
	c, ok := ctx.Value(callerKey{}).(Caller)
	return c, ok
}
