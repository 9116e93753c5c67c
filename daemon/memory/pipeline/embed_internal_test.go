package pipeline

import (
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/choirhq/choir/daemon/memory"
)

func TestEmbedRetryDelay(t *testing.T) {
	t.Parallel()
	w := &EmbedWorker{RetryBase: time.Second}
	job := func(id int64, attempt int) *river.Job[memory.EmbedArgs] {
		return &river.Job[memory.EmbedArgs]{JobRow: &rivertype.JobRow{ID: id, Attempt: attempt}}
	}
	for attempt, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second} {
		d := time.Until(w.NextRetry(job(1, attempt)))
		if d < base*3/4-10*time.Millisecond || d > base*5/4 {
			t.Errorf("attempt %d: retry in %s, want %s ±25%%", attempt, d, base)
		}
	}
	w.retryAfter.Store(int64(2), 30*time.Second)
	if d := time.Until(w.NextRetry(job(2, 1))); d < 29*time.Second {
		t.Errorf("Retry-After 30 s: retry in %s", d)
	}
	if d := time.Until(w.NextRetry(job(2, 1))); d > 2*time.Second {
		t.Errorf("Retry-After applied twice: retry in %s", d)
	}
	w.retryAfter.Store(int64(3), time.Hour)
	if d := time.Until(w.NextRetry(job(3, 1))); d > maxRetryAfter {
		t.Errorf("Retry-After of an hour: retry in %s, want at most %s", d, maxRetryAfter)
	}
}
