package llm

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Defaults of [RateLimitPolicy].
const (
	// DefaultRateLimitDelay is spec 7.7's rate_limit_retry_ms default.
	DefaultRateLimitDelay = time.Second
	// DefaultRateLimitMaxDelay is the longest Retry-After that is waited
	// for; a provider asking for more gets its error surfaced at once
	// instead of a lane blocked for that long.
	DefaultRateLimitMaxDelay = 2 * time.Minute
)

// RateLimitPolicy is spec 7.7's handling of a provider 429: on the first
// rate-limited call, notify (the lane tells the user and logs), wait for
// Retry-After or DefaultDelay, and retry exactly once; a second failure, of
// any kind, is returned. No other error is retried.
type RateLimitPolicy struct {
	// DefaultDelay is the wait when the 429 carries no Retry-After: the
	// configured rate_limit_retry_ms. Zero means DefaultRateLimitDelay.
	DefaultDelay time.Duration
	// MaxDelay is the longest wait; a 429 asking for longer is returned
	// without notice or retry. Zero means DefaultRateLimitMaxDelay.
	MaxDelay time.Duration
	// NotifyFunc is called once, before the wait, with the first 429 and the
	// wait chosen. It may be nil. It runs on the caller's goroutine, so a
	// slow notification delays the retry.
	NotifyFunc func(ctx context.Context, err *RateLimitError, wait time.Duration)
}

// Do calls call, and once more after the policy's wait if the first call was
// rate limited. Cancelling ctx during the wait returns an error that wraps
// both the context's error and the [*RateLimitError].
func (p RateLimitPolicy) Do(ctx context.Context, call func(context.Context) (*Response, error)) (*Response, error) {
	res, err := call(ctx)
	var rl *RateLimitError
	if err == nil || !errors.As(err, &rl) {
		return res, err
	}
	wait := rl.RetryAfter
	if wait <= 0 {
		wait = p.DefaultDelay
		if wait <= 0 {
			wait = DefaultRateLimitDelay
		}
	}
	maxWait := p.MaxDelay
	if maxWait <= 0 {
		maxWait = DefaultRateLimitMaxDelay
	}
	if wait > maxWait {
		return nil, err
	}
	if p.NotifyFunc != nil {
		p.NotifyFunc(ctx, rl, wait)
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, fmt.Errorf("wait %s to retry: %w: %w", wait, ctx.Err(), err)
	case <-t.C:
	}
	return call(ctx)
}

// CompleteWithRetry is [Client.Complete] under policy p: the call a lane
// makes.
func (c *Client) CompleteWithRetry(ctx context.Context, req Request, p RateLimitPolicy) (*Response, error) {
	return p.Do(ctx, func(ctx context.Context) (*Response, error) { return c.Complete(ctx, req) })
}
