package tool

import (
	"context"
	"crypto/rand"
	"encoding/hex"
)

type callKeyCtx struct{}

// WithCallKey returns ctx carrying the idempotency key of the call being
// run: the same for every run of one call, first and after a crash, and
// different for every other call. A keyed tool ([IdempotencyKeyed]) makes
// a second run with the key a no-op.
func WithCallKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, callKeyCtx{}, key)
}

// CallKey returns the idempotency key of the call ctx runs, or "" outside
// the arbiter (a tool run by hand, a test).
func CallKey(ctx context.Context) string {
	k, _ := ctx.Value(callKeyCtx{}).(string)
	return k
}

type rerunCtx struct{}

// WithRerun marks ctx as the run again of a call a restart interrupted
// after its intent (arbiter.Reconcile): a keyed tool looks for its first
// run's effect under the key before it acts.
func WithRerun(ctx context.Context) context.Context { return context.WithValue(ctx, rerunCtx{}, true) }

// Rerun reports whether ctx is such a run again.
func Rerun(ctx context.Context) bool { v, _ := ctx.Value(rerunCtx{}).(bool); return v }

// NewCallKey is a fresh idempotency key: "ck-" and 128 random bits, so that
// no two calls of any session share one and a keyed store can make it
// unique.
func NewCallKey() string {
	var b [16]byte
	rand.Read(b[:]) //nolint:errcheck // crypto/rand.Read never fails
	return "ck-" + hex.EncodeToString(b[:])
}

type laneSourcesCtx struct{}

type laneNameCtx struct{}

// WithLaneName returns ctx naming the lane that makes the call ("edge",
// a core job's lane), for what records where a call came from (the egress
// gateway's audit).
func WithLaneName(ctx context.Context, lane string) context.Context {
	return context.WithValue(ctx, laneNameCtx{}, lane)
}

// LaneName returns the lane WithLaneName put in ctx, or "".
func LaneName(ctx context.Context) string {
	v, _ := ctx.Value(laneNameCtx{}).(string)
	return v
}

// WithLaneSources returns ctx carrying the untrusted sources of the lane
// that makes the call (issue 30): a host tool that keeps text for later,
// a schedule, keeps them with it.
func WithLaneSources(ctx context.Context, srcs []string) context.Context {
	if len(srcs) == 0 {
		return ctx
	}
	return context.WithValue(ctx, laneSourcesCtx{}, srcs)
}

// LaneSources returns the sources WithLaneSources put in ctx.
func LaneSources(ctx context.Context) []string {
	v, _ := ctx.Value(laneSourcesCtx{}).([]string)
	return v
}
