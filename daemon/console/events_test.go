package console_test

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/daemon/console/login"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestConsoleEvents reads the live stream as a browser's EventSource
// does: the agents' table and the pending approvals come at once, a new
// approval within a second, and a revoked session's stream says so and
// ends.
func TestConsoleEvents(t *testing.T) {
	b := setup(t)
	a := b.d.StandIn(t, "assistant", admin.StartOverrides{})
	c, ck := b.loggedIn(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, b.url+"/events", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: HTTP %d, %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	events := make(chan [2]string, 100)
	go func() {
		defer close(events)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var name string
		var data []string
		for sc.Scan() {
			switch l := sc.Text(); {
			case strings.HasPrefix(l, "event: "):
				name = strings.TrimPrefix(l, "event: ")
			case strings.HasPrefix(l, "data: "):
				data = append(data, strings.TrimPrefix(l, "data: "))
			case l == "" && name != "":
				events <- [2]string{name, strings.Join(data, "\n")}
				name, data = "", nil
			}
		}
	}()
	next := func(want string, within time.Duration) string {
		t.Helper()
		deadline := time.After(within)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("the stream ended before event %q", want)
				}
				if ev[0] == want {
					return ev[1]
				}
			case <-deadline:
				t.Fatalf("no event %q within %s", want, within)
			}
		}
	}
	if agents := next("agents", time.Minute); !strings.Contains(agents, `id="agent-assistant"`) {
		t.Errorf("agents event:\n%s", agents)
	}
	if pending := next("approvals", time.Minute); !strings.HasPrefix(pending, "0 ") {
		t.Errorf("approvals event %q, want none pending", pending)
	}
	filed := time.Now()
	choirdtest.RequestApproval(t, a, "streamed")
	if pending := next("approvals", time.Minute); !strings.HasPrefix(pending, "1 ") {
		t.Errorf("approvals event %q, want one pending", pending)
	}
	t.Logf("the new approval was streamed after %s", time.Since(filed))

	actor := b.actorOf(t, ck)
	if _, err := adminClient(b).ConsoleSessionRevoke(ctx, strings.TrimPrefix(actor, login.ActorPrefix)); err != nil {
		t.Fatal(err)
	}
	next("ended", time.Minute)
	for range events {
	}
}
