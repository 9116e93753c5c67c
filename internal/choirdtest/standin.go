package choirdtest

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/client"
)

// StandIn is an agent the test plays itself over the real protocol: a
// session started as choird starts one, with no instance, its hello said,
// its pushes received, and empty heartbeats keeping it alive (without them
// crash detection ends it after the threshold, as it would a hung agent's).
type StandIn struct {
	AgentID   string
	SessionID string
	Client    *client.Client
	Hello     rpc.InitHelloResponse
	// Pushes receives every push, with the time it arrived.
	Pushes chan Push

	cancel     context.CancelFunc
	done       chan struct{}
	terminated atomic.Bool
	beatErr    atomic.Pointer[error]
	// mu serialises heartbeats: the background ones and Append's. rev
	// and hash are the head choird acknowledged.
	mu   sync.Mutex
	rev  int64
	hash rpc.Hash
}

// Push is a push and when it reached the stand-in.
type Push struct {
	rpc.Push
	At time.Time
}

// StandIn starts a session of agentID with overrides o for an agent the
// test plays, says hello for it and keeps it alive until the test ends; a
// heartbeat choird refuses meanwhile fails the test, unless the stand-in
// terminated its session.
func (c *Choird) StandIn(t testing.TB, agentID string, o admin.StartOverrides) *StandIn {
	t.Helper()
	ctx := context.Background()
	sessionID, token, err := c.Daemon.StartSession(ctx, agentID, o, "process")
	if err != nil {
		t.Fatalf("start a session of %s: %v", agentID, err)
	}
	cl, err := client.New(client.Options{Socket: c.Socket(), SessionID: sessionID, LeaseToken: token})
	if err != nil {
		t.Fatal(err)
	}
	s := &StandIn{AgentID: agentID, SessionID: sessionID, Client: cl, Pushes: make(chan Push, 4096), done: make(chan struct{})}
	s.Hello, err = cl.InitHello(ctx, rpc.InitHelloRequest{AgentID: agentID, SessionID: sessionID, ImageVersion: "img-1",
		ToolManifestHash: "t1", SkillManifestHash: "s1"})
	if err != nil {
		cl.Close()
		t.Fatalf("INIT_HELLO of the stand-in for %s: %v", agentID, err)
	}
	s.rev, s.hash = s.Hello.AckedRev, s.Hello.AckedHash
	pctx, cancel := context.WithCancel(ctx)
	s.cancel = cancel
	beating := make(chan struct{})
	go func() {
		defer close(beating)
		s.heartbeat(pctx)
	}()
	go func() {
		defer close(s.done)
		cl.ReceivePushes(pctx, func(p rpc.Push) { //nolint:errcheck
			select {
			case s.Pushes <- Push{Push: p, At: time.Now()}:
			case <-pctx.Done():
			}
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-beating
		<-s.done
		cl.Close()
		if err := s.beatErr.Load(); err != nil {
			t.Errorf("heartbeat of the stand-in for %s: %v", agentID, *err)
		}
	})
	return s
}

// heartbeat sends an empty heartbeat every 200 ms until ctx ends, and keeps
// the first that choird refused.
func (s *StandIn) heartbeat(ctx context.Context) {
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.mu.Lock()
		_, err := s.Client.Heartbeat(ctx, rpc.HeartbeatRequest{BaseRev: s.rev, NewRev: s.rev, Patches: []rpc.Event{},
			ConfigVersion: s.Hello.ConfigVersion, HashPrev: s.hash, HashNew: s.hash, Timestamp: time.Now()})
		s.mu.Unlock()
		if err != nil && ctx.Err() == nil && !s.terminated.Load() {
			s.beatErr.CompareAndSwap(nil, &err)
		}
	}
}

// Append commits one event of the edge lane to the stand-in's log and
// replicates it with a heartbeat, as an agent's log reaches choird.
func (s *StandIn) Append(t testing.TB, typ rpc.EventType, payload any) {
	t.Helper()
	s.AppendOn(t, "edge", typ, payload)
}

// AppendOn is Append on lane ("edge", "core:<name>" or "system").
func (s *StandIn) AppendOn(t testing.TB, lane string, typ rpc.EventType, payload any) {
	t.Helper()
	b, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := rpc.Event{Rev: s.rev + 1, Type: typ, Lane: lane, Payload: b, CreatedAt: time.Now()}
	if err := e.Seal(s.hash); err != nil {
		t.Fatal(err)
	}
	req := Patch([]rpc.Event{e}, s.rev, s.hash)
	req.ConfigVersion = s.Hello.ConfigVersion
	if _, err := s.Client.Heartbeat(context.Background(), req); err != nil {
		t.Fatalf("heartbeat of the stand-in for %s with a %s event: %v", s.AgentID, typ, err)
	}
	s.rev, s.hash = e.Rev, e.Hash
}

// TakeApproval replicates the event by which an agent's edge lane takes an
// approval's outcome, which choird counts as its acknowledgement.
func (s *StandIn) TakeApproval(t testing.TB, approvalID string, status rpc.ApprovalStatus) {
	t.Helper()
	s.Append(t, rpc.EventInjectedInstruction, map[string]any{"source": "approval", "approval_id": approvalID,
		"status": status, "text": "Approval " + approvalID + " was " + string(status) + "."})
}

// Next waits for the next push of kind, skipping others.
func (s *StandIn) Next(t testing.TB, kind rpc.PushKind) Push {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case p := <-s.Pushes:
			if p.Kind == kind {
				return p
			}
		case <-deadline:
			t.Fatalf("no %s push to the stand-in for %s", kind, s.AgentID)
		}
	}
}

// Terminate ends the session as an agent does (TERMINATE_SELF).
func (s *StandIn) Terminate(t testing.TB, reason string) {
	t.Helper()
	s.terminated.Store(true)
	if _, err := s.Client.TerminateSelf(context.Background(), rpc.TerminateSelfRequest{Reason: reason}); err != nil {
		t.Fatalf("TERMINATE_SELF of the stand-in for %s: %v", s.AgentID, err)
	}
}
