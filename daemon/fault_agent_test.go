package daemon_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

// replicatingAgent is the agent's side of replication for the fault tests,
// built from the agent's own commit log (agent/commitlog) and the real
// protocol cl: one goroutine commits events steadily, as the arbiter
// does, and another heartbeats the unacknowledged tail, keeps it after a
// failure and retries with backoff, as choir-agent's heartbeat loop does.
// It records the highest revision choird acknowledged, so that a test can
// check that every acknowledged revision survived the fault.
type replicatingAgent struct {
	log *commitlog.Log
	cl  *client.Client
	// sending receives, without blocking, just before each heartbeat goes
	// out: a test waits on it to strike while one is in flight.
	sending chan int64

	mu       sync.Mutex
	acked    int64 // highest ack_rev received
	failures int   // heartbeats that failed
	lastErr  error

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// startReplicatingAgent starts committing an event every millisecond and
// heartbeating every 10 ms over the agent socket of choird's home.
func startReplicatingAgent(t *testing.T, home, sessionID, token string) *replicatingAgent {
	t.Helper()
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.Options{Socket: daemon.AgentSocketPath(home), SessionID: sessionID, LeaseToken: token})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &replicatingAgent{log: log, cl: cl, sending: make(chan int64, 1), cancel: cancel}
	a.wg.Go(func() {
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for n := 1; ; n++ {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			payload := json.RawMessage(fmt.Sprintf(`{"text":"event %d of a steady stream, long enough to look like a short chat message"}`, n))
			if _, err := app.Append(rpc.EventUserMsg, "edge", payload); err != nil {
				a.fail(err)
				return
			}
		}
	})
	a.wg.Go(func() { a.heartbeatLoop(ctx) })
	t.Cleanup(func() {
		a.cancel()
		a.wg.Wait()
		cl.Close()
	})
	return a
}

func (a *replicatingAgent) fail(err error) {
	a.mu.Lock()
	a.failures++
	a.lastErr = err
	a.mu.Unlock()
}

// beat sends one heartbeat with up to 1000 unacknowledged events and a
// snapshot every 500 revisions, and records the acknowledgement.
func (a *replicatingAgent) beat(ctx context.Context, lastSnapshot *int64) error {
	p := a.log.UnackedLimit(1000)
	req := rpc.HeartbeatRequest{BaseRev: p.BaseRev, NewRev: p.NewRev, Patches: p.Events,
		HashPrev: p.HashPrev, HashNew: p.HashNew, ConfigVersion: 1, Timestamp: time.Now()}
	if p.NewRev-*lastSnapshot >= 500 {
		req.Snapshot = &rpc.Snapshot{Rev: p.NewRev, Hash: p.HashNew,
			State: json.RawMessage(fmt.Sprintf(`{"edge":{"events":%d}}`, p.NewRev))}
	}
	select {
	case a.sending <- p.NewRev:
	default:
	}
	resp, err := a.cl.Heartbeat(ctx, req)
	if err != nil {
		return err
	}
	if req.Snapshot != nil {
		*lastSnapshot = req.Snapshot.Rev
	}
	if err := a.log.Ack(resp.AckRev); err != nil {
		return fmt.Errorf("ack %d: %w", resp.AckRev, err)
	}
	a.mu.Lock()
	a.acked = max(a.acked, resp.AckRev)
	a.mu.Unlock()
	return nil
}

func (a *replicatingAgent) heartbeatLoop(ctx context.Context) {
	var lastSnapshot int64
	backoff := time.Duration(0)
	for {
		wait := 10 * time.Millisecond
		if backoff > 0 {
			wait = backoff
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		err := a.beat(ctx, &lastSnapshot)
		switch {
		case err == nil:
			backoff = 0
		case ctx.Err() != nil:
			return
		case errors.Is(err, wire.ErrUnauthenticated):
			a.fail(err) // fenced: a test that sees this fails
			return
		default:
			a.fail(err)
			backoff = min(max(2*backoff, 20*time.Millisecond), 500*time.Millisecond)
		}
	}
}

// ackedRev returns the highest revision choird has acknowledged.
func (a *replicatingAgent) ackedRev() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.acked
}

// waitAcked waits until choird has acknowledged rev.
func (a *replicatingAgent) waitAcked(t *testing.T, rev int64, what string) {
	t.Helper()
	deadline := time.Now().Add(45 * time.Second)
	for a.ackedRev() < rev {
		if time.Now().After(deadline) {
			a.mu.Lock()
			defer a.mu.Unlock()
			t.Fatalf("%s: acknowledged %d, want %d (%d failed heartbeats, last: %v)", what, a.acked, rev, a.failures, a.lastErr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop stops committing, waits until everything committed is acknowledged,
// and returns the head revision and hash.
func (a *replicatingAgent) stop(t *testing.T) (int64, rpc.Hash) {
	t.Helper()
	a.cancel()
	a.wg.Wait()
	head, hash := a.log.Head()
	var lastSnapshot int64 = head // no more snapshots
	deadline := time.Now().Add(30 * time.Second)
	for a.ackedRev() < head {
		if err := a.beat(context.Background(), &lastSnapshot); err != nil {
			if time.Now().After(deadline) {
				t.Fatalf("flush: %d of %d acknowledged: %v", a.ackedRev(), head, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return head, hash
}

func (a *replicatingAgent) failedBeats() (int, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.failures, a.lastErr
}

// chainAuditSQL is the one query that proves an agent's replica intact
// after a fault: no gap and no duplicate (events = distinct revisions =
// max_rev, starting at 1), no broken hash link (choir_audit.chain_breaks is
// empty), and the head hash, which commits to every event before it.
const chainAuditSQL = `
SELECT count(*) AS events,
       count(DISTINCT e.rev) AS distinct_revs,
       coalesce(min(e.rev), 0) AS min_rev,
       coalesce(max(e.rev), 0) AS max_rev,
       (SELECT count(*) FROM choir_audit.chain_breaks b WHERE b.agent_id = $1) AS chain_breaks,
       (SELECT h.hash FROM choir_control.session_events h
          JOIN choir_control.sessions hs USING (session_id)
         WHERE hs.agent_id = $1 ORDER BY h.rev DESC LIMIT 1) AS head_hash
  FROM choir_control.session_events e
  JOIN choir_control.sessions s USING (session_id)
 WHERE s.agent_id = $1`

// checkReplica runs chainAuditSQL for agent and fails the test unless the
// replica holds exactly revisions 1..head, hash-chained, ending at the
// agent's head hash, and holds at least every revision the agent saw
// acknowledged.
func checkReplica(t *testing.T, pool *pgxpool.Pool, agent string, acked, head int64, headHash rpc.Hash) {
	t.Helper()
	var events, distinct, minRev, maxRev, breaks int64
	var hash []byte
	err := pool.QueryRow(context.Background(), chainAuditSQL, agent).Scan(&events, &distinct, &minRev, &maxRev, &breaks, &hash)
	if err != nil {
		t.Fatalf("audit query: %v", err)
	}
	t.Logf("replica of %s: %d events, revisions %d..%d, %d chain breaks; agent head %d, saw %d acknowledged",
		agent, events, minRev, maxRev, breaks, head, acked)
	if breaks != 0 {
		t.Errorf("%d chain breaks (choir_audit.chain_breaks)", breaks)
	}
	if events != distinct {
		t.Errorf("%d events but %d distinct revisions: duplicates", events, distinct)
	}
	if minRev != 1 || events != maxRev {
		t.Errorf("%d events span revisions %d..%d: gaps", events, minRev, maxRev)
	}
	if maxRev < acked {
		t.Errorf("the replica ends at %d, but the agent saw %d acknowledged", maxRev, acked)
	}
	if maxRev != head || string(hash) != string(headHash[:]) {
		t.Errorf("the replica ends at %d (hash %x), the agent's log at %d (hash %s)", maxRev, hash, head, headHash)
	}
}
