package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/client"
)

// BenchmarkHeartbeatRPC measures replication through the real protocol:
// 32 sessions, each sending heartbeats of N events over the Unix socket to
// a running choird that writes them to Postgres. It reports persisted
// events per second, the heartbeat transaction's p50 and p99 (from taking a
// pooled connection to COMMIT, timed inside choird), the whole round trip's
// p50 and p99 (authentication, replay lookup, decoding and hash
// verification, the transaction, and the response), and the CPU time spent
// per event by this process and the database's Postgres backends.
func BenchmarkHeartbeatRPC(b *testing.B) {
	for _, perBeat := range []int{10, 100} {
		b.Run(fmt.Sprintf("32x%d", perBeat), func(b *testing.B) { benchHeartbeat(b, 32, perBeat, true) })
	}
}

// BenchmarkHeartbeatTx is BenchmarkHeartbeatRPC without the protocol: the
// same heartbeats handed straight to replicate, so that the difference
// between the two is the cost of the RPC layer.
func BenchmarkHeartbeatTx(b *testing.B) {
	for _, perBeat := range []int{10, 100} {
		b.Run(fmt.Sprintf("32x%d", perBeat), func(b *testing.B) { benchHeartbeat(b, 32, perBeat, false) })
	}
}

func benchHeartbeat(b *testing.B, sessions, perBeat int, viaRPC bool) {
	// Each session beats as fast as choird answers, far past the 100
	// requests/s an agent may make: the rate limit is lifted, or it is
	// what this would measure.
	d := choirdtest.StartTwoAgents(b, choirdtest.Options{Daemon: daemon.Options{AgentLimits: rpc.Limits{RequestsPerSecond: math.Inf(1)}}})
	ctx := context.Background()
	type sess struct {
		id   uuid.UUID
		cl   *client.Client
		rev  int64
		prev rpc.Hash
	}
	all := make([]*sess, sessions)
	for i := range all {
		id, token := choirdtest.TokenSession(b, d.Pool(), fmt.Sprintf("bench-%d", i))
		c, err := client.New(client.Options{Socket: d.Socket(), SessionID: id.String(), LeaseToken: token})
		if err != nil {
			b.Fatal(err)
		}
		defer c.Close()
		all[i] = &sess{id: id, cl: c, prev: rpc.Genesis}
	}
	payload := json.RawMessage(`{"text":"a user message of ordinary length, about as long as a short sentence or two in a chat"}`)
	var mu sync.Mutex
	var lat, txLat []time.Duration
	observe := func(d time.Duration) {
		mu.Lock()
		txLat = append(txLat, d)
		mu.Unlock()
	}
	agentapi.HeartbeatTxObserver.Store(&observe)
	defer agentapi.HeartbeatTxObserver.Store(nil)
	b.ResetTimer()
	start, cpu0, own0 := time.Now(), cpuTime(b, d.Snapshot().Config.Postgres.Database), ownCPU(b)
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
				req := rpc.HeartbeatRequest{BaseRev: s.rev, NewRev: s.rev + int64(perBeat),
					Patches: evs, HashPrev: s.prev, HashNew: prev, Timestamp: time.Now()}
				var err error
				if viaRPC {
					_, err = s.cl.Heartbeat(ctx, req)
				} else {
					_, err = agentapi.Replicate(ctx, d.Pool(), s.id, req)
				}
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
	elapsed, cpu, own := time.Since(start), cpuTime(b, d.Snapshot().Config.Postgres.Database)-cpu0, ownCPU(b)-own0
	b.StopTimer()
	agentapi.HeartbeatTxObserver.Store(nil)
	mu.Lock()
	defer mu.Unlock()
	slices.Sort(lat)
	slices.Sort(txLat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(float64(b.N*sessions*perBeat)/elapsed.Seconds(), "events/s")
	b.ReportMetric(ms(txLat[len(txLat)/2]), "tx-p50-ms")
	b.ReportMetric(ms(txLat[len(txLat)*99/100]), "tx-p99-ms")
	b.ReportMetric(ms(lat[len(lat)/2]), "rtt-p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "rtt-p99-ms")
	// CPU per event, of this process (cl and choird) and the
	// database's Postgres backends together: unlike events/s it hardly depends on
	// what else the machine runs. 2 s / cpu-us-per-event is the ceiling
	// on an idle 2-core machine.
	b.ReportMetric(float64(cpu.Microseconds())/float64(b.N*sessions*perBeat), "cpu-us/event")
	b.ReportMetric(float64(own.Microseconds())/float64(b.N*sessions*perBeat), "go-cpu-us/event")
}

// ownCPU returns the CPU time (user and system) used so far by this
// process alone: the agents' clients and choird.
func ownCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// cpuTime returns the CPU time (user and system) used so far by this
// process and by the Postgres backends connected to database (found by
// their process titles, "postgres: user database ...").
func cpuTime(b *testing.B, database string) time.Duration {
	total := ownCPU(b)
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		title, err := os.ReadFile(filepath.Join("/proc", d.Name(), "cmdline"))
		if err != nil || !bytes.HasPrefix(title, []byte("postgres: ")) || !bytes.Contains(title, []byte(" "+database+" ")) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", d.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command: state is field 3; utime and stime
		// are fields 14 and 15, in clock ticks (100 per second here).
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+2:]))
		if len(f) < 13 {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		total += time.Duration(ut+st) * 10 * time.Millisecond
	}
	return total
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
	d := choirdtest.StartTwoAgents(b, choirdtest.Options{})
	ctx := context.Background()
	cfg := d.Snapshot().Config
	first, err := session.CreateSession(ctx, d.Pool(), cfg, "assistant", admin.StartOverrides{}, d.ConfigVersion(), "bench")
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
		req := choirdtest.Patch(evs, rev, prev)
		if snapEvery > 0 {
			// the latest snapshot of this batch
			last := evs[len(evs)-1]
			if last.Rev%int64(snapEvery) == 0 {
				req.Snapshot = &rpc.Snapshot{Rev: last.Rev, Hash: last.Hash, State: json.RawMessage(`{"edge":{"tool_calls_used":1}}`)}
			}
		}
		if _, err := agentapi.Replicate(ctx, d.Pool(), first.Session.ID, req); err != nil {
			b.Fatal(err)
		}
		rev, prev = rev+n, p
	}
	if _, err := session.EndSession(ctx, d.Pool(), nil, first.Session.ID, "crashed", "bench"); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		s, err := session.CreateSession(ctx, d.Pool(), cfg, "assistant", admin.StartOverrides{}, d.ConfigVersion(), "bench")
		if err != nil {
			b.Fatal(err)
		}
		c, err := client.New(client.Options{Socket: d.Socket(), SessionID: s.Session.ID.String(),
			LeaseToken: s.LeaseToken, MaxResponseBytes: 256 << 20})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		hello, err := c.InitHello(ctx, choirdtest.HelloRequest(s))
		if err != nil {
			b.Fatal(err)
		}
		if _, _, err := commitlog.NewWithHistory(hello.AckedRev, hello.AckedHash, hello.TailEvents); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		b.ReportMetric(float64(len(hello.TailEvents)), "tail-events")
		c.Close()
		if _, err := session.EndSession(ctx, d.Pool(), nil, s.Session.ID, "ended", "bench"); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
