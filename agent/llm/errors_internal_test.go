package llm

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()

	now := time.Date(2026, 11, 3, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		header http.Header
		want   time.Duration
	}{
		{"Absent", http.Header{}, 0},
		{"Seconds", http.Header{"Retry-After": {"30"}}, 30 * time.Second},
		{"FractionalSeconds", http.Header{"Retry-After": {"0.5"}}, 500 * time.Millisecond},
		{"Spaces", http.Header{"Retry-After": {" 2 "}}, 2 * time.Second},
		{"Zero", http.Header{"Retry-After": {"0"}}, 0},
		{"Negative", http.Header{"Retry-After": {"-5"}}, 0},
		{"NaN", http.Header{"Retry-After": {"NaN"}}, 0},
		{"Garbage", http.Header{"Retry-After": {"later"}}, 0},
		{"Huge", http.Header{"Retry-After": {"1e300"}}, maxRetryAfter},
		{"HTTPDate", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second},
		{"HTTPDateInPast", http.Header{"Retry-After": {now.Add(-time.Minute).Format(http.TimeFormat)}}, 0},
		{"HTTPDateFarAway", http.Header{"Retry-After": {now.Add(1000 * time.Hour).Format(http.TimeFormat)}}, maxRetryAfter},
		{"MillisecondsWin", http.Header{"Retry-After-Ms": {"250"}, "Retry-After": {"9"}}, 250 * time.Millisecond},
		{"BadMillisecondsFallBack", http.Header{"Retry-After-Ms": {"x"}, "Retry-After": {"9"}}, 9 * time.Second},
	}
	for _, tt := range tests {
		if got := parseRetryAfter(tt.header, now); got != tt.want {
			t.Errorf("%s: parseRetryAfter(%v) = %s, want %s", tt.name, tt.header, got, tt.want)
		}
	}
}

func TestErrorText(t *testing.T) {
	t.Parallel()

	tests := []struct {
		err  error
		want string
	}{
		{&RateLimitError{}, "rate limited by the model provider"},
		{&RateLimitError{RetryAfter: 2 * time.Second, Message: "slow down"}, "rate limited by the model provider (retry after 2s): slow down"},
		{&ProviderError{Status: 503}, "model provider returned HTTP 503 Service Unavailable"},
		{&ProviderError{Status: 599, Message: "odd"}, "model provider returned HTTP 599: odd"},
	}
	for _, tt := range tests {
		if got := tt.err.Error(); got != tt.want {
			t.Errorf("Error() = %q, want %q", got, tt.want)
		}
	}
}

func TestTruncate(t *testing.T) {
	t.Parallel()

	long := strings.Repeat("é", maxErrorMessage) // two bytes each
	got := truncate(long)
	if len(got) > maxErrorMessage+3 || !strings.HasSuffix(got, "...") || !strings.HasPrefix(long, strings.TrimSuffix(got, "...")) {
		t.Errorf("truncate gave %d bytes: %q...", len(got), got[:10])
	}
	for _, r := range strings.TrimSuffix(got, "...") {
		if r != 'é' {
			t.Fatalf("truncate split a rune: %q", got)
		}
	}
}
