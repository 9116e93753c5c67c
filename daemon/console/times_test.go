package console_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// pageBudget is the bound on a page's server time at the 95th
// percentile. The time measured here is the whole loopback round trip,
// which bounds it from above.
const pageBudget = 100 * time.Millisecond

// TestConsolePageTimes times every page against a choird with a live
// agent and pending approvals, and holds the 95th percentile to
// pageBudget.
func TestConsolePageTimes(t *testing.T) {
	b := setup(t)
	a := b.d.StandIn(t, "assistant", admin.StartOverrides{})
	var id string
	for _, s := range []string{"first", "second", "third"} {
		id = choirdtest.RequestApproval(t, a, "timed "+s)
	}
	c, _ := b.loggedIn(t)
	const n = 40
	for _, p := range []string{"/", "/approvals", "/approvals/" + id} {
		times := make([]time.Duration, 0, n)
		for range n {
			start := time.Now()
			if code, _ := body(t, c, b.url+p); code != http.StatusOK {
				t.Fatalf("GET %s: HTTP %d", p, code)
			}
			times = append(times, time.Since(start))
		}
		slices.Sort(times)
		p50, p95 := times[n/2], times[n*95/100]
		t.Logf("GET %-50s p50 %-12s p95 %s", p, p50, p95)
		if p95 > pageBudget {
			t.Errorf("GET %s: p95 %s, over %s", p, p95, pageBudget)
		}
	}
}
