package arbiter_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lock"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/rpc"
)

// span is when one call of a spanTool ran.
type span struct{ start, end time.Time }

// spanTool is a test tool that records when each of its calls ran, keyed
// by the call's input id. A call whose id has a gate waits for the gate to
// close; any other call takes the tool's delay.
type spanTool struct {
	spec    tool.Spec
	delay   time.Duration
	mu      sync.Mutex
	spans   map[string]span
	gates   map[string]chan struct{}
	started chan string // receives each id as its call starts
}

func newSpanTool(name string, locks []tool.LockTemplate, delay time.Duration) *spanTool {
	return &spanTool{spec: tool.Spec{
		LLM: tool.LLMView{Name: name, Description: "test tool " + name,
			Parameters: json.RawMessage(`{"type":"object","properties":{"path":{"type":"string"},"id":{"type":"string"}},` +
				`"required":["id"],"additionalProperties":false}`)},
		Runtime: tool.Runtime{TimeoutMS: 30_000, Locks: locks, SideEffect: tool.SideEffectWrite, Exposure: tool.ExposureBoth, Version: "1"},
	}, delay: delay, spans: map[string]span{}, gates: map[string]chan struct{}{}, started: make(chan string, 64)}
}

// fileLock is the lock template of a tool writing the file named by its
// path field.
var fileLock = []tool.LockTemplate{{Resource: "file:{path}", Mode: tool.ModeExclusive}}

func (s *spanTool) Spec() tool.Spec { return s.spec }

func (s *spanTool) Execute(ctx context.Context, _ tool.Env, input json.RawMessage) (tool.Result, error) {
	var in struct{ ID string }
	if err := json.Unmarshal(input, &in); err != nil {
		return tool.Result{}, err
	}
	start := time.Now()
	s.mu.Lock()
	gate := s.gates[in.ID]
	s.mu.Unlock()
	s.started <- in.ID
	wait := time.After(s.delay)
	if gate != nil {
		wait = nil
	}
	select {
	case <-wait:
	case <-gate:
	case <-ctx.Done():
		return tool.Result{}, ctx.Err()
	}
	s.mu.Lock()
	s.spans[in.ID] = span{start, time.Now()}
	s.mu.Unlock()
	return tool.Result{Status: tool.StatusSuccess, Summary: "ran " + in.ID}, nil
}

// gate makes the call with this id wait until the returned channel is
// closed.
func (s *spanTool) gate(id string) chan struct{} {
	ch := make(chan struct{})
	s.mu.Lock()
	s.gates[id] = ch
	s.mu.Unlock()
	return ch
}

func (s *spanTool) span(t *testing.T, id string) span {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	sp, ok := s.spans[id]
	if !ok {
		t.Fatalf("call %s never ran to its end", id)
	}
	return sp
}

// awaitStart waits until the call with this id has started.
func (s *spanTool) awaitStart(t *testing.T, id string) {
	t.Helper()
	timeout := time.After(30 * time.Second)
	for {
		select {
		case got := <-s.started:
			if got == id {
				return
			}
		case <-timeout:
			t.Fatalf("call %s did not start within 30 s", id)
		}
	}
}

// overlapAll reports whether every span was running at one instant: the
// last start comes before the first end.
func overlapAll(spans ...span) bool {
	lastStart, firstEnd := spans[0].start, spans[0].end
	for _, s := range spans[1:] {
		if s.start.After(lastStart) {
			lastStart = s.start
		}
		if s.end.Before(firstEnd) {
			firstEnd = s.end
		}
	}
	return lastStart.Before(firstEnd)
}

func call(owner lock.Owner, id, name, input string) arbiter.Proposal {
	return arbiter.Proposal{Owner: owner, CallID: id, Tool: name, Input: json.RawMessage(input)}
}

func slow(owner lock.Owner, id, path string) arbiter.Proposal {
	return call(owner, id, "test.slow", fmt.Sprintf(`{"id":%q,"path":%q}`, id, path))
}

func proposeAll(t *testing.T, b *bundle, ps ...arbiter.Proposal) []arbiter.Outcome {
	t.Helper()
	outs, err := b.arb.ProposeAll(context.Background(), ps)
	if err != nil {
		t.Fatalf("ProposeAll: %v", err)
	}
	if len(outs) != len(ps) {
		t.Fatalf("%d outcomes for %d proposals", len(outs), len(ps))
	}
	return outs
}

// proposeAllAsync is proposeAll for a goroutine other than the test's: it
// reports a failure with t.Error and returns zero outcomes.
func proposeAllAsync(t *testing.T, b *bundle, ps ...arbiter.Proposal) []arbiter.Outcome {
	t.Helper()
	outs, err := b.arb.ProposeAll(context.Background(), ps)
	if err != nil || len(outs) != len(ps) {
		t.Errorf("ProposeAll: %d outcomes for %d proposals, %v", len(outs), len(ps), err)
		return make([]arbiter.Outcome, len(ps))
	}
	return outs
}

func wantSuccess(t *testing.T, outs []arbiter.Outcome, idx ...int) {
	t.Helper()
	for _, i := range idx {
		if outs[i].Rejected != nil || outs[i].Result.Status != tool.StatusSuccess {
			t.Errorf("outcome %d = %+v %+v, want success", i, outs[i].Rejected, outs[i].Result)
		}
	}
}

// revOf returns the revision of the event of this type for this call.
func revOf(t *testing.T, evs []rpc.Event, typ rpc.EventType, callID string) int64 {
	t.Helper()
	for _, e := range evs {
		var p struct {
			CallID string `json:"call_id"`
		}
		json.Unmarshal(e.Payload, &p) //nolint:errcheck // events without a call ID do not match
		if e.Type == typ && p.CallID == callID {
			return e.Rev
		}
	}
	t.Fatalf("no %s event for %s", typ, callID)
	return 0
}

func noLocksHeld(t *testing.T, b *bundle) {
	t.Helper()
	if snap := b.locks.Snapshot(); len(snap.Held) != 0 || len(snap.Waiting) != 0 {
		t.Errorf("locks left behind: %+v", snap)
	}
}

func TestProposeAll(t *testing.T) {
	t.Parallel()

	t.Run("DisjointCallsRunAtOnce", func(t *testing.T) {
		t.Parallel()
		st := newSpanTool("test.slow", fileLock, 200*time.Millisecond)
		b := setup(t, []tool.Tool{st}, nil, nil)
		ids := []string{"c1", "c2", "c3", "c4"}
		var ps []arbiter.Proposal
		for i, id := range ids {
			ps = append(ps, slow(lock.Edge, id, fmt.Sprintf("f%d.txt", i)))
		}
		outs := proposeAll(t, b, ps...)
		wantSuccess(t, outs, 0, 1, 2, 3)
		var spans []span
		for i, id := range ids {
			spans = append(spans, st.span(t, id))
			if got := outs[i].Result.Summary; got != "ran "+id {
				t.Errorf("outcome %d is %q, want the result of %s", i, got, id)
			}
		}
		if !overlapAll(spans...) {
			t.Errorf("the four calls did not all run at one instant: %v", spans)
		}
		if evs := b.events(t); len(evs) != 8 {
			t.Errorf("%d events, want a call and a result for each of 4 calls", len(evs))
		}
		noLocksHeld(t, b)
	})

	t.Run("ConflictingCallsRunInStepOrder", func(t *testing.T) {
		t.Parallel()
		st := newSpanTool("test.slow", fileLock, 100*time.Millisecond)
		b := setup(t, []tool.Tool{st}, nil, nil)
		outs := proposeAll(t, b,
			slow(lock.Edge, "c1", "a.txt"),
			slow(lock.Edge, "c2", "b.txt"),
			slow(lock.Edge, "c3", "a.txt"),
			call(lock.Edge, "w1", "choir.fs.write", `{"path":"same.txt","content":"first"}`),
			call(lock.Edge, "w2", "choir.fs.write", `{"path":"same.txt","content":"second"}`),
		)
		wantSuccess(t, outs, 0, 1, 2, 3, 4)
		s1, s2, s3 := st.span(t, "c1"), st.span(t, "c2"), st.span(t, "c3")
		if s3.start.Before(s1.end) {
			t.Errorf("c3 started %v before c1, which writes the same file, ended", s1.end.Sub(s3.start))
		}
		if !overlapAll(s1, s2) {
			t.Errorf("c2 (another file) did not run beside c1: %v %v", s1, s2)
		}
		got, err := os.ReadFile(filepath.Join(b.ws, "same.txt"))
		if err != nil || string(got) != "second" {
			t.Errorf("same.txt = %q, %v; want the second write's content", got, err)
		}
		evs := b.events(t)
		if r1, c2 := revOf(t, evs, rpc.EventToolResultCommitted, "w1"), revOf(t, evs, rpc.EventToolCallCommitted, "w2"); c2 < r1 {
			t.Errorf("w2 was committed at revision %d, before w1's result at %d", c2, r1)
		}
		noLocksHeld(t, b)
	})

	t.Run("OwnersWritingDifferentFilesRunAtOnce", func(t *testing.T) {
		t.Parallel()
		st := newSpanTool("test.slow", fileLock, 200*time.Millisecond)
		b := setup(t, []tool.Tool{st}, nil, nil)
		ca, cb := mustCore(t, "a"), mustCore(t, "b")
		var wg sync.WaitGroup
		for _, p := range []arbiter.Proposal{slow(ca, "a1", "a.txt"), slow(cb, "b1", "b.txt")} {
			wg.Go(func() { wantSuccess(t, proposeAllAsync(t, b, p), 0) })
		}
		wg.Wait()
		if sa, sb := st.span(t, "a1"), st.span(t, "b1"); !overlapAll(sa, sb) {
			t.Errorf("core:a and core:b did not write at once: %v %v", sa, sb)
		}
		b.events(t)
		noLocksHeld(t, b)
	})

	t.Run("OwnersCallingExecAreSerialised", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, nil, nil)
		ca, cb := mustCore(t, "a"), mustCore(t, "b")
		var wg sync.WaitGroup
		for _, p := range []arbiter.Proposal{
			call(ca, "a1", "choir.exec", `{"command":"sleep 0.2"}`),
			call(cb, "b1", "choir.exec", `{"command":"sleep 0.2"}`),
		} {
			wg.Go(func() {
				outs := proposeAllAsync(t, b, p)
				wantSuccess(t, outs, 0)
				if !slices.Equal(outs[0].Locks, []string{"workspace:X"}) {
					t.Errorf("exec locks = %v", outs[0].Locks)
				}
			})
		}
		wg.Wait()
		// A call holds its locks from before tool_call_committed until after
		// tool_result_committed, so the log shows whether two calls held
		// theirs at once.
		evs := b.events(t)
		ac, ar := revOf(t, evs, rpc.EventToolCallCommitted, "a1"), revOf(t, evs, rpc.EventToolResultCommitted, "a1")
		bc, br := revOf(t, evs, rpc.EventToolCallCommitted, "b1"), revOf(t, evs, rpc.EventToolResultCommitted, "b1")
		if !(ar < bc || br < ac) {
			t.Errorf("the two execs held workspace:X at once: a1 %d-%d, b1 %d-%d", ac, ar, bc, br)
		}
		noLocksHeld(t, b)
	})

	t.Run("RejectedCallsHoldUpNothing", func(t *testing.T) {
		t.Parallel()
		st := newSpanTool("test.slow", fileLock, 200*time.Millisecond)
		b := setup(t, []tool.Tool{st}, nil, nil)
		outs := proposeAll(t, b,
			slow(lock.Edge, "c1", "a.txt"),
			call(lock.Edge, "bad1", "choir.fs.delete", `{"path":"a.txt"}`),
			slow(lock.Edge, "c2", "b.txt"),
			call(lock.Edge, "bad2", "choir.fs.write", `{"path":"a.txt","content":7}`),
		)
		wantSuccess(t, outs, 0, 2)
		if outs[1].Rejected == nil || outs[1].Rejected.Kind != "unknown_tool" {
			t.Errorf("outcome 1 = %+v, want unknown_tool", outs[1])
		}
		if outs[3].Rejected == nil || outs[3].Rejected.Kind != "invalid_input" {
			t.Errorf("outcome 3 = %+v, want invalid_input", outs[3])
		}
		if s1, s2 := st.span(t, "c1"), st.span(t, "c2"); !overlapAll(s1, s2) {
			t.Errorf("the accepted calls did not run at once: %v %v", s1, s2)
		}
		evs := b.events(t)
		for _, id := range []string{"bad1", "bad2"} {
			ev := evs[revOf(t, evs, rpc.EventToolCallRequested, id)-1]
			if !strings.Contains(string(ev.Payload), `"status":"rejected"`) {
				t.Errorf("logged request of %s = %s", id, ev.Payload)
			}
		}
		if _, err := os.Stat(filepath.Join(b.ws, "a.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("a rejected write touched the workspace: %v", err)
		}
		noLocksHeld(t, b)
	})

	t.Run("PanickingToolCostsOthersNothing", func(t *testing.T) {
		t.Parallel()
		st := newSpanTool("test.slow", fileLock, 100*time.Millisecond)
		boom := newFuncTool("test.boom", []tool.LockTemplate{{Resource: "file:boom.txt", Mode: tool.ModeExclusive}},
			func(context.Context) (tool.Result, error) { panic("kaboom") })
		b := setup(t, []tool.Tool{st, boom}, nil, nil)
		outs := proposeAll(t, b, slow(lock.Edge, "c1", "a.txt"), call(lock.Edge, "boom", "test.boom", `{}`), slow(lock.Edge, "c2", "b.txt"))
		wantSuccess(t, outs, 0, 2)
		if outs[1].Result.Status != tool.StatusError || !strings.Contains(outs[1].Result.Summary, "kaboom") {
			t.Errorf("panicking call = %+v", outs[1].Result)
		}
		evs := b.events(t)
		res, err := commitlog.Decode[commitlog.ToolResult](evs[revOf(t, evs, rpc.EventToolResultCommitted, "boom")-1])
		if err != nil || res.Status != commitlog.ToolError {
			t.Errorf("logged result of the panic = %+v, %v", res, err)
		}
		noLocksHeld(t, b)
	})

	t.Run("CancelledWhileWaitingKeepsEarlierResults", func(t *testing.T) {
		t.Parallel()
		st := newSpanTool("test.slow", fileLock, time.Hour)
		b := setup(t, []tool.Tool{st}, nil, nil)
		gate := st.gate("c1")
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		type result struct {
			outs []arbiter.Outcome
			err  error
		}
		done := make(chan result, 1)
		go func() {
			outs, err := b.arb.ProposeAll(ctx, []arbiter.Proposal{slow(lock.Edge, "c1", "a.txt"), slow(lock.Edge, "c2", "a.txt")})
			done <- result{outs, err}
		}()
		st.awaitStart(t, "c1")
		cancel()
		close(gate)
		r := <-done
		if !errors.Is(r.err, context.Canceled) || !strings.Contains(r.err.Error(), "c2") {
			t.Fatalf("err = %v, want c2 cancelled", r.err)
		}
		if r.outs[0].Result.Status == "" {
			t.Errorf("c1's outcome was lost: %+v", r.outs[0])
		}
		evs := b.events(t)
		ev := evs[revOf(t, evs, rpc.EventToolCallRequested, "c2")-1]
		if !strings.Contains(string(ev.Payload), `"status":"abandoned"`) {
			t.Errorf("logged request of c2 = %s", ev.Payload)
		}
		revOf(t, evs, rpc.EventToolResultCommitted, "c1")
		noLocksHeld(t, b)
	})

	t.Run("MixedOwnersAreRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t, nil, nil, nil)
		_, err := b.arb.ProposeAll(context.Background(), []arbiter.Proposal{
			call(lock.Edge, "c1", "choir.fs.read", `{"path":"a"}`),
			call(mustCore(t, "a"), "c2", "choir.fs.read", `{"path":"b"}`),
		})
		if err == nil || !strings.Contains(err.Error(), "one owner") {
			t.Fatalf("err = %v", err)
		}
		if evs := b.events(t); len(evs) != 0 {
			t.Errorf("a refused step logged %d events", len(evs))
		}
	})

	t.Run("OwnWaiterBehindAnotherOwnerIsWaitedOut", func(t *testing.T) {
		t.Parallel()
		testIndirectSelfDeadlock(t)
	})
}

// testIndirectSelfDeadlock builds the state where the lock manager refuses
// a call of a step as a self-deadlock although none would occur: c3 asks
// for b.txt while core:w waits for a.txt and b.txt, and a.txt is held by
// c2, a call of the same step. c3 must wait for c2 to end instead of being
// abandoned.
func testIndirectSelfDeadlock(t *testing.T) {
	st := newSpanTool("test.slow", []tool.LockTemplate{{Resource: "file:{path}", Mode: tool.ModeExclusive},
		{Resource: "file:gate.txt", Mode: tool.ModeExclusive}}, 0)
	slowA := newSpanTool("test.hold", fileLock, 0)
	logs := &logbuf.Buffer{}
	b := setupWith(t, []tool.Tool{st, slowA}, slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	gate1, gate2 := st.gate("c1"), slowA.gate("c2")
	done := make(chan []arbiter.Outcome, 1)
	go func() {
		done <- proposeAllAsync(t, b,
			slow(lock.Edge, "c1", "c.txt"), // holds gate.txt: c3 waits for it
			call(lock.Edge, "c2", "test.hold", `{"id":"c2","path":"a.txt"}`),
			slow(lock.Edge, "c3", "b.txt"))
	}()
	st.awaitStart(t, "c1")
	slowA.awaitStart(t, "c2")
	// core:w queues for a.txt and b.txt behind c2.
	w := mustCore(t, "w")
	wDone := make(chan error, 1)
	go func() {
		wDone <- b.locks.Do(context.Background(), w, []lock.Request{
			{Key: mustFileKey(t, "a.txt"), Mode: lock.X}, {Key: mustFileKey(t, "b.txt"), Mode: lock.X}},
			func() error { return nil })
	}()
	waitFor(t, "core:w to wait", func() bool { return len(b.locks.Snapshot().Waiting) == 1 })
	// Here the manager refuses b.txt to the edge: it would queue behind
	// core:w, which waits for a.txt that the edge holds.
	if _, ok, err := b.locks.TryAcquire(lock.Edge, []lock.Request{{Key: mustFileKey(t, "b.txt"), Mode: lock.X}}); ok || !errors.Is(err, lock.ErrWouldSelfDeadlock) {
		t.Fatalf("TryAcquire b.txt = %v, %v; want a self-deadlock refusal", ok, err)
	}
	close(gate1) // c1 ends, and c3 asks for b.txt
	waitFor(t, "c3 to be refused and wait", func() bool { return strings.Contains(logs.String(), "call_id=c3") })
	close(gate2) // c2 ends: core:w runs, then c3
	outs := <-done
	if err := <-wDone; err != nil {
		t.Fatal(err)
	}
	wantSuccess(t, outs, 0, 1, 2)
	b.events(t)
	noLocksHeld(t, b)
}

func mustCore(t testing.TB, job string) lock.Owner {
	t.Helper()
	o, err := lock.Core(job)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func mustFileKey(t testing.TB, p string) lock.Key {
	t.Helper()
	k, err := lock.FileKey(p)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// setupWith is setup with a logger.
func setupWith(t testing.TB, extra []tool.Tool, logger *slog.Logger) *bundle {
	t.Helper()
	ws := t.TempDir()
	reg, err := builtin.Build(builtin.Config{Tools: extra})
	if err != nil {
		t.Fatal(err)
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	locks := lock.New()
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Locks: locks, Env: tool.Env{Workspace: ws}, Logger: logger})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { arb.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return &bundle{arb: arb, log: log, ws: ws, locks: locks}
}
