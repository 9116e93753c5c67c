package usage_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

// TestSessionCapsAgainstChoird: one session cannot grow choir_control
// without bound through choird's agent socket. rpc_replays keeps the newest
// agentapi.ReplayKeepPerSession outcomes, and a recent request is still replayed;
// SEND_OUTBOUND refuses a new message with rate_limited while the session
// has outbox.AgentMaxPending messages waiting, but still answers a
// message already queued.
func TestSessionCapsAgainstChoird(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The session sends no heartbeat: an hour's crash threshold keeps it
	// alive through a thousand calls on a loaded machine.
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(cfg *config.Config, _ config.Secrets) {
		cfg.CrashDetectionThresholdMS = int64(time.Hour / time.Millisecond)
	}})
	id, cl, _ := d.HelloSession(t, "assistant")

	t.Run("ReplaysKeepTheNewestPerSession", func(t *testing.T) {
		const extra = 25
		report := func(i int, state string) error {
			return paced(func() error {
				_, err := cl.ReportStatus(client.WithRequestID(ctx, fmt.Sprintf("status-%d", i)),
					rpc.ReportStatusRequest{Lane: "edge", State: state})
				return err
			})
		}
		for i := range agentapi.ReplayKeepPerSession + extra {
			if err := report(i, "EDGE_IDLE"); err != nil {
				t.Fatalf("call %d: %v", i, err)
			}
		}
		var n, oldest int
		d.Pool().QueryRow(ctx, `SELECT count(*), min(substr(request_id, 8)::int) FROM choir_control.rpc_replays
			WHERE session_id = $1 AND request_id LIKE 'status-%'`, id).Scan(&n, &oldest)
		// INIT_HELLO's outcome was the session's first, and is gone too.
		if n != agentapi.ReplayKeepPerSession || oldest != extra {
			t.Errorf("%d replay rows kept, the oldest status-%d; want %d, the oldest status-%d",
				n, oldest, agentapi.ReplayKeepPerSession, extra)
		}
		// The same request ID with another payload: a kept outcome
		// refuses it as a conflict, a forgotten one lets it run.
		if err := report(agentapi.ReplayKeepPerSession+extra-1, "EDGE_BUSY"); !errors.Is(err, wire.ErrConflict) {
			t.Errorf("the newest request sent again with another payload: %v, want conflict (its outcome kept)", err)
		}
		if err := report(agentapi.ReplayKeepPerSession+extra-1, "EDGE_IDLE"); err != nil {
			t.Errorf("the newest request retried: %v, want its first outcome", err)
		}
		if err := report(0, "EDGE_BUSY"); err != nil {
			t.Errorf("the oldest request sent again: %v, want it run again (its outcome forgotten)", err)
		}
	})

	t.Run("OutboxIsCappedPerSession", func(t *testing.T) {
		// Pending rows with no delivery job stay pending: the session's
		// outbox is full whatever the console delivers meanwhile.
		if _, err := d.Pool().Exec(ctx, `INSERT INTO choir_control.outbox (agent_id, session_id, message_id, gateway, dm, chat_id, kind, text)
			SELECT 'assistant', $1, 'backlog-' || i, 'console', 'console', 'console', 'text', 'queued ' || i
			  FROM generate_series(1, $2::int) i`, id, outbox.AgentMaxPending); err != nil {
			t.Fatal(err)
		}
		err := paced(func() error {
			_, err := cl.SendOutbound(ctx, rpc.SendOutboundRequest{MessageID: "one-too-many", Kind: rpc.OutboundText, Text: "hi"})
			return err
		})
		var e *wire.Error
		if !errors.Is(err, wire.ErrRateLimited) || !errors.As(err, &e) || e.RetryAfter <= 0 ||
			!strings.Contains(err.Error(), fmt.Sprintf("%d messages waiting", outbox.AgentMaxPending)) ||
			!strings.Contains(err.Error(), "then send again") {
			t.Fatalf("message past the cap: %v, want rate_limited naming the cap, with a retry delay", err)
		}
		var again rpc.SendOutboundResponse
		err = paced(func() (err error) {
			again, err = cl.SendOutbound(ctx, rpc.SendOutboundRequest{MessageID: "backlog-7", Kind: rpc.OutboundText, Text: "queued 7"})
			return err
		})
		if err != nil || !again.Duplicate {
			t.Fatalf("a queued message sent again on a full outbox: %+v %v, want the queued row", again, err)
		}
		var n int
		d.Pool().QueryRow(ctx, `SELECT count(*) FROM choir_control.outbox WHERE session_id = $1`, id).Scan(&n)
		if n != outbox.AgentMaxPending {
			t.Errorf("%d outbox rows, want %d", n, outbox.AgentMaxPending)
		}
	})
}

// paced runs call again while the server's per-session request-rate limit
// refuses it, waiting as told, as an agent does. Other rate_limited
// answers (a full outbox) are returned.
func paced(call func() error) error {
	for {
		err := call()
		var e *wire.Error
		if !errors.As(err, &e) || e.Code != wire.CodeRateLimited || !strings.Contains(e.Message, "rate limit exceeded for session") {
			return err
		}
		time.Sleep(max(e.RetryAfter, 10*time.Millisecond))
	}
}
