package llm

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

var (
	// ErrMalformedResponse is wrapped by every error about a response that
	// arrived but cannot be used: not JSON, no choices, an empty message, a
	// tool call with invalid arguments or a name that was not offered.
	ErrMalformedResponse = errors.New("malformed model response")
	// ErrContentFiltered means the provider's content filter withheld the
	// answer (finish_reason content_filter with nothing usable).
	ErrContentFiltered = errors.New("model response withheld by the provider's content filter")
	// ErrInvalidRequest is wrapped by errors about a request that was not
	// sent because it is wrong on our side.
	ErrInvalidRequest = errors.New("invalid model request")
)

// RateLimitError is a 429 from the provider.
type RateLimitError struct {
	// RetryAfter is what the provider asked for (Retry-After in seconds or
	// as an HTTP date, or retry-after-ms); zero when it said nothing, so
	// that the caller falls back to rate_limit_retry_ms.
	RetryAfter time.Duration
	// Message is the provider's error message, if any.
	Message string
}

func (e *RateLimitError) Error() string {
	var b strings.Builder
	b.WriteString("rate limited by the model provider")
	if e.RetryAfter > 0 {
		fmt.Fprintf(&b, " (retry after %s)", e.RetryAfter)
	}
	if e.Message != "" {
		b.WriteString(": ")
		b.WriteString(e.Message)
	}
	return b.String()
}

// ProviderError is an HTTP error other than 429 from the provider.
type ProviderError struct {
	Status int
	// Message is the provider's error message, or the start of the body
	// when it sent no JSON error.
	Message string
}

func (e *ProviderError) Error() string {
	s := fmt.Sprintf("model provider returned HTTP %d", e.Status)
	if t := http.StatusText(e.Status); t != "" {
		s += " " + t
	}
	if e.Message != "" {
		s += ": " + e.Message
	}
	return s
}

// maxRetryAfter bounds a parsed Retry-After so that absurd values cannot
// overflow; [RateLimitPolicy] applies its own, much smaller, limit.
const maxRetryAfter = 24 * time.Hour

// parseRetryAfter reads the provider's requested delay: the retry-after-ms
// header that OpenAI sends, else Retry-After as delay-seconds or an HTTP
// date (RFC 9110 10.2.3). Anything absent, unparsable, zero, negative or in
// the past gives zero.
func parseRetryAfter(h http.Header, now time.Time) time.Duration {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 {
			return clampRetryAfter(ms / 1000)
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs > 0 {
			return clampRetryAfter(secs)
		}
		return 0
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}

func clampRetryAfter(secs float64) time.Duration {
	if secs >= maxRetryAfter.Seconds() {
		return maxRetryAfter
	}
	return time.Duration(secs * float64(time.Second))
}
