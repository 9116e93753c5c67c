package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

// beater heartbeats one session at its interval, each heartbeat carrying
// the next event, and counts what choird answered.
type beater struct {
	cl       *client.Client
	timeout  time.Duration
	interval time.Duration

	beats, acked atomic.Int64
	mu           sync.Mutex
	failures     []error
}

func (b *beater) run(ctx context.Context, t *testing.T, stop <-chan struct{}) {
	prev, rev := rpc.Genesis, int64(0)
	for {
		select {
		case <-stop:
			return
		case <-time.After(b.interval):
		}
		evs := choirdtest.ChainEvents(t, rev+1, rev+1, prev)
		// A heartbeat slower than the crash threshold is as good as lost.
		hctx, cancel := context.WithTimeout(ctx, b.timeout)
		resp, err := b.cl.Heartbeat(hctx, choirdtest.Patch(evs, rev, prev))
		cancel()
		b.beats.Add(1)
		if err == nil && resp.AckRev != rev+1 {
			err = fmt.Errorf("ack_rev %d, want %d", resp.AckRev, rev+1)
		}
		if err != nil {
			b.mu.Lock()
			b.failures = append(b.failures, err)
			b.mu.Unlock()
			continue // The same patch again next time.
		}
		b.acked.Add(1)
		prev, rev = evs[0].Hash, rev+1
	}
}

// TestMisbehavingAgentCannotStarveAnotherAgainstChoird: against a real
// choird on real Postgres, agent A opens 1,000 connections to the agent
// socket and holds them, makes 10,000 calls with bad tokens, and runs 100
// memory searches at once, while agent B heartbeats at its interval. Every
// one of B's heartbeats is acknowledged, and crash detection (a River
// periodic job, with a 2.5 s threshold here) never marks B crashed.
func TestMisbehavingAgentCannotStarveAnotherAgainstChoird(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(c *config.Config, _ config.Secrets) {
		c.HeartbeatIntervalMS, c.CrashDetectionThresholdMS = 500, 2500
	}})
	threshold, interval := d.Snapshot().Config.CrashDetectionThreshold(), d.Snapshot().Config.HeartbeatInterval()
	dial := func(id uuid.UUID, token string) *client.Client {
		c, err := client.New(client.Options{Socket: d.Socket(), SessionID: id.String(), LeaseToken: token})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// A's knowledge: 20,000 documents that all match its searches, so
	// that each search makes the database work. They are written before
	// the sessions start: on a loaded host the insert alone may outlast
	// the crash threshold, which a session that has said hello but not yet
	// heartbeaten would not survive.
	if _, err := d.Pool().Exec(ctx, `INSERT INTO choir_assistant.knowledge_documents (key, text)
		SELECT 'k' || i, 'the sky over the harbour is blue, note ' || i || ' ' || md5(i::text)
		  FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	sa, err := session.CreateSession(ctx, d.Pool(), d.Snapshot().Config, "assistant", admin.StartOverrides{}, d.ConfigVersion(), "process")
	if err != nil {
		t.Fatal(err)
	}
	sb, err := session.CreateSession(ctx, d.Pool(), d.Snapshot().Config, "helper", admin.StartOverrides{Workspace: "other", DM: "second"}, d.ConfigVersion(), "process")
	if err != nil {
		t.Fatal(err)
	}
	a, b := dial(sa.Session.ID, sa.LeaseToken), dial(sb.Session.ID, sb.LeaseToken)
	for _, c := range []struct {
		cl *client.Client
		s  session.StartedSession
	}{{a, sa}, {b, sb}} {
		if _, err := c.cl.InitHello(ctx, choirdtest.HelloRequest(c.s)); err != nil {
			t.Fatal(err)
		}
	}

	// Both agents heartbeat throughout: B is the one under watch; A keeps
	// its own session alive, so that its searches stay authenticated.
	stop := make(chan struct{})
	var bg sync.WaitGroup
	hb := &beater{cl: b, timeout: threshold, interval: interval}
	ha := &beater{cl: a, timeout: threshold, interval: interval}
	bg.Go(func() { hb.run(ctx, t, stop) })
	bg.Go(func() { ha.run(ctx, t, stop) })
	defer func() {
		select {
		case <-stop:
		default:
			close(stop)
		}
		bg.Wait()
	}()

	// 1,000 connections, opened and held (idle) until the end.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	var dialFailed int
	for range 1000 {
		c, err := net.Dial("unix", d.Socket())
		if err != nil {
			dialFailed++
			continue
		}
		held = append(held, c)
	}

	var flood sync.WaitGroup
	// 10,000 calls with well-formed but wrong tokens for A's session, 16
	// at a time, each asking for a memory search (work the database would
	// do, were the token looked up and accepted).
	var unauth, badLimited, badOther atomic.Int64
	calls := make(chan int)
	for range 16 {
		wrong, _ := rpc.NewLeaseToken()
		c := dial(sa.Session.ID, wrong)
		flood.Go(func() {
			for i := range calls {
				_, err := c.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.memory.query",
					CallID: fmt.Sprintf("bad-%d", i), Input: json.RawMessage(`{"store":"knowledge","mode":"text","query":"sky"}`)})
				switch {
				case errors.Is(err, wire.ErrUnauthenticated):
					unauth.Add(1)
				case errors.Is(err, wire.ErrRateLimited):
					badLimited.Add(1)
				default:
					badOther.Add(1)
				}
			}
		})
	}
	flood.Go(func() {
		for i := range 10_000 {
			calls <- i
		}
		close(calls)
	})
	// 100 memory searches at once, with A's valid token.
	var answered, unavailable, limited, refused atomic.Int64
	var otherErr sync.Map
	start := make(chan struct{})
	for i := range 100 {
		flood.Go(func() {
			<-start
			resp, err := a.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.memory.query",
				CallID: fmt.Sprintf("search-%d", i), Input: json.RawMessage(`{"store":"knowledge","mode":"text","query":"sky harbour blue","limit":50}`)})
			switch {
			case err == nil && resp.Status == rpc.ToolSuccess:
				answered.Add(1)
			case errors.Is(err, wire.ErrUnavailable):
				unavailable.Add(1)
			case errors.Is(err, wire.ErrRateLimited):
				limited.Add(1)
			case err != nil:
				var e *wire.Error
				if !errors.As(err, &e) {
					refused.Add(1) // A transport error: the connection cap.
				}
				otherErr.Store(err.Error(), true)
			default:
				otherErr.Store(fmt.Sprintf("%s: %s", resp.Status, resp.Output), true)
			}
		})
	}
	close(start)
	flood.Wait()

	// B goes on heartbeating past two crash thresholds after the flood,
	// so that crash detection has had every chance to judge it.
	after := hb.beats.Load() + 2*int64(threshold/interval)
	for hb.beats.Load() < after {
		time.Sleep(interval)
	}
	close(stop)
	bg.Wait()

	t.Logf("A: %d connections held (%d refused at dial); bad tokens: %d unauthenticated, %d rate_limited, %d other",
		len(held), dialFailed, unauth.Load(), badLimited.Load(), badOther.Load())
	t.Logf("A's 100 searches: %d answered, %d unavailable, %d rate_limited, %d refused connections, %d other",
		answered.Load(), unavailable.Load(), limited.Load(), refused.Load(),
		100-answered.Load()-unavailable.Load()-limited.Load()-refused.Load())
	otherErr.Range(func(k, _ any) bool { t.Logf("  search outcome: %s", k); return true })
	t.Logf("heartbeats: B %d sent, %d acknowledged; A %d sent, %d acknowledged",
		hb.beats.Load(), hb.acked.Load(), ha.beats.Load(), ha.acked.Load())

	if unauth.Load()+badLimited.Load() != 10_000 {
		t.Errorf("%d of the bad-token calls were neither unauthenticated nor rate_limited", badOther.Load())
	}
	hb.mu.Lock()
	for _, err := range hb.failures {
		t.Errorf("B's heartbeat not acknowledged: %v", err)
	}
	hb.mu.Unlock()
	if hb.acked.Load() == 0 {
		t.Error("B sent no heartbeat")
	}
	var status string
	var crashed int
	d.Pool().QueryRow(ctx, `SELECT status FROM choir_control.sessions WHERE session_id = $1`, sb.Session.ID).Scan(&status)
	d.Pool().QueryRow(ctx, `SELECT count(*) FROM choir_control.sessions WHERE agent_id = 'helper' AND status = 'crashed'`).Scan(&crashed)
	if status != "active" || crashed != 0 {
		t.Errorf("B's session is %s, %d of B's sessions crashed; want active, none", status, crashed)
	}
	// Crash detection did run while B was watched: its verdict means
	// something.
	var runs int
	d.Pool().QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'crash_detect' AND state = 'completed'`).Scan(&runs)
	if runs == 0 {
		t.Errorf("crash detection never ran\n%s", d.Logs.String())
	}
	t.Logf("crash detection ran %d times", runs)
}
