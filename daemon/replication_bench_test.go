package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/rpc"
)

// BenchmarkHeartbeatRPC measures replication through the real protocol:
// 32 sessions, each sending heartbeats of N events over the Unix socket to
// a running choird that writes them to Postgres. It reports persisted
// events per second and the heartbeat round trip's p50 and p99 (the round
// trip includes the transaction).
func BenchmarkHeartbeatRPC(b *testing.B) {
	for _, perBeat := range []int{10, 100} {
		b.Run(fmt.Sprintf("32x%d", perBeat), func(b *testing.B) { benchHeartbeat(b, 32, perBeat) })
	}
}

func benchHeartbeat(b *testing.B, sessions, perBeat int) {
	d, home, _ := runChoird(b)
	ctx := context.Background()
	type sess struct {
		client *rpc.Client
		rev    int64
		prev   rpc.Hash
	}
	all := make([]*sess, sessions)
	for i := range all {
		id, token := tokenSession(b, d.pool, fmt.Sprintf("bench-%d", i))
		c, err := rpc.NewClient(rpc.ClientOptions{Socket: AgentSocketPath(home), SessionID: id.String(), LeaseToken: token})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		all[i] = &sess{client: c, prev: rpc.Genesis}
	}
	payload := json.RawMessage(`{"text":"a user message of ordinary length, about as long as a short sentence or two in a chat"}`)
	var mu sync.Mutex
	var lat []time.Duration
	b.ResetTimer()
	start := time.Now()
	for range b.N {
		var wg sync.WaitGroup
		for _, s := range all {
			evs := make([]rpc.Event, perBeat)
			prev := s.prev
			for j := range evs {
				evs[j] = rpc.Event{Rev: s.rev + int64(j) + 1, Type: rpc.EventUserMsg, Lane: "edge", Payload: payload, CreatedAt: time.Now()}
				evs[j].Seal(prev) //nolint:errcheck
				prev = evs[j].Hash
			}
			wg.Go(func() {
				t0 := time.Now()
				_, err := s.client.Heartbeat(ctx, rpc.HeartbeatRequest{BaseRev: s.rev, NewRev: s.rev + int64(perBeat),
					Patches: evs, HashPrev: s.prev, HashNew: prev, Timestamp: time.Now()})
				d := time.Since(t0)
				if err != nil {
					b.Error(err)
					return
				}
				mu.Lock()
				lat = append(lat, d)
				mu.Unlock()
				s.rev += int64(perBeat)
				s.prev = prev
			})
		}
		wg.Wait()
	}
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N*sessions*perBeat)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

// BenchmarkRecovery100k measures INIT_HELLO of a session resuming a
// 100,000-event chain and the agent rebuilding its log from the answer:
// with snapshots every 100 events (the default), and with none at all.
func BenchmarkRecovery100k(b *testing.B) {
	for _, snapEvery := range []int{100, 0} {
		b.Run(fmt.Sprintf("SnapshotEvery%d", snapEvery), func(b *testing.B) { benchRecovery(b, 100_000, snapEvery) })
	}
}

func benchRecovery(b *testing.B, total, snapEvery int) {
	d, home, _ := runChoird(b)
	ctx := context.Background()
	cfg := d.cfg
	first, err := startSession(ctx, d.pool, cfg, "assistant", StartOverrides{}, d.configVersion, "bench")
	if err != nil {
		b.Fatal(err)
	}
	prev, rev := rpc.Genesis, int64(0)
	payload := json.RawMessage(`{"text":"a user message of ordinary length"}`)
	for rev < int64(total) {
		n := min(1000, int64(total)-rev)
		evs := make([]rpc.Event, n)
		p := prev
		for j := range evs {
			evs[j] = rpc.Event{Rev: rev + int64(j) + 1, Type: rpc.EventUserMsg, Lane: "edge", Payload: payload, CreatedAt: time.Now()}
			evs[j].Seal(p) //nolint:errcheck
			p = evs[j].Hash
		}
		req := patch(evs, rev, prev)
		if snapEvery > 0 {
			// the latest snapshot of this batch
			last := evs[len(evs)-1]
			if last.Rev%int64(snapEvery) == 0 {
				req.Snapshot = &rpc.Snapshot{Rev: last.Rev, Hash: last.Hash, State: json.RawMessage(`{"edge":{"tool_calls_used":1}}`)}
			}
		}
		if _, err := replicate(ctx, d.pool, first.Session.SessionID, req); err != nil {
			b.Fatal(err)
		}
		rev, prev = rev+n, p
	}
	if _, err := endSession(ctx, d.pool, nil, first.Session.SessionID, "crashed", "bench"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		s, err := startSession(ctx, d.pool, cfg, "assistant", StartOverrides{}, d.configVersion, "bench")
		if err != nil {
			b.Fatal(err)
		}
		c, err := rpc.NewClient(rpc.ClientOptions{Socket: AgentSocketPath(home), SessionID: s.Session.SessionID.String(),
			LeaseToken: s.LeaseToken, MaxResponseBytes: 256 << 20})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		hello, err := c.InitHello(ctx, s.HelloRequest())
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := commitlog.NewWithHistory(hello.AckedRev, hello.AckedHash, hello.TailEvents); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64(len(hello.TailEvents)), "tail-events")
		c.Close()
		if _, err := endSession(ctx, d.pool, nil, s.Session.SessionID, "ended", "bench"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
