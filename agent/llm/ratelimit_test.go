package llm_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
)

// notices records the calls of a RateLimitPolicy's NotifyFunc.
type notices struct {
	mu    sync.Mutex
	waits []time.Duration
	errs  []*llm.RateLimitError
	// requests is how many requests the server had seen at each notice.
	requests []int
	srv      *llmtest.Server
}

func (n *notices) notify(_ context.Context, err *llm.RateLimitError, wait time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.waits = append(n.waits, wait)
	n.errs = append(n.errs, err)
	n.requests = append(n.requests, len(n.srv.Requests()))
}

func (n *notices) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return len(n.waits)
}

func TestRateLimitPolicy(t *testing.T) {
	t.Parallel()

	t.Run("RetryAfterHeaderThenSuccess", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.RateLimited("0.02"), llmtest.Text("second time lucky"))
		n := &notices{srv: b.srv}
		res, err := b.client.CompleteWithRetry(t.Context(), b.request(), llm.RateLimitPolicy{DefaultDelay: time.Hour, NotifyFunc: n.notify})
		if err != nil {
			t.Fatal(err)
		}
		if res.Content != "second time lucky" {
			t.Errorf("content = %q", res.Content)
		}
		if n.count() != 1 || n.waits[0] != 20*time.Millisecond || n.errs[0].RetryAfter != 20*time.Millisecond {
			t.Errorf("notices: waits %v errs %v", n.waits, n.errs)
		}
		// The notice comes after the first request and before the retry.
		if n.requests[0] != 1 || len(b.srv.Requests()) != 2 {
			t.Errorf("notice after request %d; %d requests in all", n.requests[0], len(b.srv.Requests()))
		}
	})

	t.Run("NoRetryAfterUsesDefaultDelay", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.RateLimited(""), llmtest.Text("ok"))
		n := &notices{srv: b.srv}
		res, err := b.client.CompleteWithRetry(t.Context(), b.request(), llm.RateLimitPolicy{DefaultDelay: 10 * time.Millisecond, NotifyFunc: n.notify})
		if err != nil || res.Content != "ok" {
			t.Fatalf("CompleteWithRetry = %+v, %v", res, err)
		}
		if n.count() != 1 || n.waits[0] != 10*time.Millisecond || n.errs[0].RetryAfter != 0 {
			t.Errorf("notices: waits %v errs %v", n.waits, n.errs)
		}
	})

	t.Run("SecondRateLimitReturned", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.RateLimited("0.01"), llmtest.RateLimited("0.01"))
		n := &notices{srv: b.srv}
		_, err := b.client.CompleteWithRetry(t.Context(), b.request(), llm.RateLimitPolicy{NotifyFunc: n.notify})
		var rl *llm.RateLimitError
		if !errors.As(err, &rl) {
			t.Fatalf("error = %v, want *RateLimitError", err)
		}
		if n.count() != 1 || len(b.srv.Requests()) != 2 {
			t.Errorf("%d notices, %d requests; want 1 and 2", n.count(), len(b.srv.Requests()))
		}
	})

	t.Run("SecondFailureOfAnotherKindReturned", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.RateLimited(""), llmtest.ServerError(503, "down"))
		n := &notices{srv: b.srv}
		_, err := b.client.CompleteWithRetry(t.Context(), b.request(), llm.RateLimitPolicy{DefaultDelay: time.Millisecond, NotifyFunc: n.notify})
		var pe *llm.ProviderError
		if !errors.As(err, &pe) || pe.Status != 503 {
			t.Fatalf("error = %v, want *ProviderError 503", err)
		}
		if n.count() != 1 {
			t.Errorf("%d notices", n.count())
		}
	})

	t.Run("OtherErrorsNotRetried", func(t *testing.T) {
		t.Parallel()

		for _, step := range []llmtest.Step{llmtest.ServerError(500, ""), llmtest.Malformed(`{"choices":[]}`), llmtest.ServerError(400, "bad")} {
			b := setup(t, step)
			n := &notices{srv: b.srv}
			_, err := b.client.CompleteWithRetry(t.Context(), b.request(), llm.RateLimitPolicy{DefaultDelay: time.Millisecond, NotifyFunc: n.notify})
			if err == nil || n.count() != 0 || len(b.srv.Requests()) != 1 {
				t.Errorf("error %v, %d notices, %d requests; want an error, 0, 1", err, n.count(), len(b.srv.Requests()))
			}
		}
	})

	t.Run("RetryAfterBeyondMaxDelayReturnedAtOnce", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.RateLimited("3600"))
		n := &notices{srv: b.srv}
		_, err := b.client.CompleteWithRetry(t.Context(), b.request(), llm.RateLimitPolicy{NotifyFunc: n.notify})
		var rl *llm.RateLimitError
		if !errors.As(err, &rl) || rl.RetryAfter != time.Hour {
			t.Fatalf("error = %v, want *RateLimitError asking for 1h", err)
		}
		if n.count() != 0 {
			t.Errorf("%d notices, want 0", n.count())
		}
	})

	t.Run("CancelledDuringWait", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.RateLimited("60"))
		ctx, cancel := context.WithCancel(t.Context())
		notify := func(context.Context, *llm.RateLimitError, time.Duration) { cancel() }
		_, err := b.client.CompleteWithRetry(ctx, b.request(), llm.RateLimitPolicy{NotifyFunc: notify})
		var rl *llm.RateLimitError
		if !errors.Is(err, context.Canceled) || !errors.As(err, &rl) {
			t.Fatalf("error = %v, want Canceled and *RateLimitError", err)
		}
	})

	t.Run("NilNotifyFunc", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.RateLimited(""), llmtest.Text("ok"))
		res, err := b.client.CompleteWithRetry(t.Context(), b.request(), llm.RateLimitPolicy{DefaultDelay: time.Millisecond})
		if err != nil || res.Content != "ok" {
			t.Fatalf("CompleteWithRetry = %+v, %v", res, err)
		}
	})
}
