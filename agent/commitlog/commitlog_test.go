package commitlog_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/rpc"
)

type testBundle struct {
	log *commitlog.Log
	app *commitlog.Appender
}

func setup(t *testing.T, opts ...commitlog.Option) *testBundle {
	t.Helper()
	l, a, err := commitlog.New(0, rpc.Genesis, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &testBundle{log: l, app: a}
}

// appendN appends n user messages and returns them.
func (b *testBundle) appendN(t *testing.T, n int) []rpc.Event {
	t.Helper()
	var out []rpc.Event
	for i := range n {
		e, err := b.app.Append(rpc.EventUserMsg, "edge", json.RawMessage(fmt.Sprintf(`{"text":"message %d"}`, i)))
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
	}
	return out
}

func TestAppend(t *testing.T) {
	t.Parallel()

	t.Run("FreshLogStartsAtGenesis", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if rev, h := b.log.Head(); rev != 0 || h != rpc.Genesis {
			t.Fatalf("head = %d %s", rev, h)
		}
		e, err := b.app.Append(rpc.EventUserMsg, "edge", json.RawMessage(`{"text":"hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		if e.Rev != 1 || e.HashPrev != rpc.Genesis || e.Verify(rpc.Genesis) != nil {
			t.Fatalf("first event = %+v", e)
		}
		if rev, h := b.log.Head(); rev != 1 || h != e.Hash {
			t.Fatalf("head = %d %s, want 1 %s", rev, h, e.Hash)
		}
	})
	t.Run("ChainVerifiesEndToEnd", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		lanes := []string{"edge", "system", "core:refactor-auth", "core:write-tests"}
		types := []rpc.EventType{rpc.EventUserMsg, rpc.EventModelOutput, rpc.EventToolCallCommitted, rpc.EventToolResultCommitted, rpc.EventSkillTransitionCommitted}
		for i := range 200 {
			payload := fmt.Sprintf(`{"i": %d, "nested": {"z": [1, 2.50, "x"], "a": null}}`, i)
			if _, err := b.app.Append(types[i%len(types)], lanes[i%len(lanes)], json.RawMessage(payload)); err != nil {
				t.Fatal(err)
			}
		}
		events, err := b.log.Range(1, 200)
		if err != nil {
			t.Fatal(err)
		}
		end, err := commitlog.VerifyChain(0, rpc.Genesis, events)
		if err != nil {
			t.Fatal(err)
		}
		if _, head := b.log.Head(); end != head {
			t.Fatalf("chain ends at %s, head is %s", end, head)
		}
		// Through JSON, as the heartbeat carries it, the chain still holds.
		raw, err := json.Marshal(events)
		if err != nil {
			t.Fatal(err)
		}
		var back []rpc.Event
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		if _, err := commitlog.VerifyChain(0, rpc.Genesis, back); err != nil {
			t.Fatal(err)
		}
		// Any tampering breaks it.
		back[100].Payload = json.RawMessage(`{"i": 100}`)
		if _, err := commitlog.VerifyChain(0, rpc.Genesis, back); err == nil {
			t.Fatal("tampered chain verified")
		}
		if _, err := commitlog.VerifyChain(0, rpc.Genesis, append(events[:50:50], events[51:]...)); err == nil {
			t.Fatal("chain with a gap verified")
		}
	})
	t.Run("RecoveryContinuesFromBase", func(t *testing.T) {
		t.Parallel()
		base := rpc.Hash(sha256.Sum256([]byte("rev 41")))
		l, a, err := commitlog.New(41, base)
		if err != nil {
			t.Fatal(err)
		}
		if rev, h := l.Head(); rev != 41 || h != base {
			t.Fatalf("head = %d %s", rev, h)
		}
		if rev, h := l.Acked(); rev != 41 || h != base {
			t.Fatalf("acked = %d %s", rev, h)
		}
		e, err := a.Append(rpc.EventCoreStarted, "core:x", nil)
		if err != nil {
			t.Fatal(err)
		}
		if e.Rev != 42 || e.HashPrev != base || string(e.Payload) != "{}" {
			t.Fatalf("first event after recovery = %+v", e)
		}
		if _, err := commitlog.VerifyChain(41, base, []rpc.Event{e}); err != nil {
			t.Fatal(err)
		}
		if _, err := l.Get(41); !errors.Is(err, commitlog.ErrNotRetained) {
			t.Fatalf("Get(41) = %v, want ErrNotRetained", err)
		}
		if p := l.Unacked(); p.BaseRev != 41 || p.NewRev != 42 || p.HashPrev != base || p.Verify() != nil {
			t.Fatalf("unacked after recovery = %+v", p)
		}
		if rev, h := l.Base(); rev != 41 || h != base {
			t.Fatalf("base = %d %s", rev, h)
		}
	})
	t.Run("NegativeBaseIsRefused", func(t *testing.T) {
		t.Parallel()
		if _, _, err := commitlog.New(-1, rpc.Genesis); err == nil {
			t.Fatal("New(-1) succeeded")
		}
	})
	t.Run("InvalidEventsAreRefusedAndLeaveNoTrace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, tc := range []struct {
			name    string
			typ     rpc.EventType
			lane    string
			payload string
		}{
			{"UnknownType", "tool_call_exploded", "edge", `{}`},
			{"EmptyType", "", "edge", `{}`},
			{"EmptyLane", rpc.EventUserMsg, "", `{}`},
			{"UnknownLane", rpc.EventUserMsg, "core", `{}`},
			{"BadJobName", rpc.EventUserMsg, "core:-x", `{}`},
			{"ArrayPayload", rpc.EventUserMsg, "edge", `[1]`},
			{"StringPayload", rpc.EventUserMsg, "edge", `"hi"`},
			{"NullPayload", rpc.EventUserMsg, "edge", `null`},
			{"BrokenJSON", rpc.EventUserMsg, "edge", `{"a":`},
			{"TrailingData", rpc.EventUserMsg, "edge", `{} {}`},
		} {
			_, err := b.app.Append(tc.typ, tc.lane, json.RawMessage(tc.payload))
			if !errors.Is(err, commitlog.ErrInvalidEvent) {
				t.Errorf("%s: Append = %v, want ErrInvalidEvent", tc.name, err)
			}
		}
		if rev, _ := b.log.Head(); rev != 0 {
			t.Fatalf("head moved to %d after refused appends", rev)
		}
		if _, err := b.app.Append(rpc.EventUserMsg, "system", json.RawMessage(" \n{\"ok\":true}")); err != nil {
			t.Fatalf("valid append after refusals: %v", err)
		}
	})
	t.Run("ZeroAppenderCannotAppend", func(t *testing.T) {
		t.Parallel()
		var a commitlog.Appender
		if _, err := a.Append(rpc.EventUserMsg, "edge", nil); err == nil {
			t.Fatal("zero Appender appended")
		}
		var nilApp *commitlog.Appender
		if _, err := nilApp.Append(rpc.EventUserMsg, "edge", nil); err == nil {
			t.Fatal("nil Appender appended")
		}
	})
	t.Run("PayloadIsCopiedIn", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		buf := []byte(`{"text":"original"}`)
		if _, err := b.app.Append(rpc.EventUserMsg, "edge", buf); err != nil {
			t.Fatal(err)
		}
		copy(buf, `{"text":"modified"}`)
		e, err := b.log.Get(1)
		if err != nil {
			t.Fatal(err)
		}
		if string(e.Payload) != `{"text":"original"}` || e.Verify(rpc.Genesis) != nil {
			t.Fatalf("stored payload %s", e.Payload)
		}
	})
	t.Run("CreatedAtComesFromTheClockAndNeverGoesBack", func(t *testing.T) {
		t.Parallel()
		t0 := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.FixedZone("CET", 3600))
		clock := []time.Time{t0, t0.Add(-time.Hour), t0.Add(time.Second)}
		i := 0
		b := setup(t, commitlog.WithClock(func() time.Time { i++; return clock[i-1] }))
		events := b.appendN(t, 3)
		want := []time.Time{t0.UTC().Truncate(time.Microsecond), t0.UTC().Truncate(time.Microsecond), t0.Add(time.Second).UTC().Truncate(time.Microsecond)}
		for i, e := range events {
			if !e.CreatedAt.Equal(want[i]) || e.CreatedAt.Location() != time.UTC {
				t.Errorf("event %d created at %v, want %v UTC", e.Rev, e.CreatedAt, want[i])
			}
		}
	})
}

func TestRead(t *testing.T) {
	t.Parallel()

	t.Run("RangeAndSinceBounds", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.appendN(t, 5)
		for _, tc := range []struct {
			from, to int64
			want     int
			err      error
		}{
			{1, 5, 5, nil},
			{2, 3, 2, nil},
			{5, 5, 1, nil},
			{6, 5, 0, nil}, // empty, at the head
			{1, 0, 0, nil}, // empty, at the start
			{0, 3, 0, commitlog.ErrInvalidRange},
			{4, 2, 0, commitlog.ErrInvalidRange},
			{3, 6, 0, commitlog.ErrBeyondHead},
			{7, 6, 0, commitlog.ErrBeyondHead},
		} {
			got, err := b.log.Range(tc.from, tc.to)
			if !errors.Is(err, tc.err) || len(got) != tc.want {
				t.Errorf("Range(%d, %d) = %d events, %v; want %d, %v", tc.from, tc.to, len(got), err, tc.want, tc.err)
			}
			for i, e := range got {
				if e.Rev != tc.from+int64(i) {
					t.Errorf("Range(%d, %d)[%d].Rev = %d", tc.from, tc.to, i, e.Rev)
				}
			}
		}
		for _, tc := range []struct {
			rev  int64
			want int
			err  error
		}{
			{0, 5, nil}, {3, 2, nil}, {5, 0, nil},
			{6, 0, commitlog.ErrBeyondHead}, {-1, 0, commitlog.ErrInvalidRange},
		} {
			got, err := b.log.Since(tc.rev)
			if !errors.Is(err, tc.err) || len(got) != tc.want {
				t.Errorf("Since(%d) = %d events, %v; want %d, %v", tc.rev, len(got), err, tc.want, tc.err)
			}
		}
		if _, err := b.log.Get(6); !errors.Is(err, commitlog.ErrBeyondHead) {
			t.Errorf("Get(6) = %v", err)
		}
		if _, err := b.log.Get(0); !errors.Is(err, commitlog.ErrInvalidRange) {
			t.Errorf("Get(0) = %v", err)
		}
	})
	t.Run("ReadsAreCopies", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		appended := b.appendN(t, 3)
		appended[0].Payload[2] = 'X' // the event Append returned
		got, err := b.log.Range(1, 3)
		if err != nil {
			t.Fatal(err)
		}
		// Appending to one payload must not run into the next.
		_ = append(got[0].Payload, "garbage"...)
		got[1].Payload[2] = 'X'
		one, err := b.log.Get(3)
		if err != nil {
			t.Fatal(err)
		}
		one.Payload[2] = 'X'
		since, err := b.log.Since(0)
		if err != nil {
			t.Fatal(err)
		}
		since[0].Payload[2] = 'X'
		p := b.log.Unacked()
		p.Events[0].Payload[2] = 'X'

		again, err := b.log.Range(1, 3)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := commitlog.VerifyChain(0, rpc.Genesis, again); err != nil {
			t.Fatalf("log changed through a copy: %v", err)
		}
		if string(got[1].Payload) == string(again[1].Payload) || string(got[0].Payload) != string(again[0].Payload) {
			t.Fatalf("copies alias each other: %s %s", got[0].Payload, got[1].Payload)
		}
	})
}

func TestAck(t *testing.T) {
	t.Parallel()

	t.Run("FreshLogHasEmptyPatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		p := b.log.Unacked()
		if !p.Empty() || p.BaseRev != 0 || p.NewRev != 0 || p.HashPrev != rpc.Genesis || p.HashNew != rpc.Genesis || len(p.Events) != 0 {
			t.Fatalf("patch = %+v", p)
		}
		if err := p.Verify(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("UnackedIsTheContiguousPatchSinceTheAck", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := b.appendN(t, 5)
		p := b.log.Unacked()
		if p.BaseRev != 0 || p.NewRev != 5 || p.HashPrev != rpc.Genesis || p.HashNew != events[4].Hash || len(p.Events) != 5 {
			t.Fatalf("patch = %+v", p)
		}
		if err := p.Verify(); err != nil {
			t.Fatal(err)
		}
		if err := b.log.Ack(3); err != nil {
			t.Fatal(err)
		}
		p = b.log.Unacked()
		if p.BaseRev != 3 || p.NewRev != 5 || p.HashPrev != events[2].Hash || p.HashNew != events[4].Hash ||
			len(p.Events) != 2 || p.Events[0].Rev != 4 {
			t.Fatalf("patch after ack 3 = %+v", p)
		}
		if err := p.Verify(); err != nil {
			t.Fatal(err)
		}
		if rev, h := b.log.Acked(); rev != 3 || h != events[2].Hash {
			t.Fatalf("acked = %d %s", rev, h)
		}
	})
	t.Run("PatchEncodesAsTheHeartbeatFields", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.appendN(t, 2)
		raw, err := json.Marshal(b.log.Unacked())
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]json.RawMessage
		if err := json.Unmarshal(raw, &m); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{"base_rev", "new_rev", "hash_prev", "hash_new", "patches"} {
			if _, ok := m[k]; !ok {
				t.Errorf("patch JSON lacks %q: %s", k, raw)
			}
		}
		var back commitlog.Patch
		if err := json.Unmarshal(raw, &back); err != nil {
			t.Fatal(err)
		}
		if err := back.Verify(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("UnackedLimitBoundsThePatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := b.appendN(t, 10)
		p := b.log.UnackedLimit(4)
		if p.BaseRev != 0 || p.NewRev != 4 || p.HashNew != events[3].Hash || len(p.Events) != 4 || p.Verify() != nil {
			t.Fatalf("limited patch = %+v", p)
		}
		if p := b.log.UnackedLimit(0); p.NewRev != 10 {
			t.Fatalf("UnackedLimit(0).NewRev = %d, want no limit", p.NewRev)
		}
	})
	t.Run("RepeatedAndStaleAcksAreNoOps", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := b.appendN(t, 5)
		for _, rev := range []int64{4, 4, 2, 0} {
			if err := b.log.Ack(rev); err != nil {
				t.Fatalf("Ack(%d) = %v", rev, err)
			}
		}
		if rev, h := b.log.Acked(); rev != 4 || h != events[3].Hash {
			t.Fatalf("acked = %d", rev)
		}
	})
	t.Run("AckBeyondHeadIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.appendN(t, 3)
		if err := b.log.Ack(4); !errors.Is(err, commitlog.ErrBeyondHead) {
			t.Fatalf("Ack(4) = %v, want ErrBeyondHead", err)
		}
		if rev, _ := b.log.Acked(); rev != 0 {
			t.Fatalf("acked moved to %d", rev)
		}
	})
	t.Run("AckOfTheHeadEmptiesThePatch", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		events := b.appendN(t, 3)
		if err := b.log.Ack(3); err != nil {
			t.Fatal(err)
		}
		p := b.log.Unacked()
		if !p.Empty() || p.BaseRev != 3 || p.HashPrev != events[2].Hash || p.HashNew != events[2].Hash || p.Verify() != nil {
			t.Fatalf("patch = %+v", p)
		}
	})
	t.Run("AcknowledgedEventsBeyondTheWindowAreDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, commitlog.WithRetain(2))
		events := b.appendN(t, 10)
		if err := b.log.Ack(10); err != nil {
			t.Fatal(err)
		}
		if _, err := b.log.Get(1); !errors.Is(err, commitlog.ErrNotRetained) {
			t.Fatalf("Get(1) = %v, want ErrNotRetained", err)
		}
		if _, err := b.log.Since(0); !errors.Is(err, commitlog.ErrNotRetained) {
			t.Fatalf("Since(0) = %v, want ErrNotRetained", err)
		}
		// The promised window: the last 2 acknowledged events.
		got, err := b.log.Range(9, 10)
		if err != nil || got[1].Hash != events[9].Hash {
			t.Fatalf("Range(9, 10) = %v, %v", got, err)
		}
		if o := b.log.Oldest(); o > 9 {
			t.Fatalf("Oldest = %d, want at most 9", o)
		}
		// Appending and reading on continue normally.
		more := b.appendN(t, 2)
		if more[0].Rev != 11 || more[0].HashPrev != events[9].Hash {
			t.Fatalf("append after trim = %+v", more[0])
		}
		if p := b.log.Unacked(); p.BaseRev != 10 || p.NewRev != 12 || p.Verify() != nil {
			t.Fatalf("patch after trim = %+v", p)
		}
	})
	t.Run("UnacknowledgedEventsAreNeverDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, commitlog.WithRetain(0))
		b.appendN(t, 10)
		if err := b.log.Ack(8); err != nil {
			t.Fatal(err)
		}
		if got, err := b.log.Range(9, 10); err != nil || len(got) != 2 {
			t.Fatalf("Range(9, 10) = %v, %v", got, err)
		}
		if _, err := b.log.Get(8); !errors.Is(err, commitlog.ErrNotRetained) {
			t.Fatalf("Get(8) = %v, want ErrNotRetained", err)
		}
		if o := b.log.Oldest(); o != 9 {
			t.Fatalf("Oldest = %d, want 9", o)
		}
	})
	t.Run("NegativeRetainKeepsEverything", func(t *testing.T) {
		t.Parallel()
		b := setup(t, commitlog.WithRetain(-1))
		b.appendN(t, 100)
		if err := b.log.Ack(100); err != nil {
			t.Fatal(err)
		}
		if got, err := b.log.Range(1, 100); err != nil || len(got) != 100 {
			t.Fatalf("Range(1, 100) = %d, %v", len(got), err)
		}
	})
}

func TestFollow(t *testing.T) {
	t.Parallel()

	t.Run("ChangedIsClosedByTheNextAppend", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ch := b.log.Changed()
		select {
		case <-ch:
			t.Fatal("closed before any append")
		default:
		}
		if ch2 := b.log.Changed(); ch2 != ch {
			t.Fatal("two readers got different channels for the same append")
		}
		b.appendN(t, 1)
		select {
		case <-ch:
		default:
			t.Fatal("not closed by the append")
		}
		if next := b.log.Changed(); next == ch {
			t.Fatal("closed channel handed out again")
		}
	})
	t.Run("WaitReturnsOnceTheHeadPassesRev", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		done := make(chan error, 1)
		go func() { done <- b.log.Wait(context.Background(), 1) }()
		b.appendN(t, 1) // head 1: not yet
		select {
		case err := <-done:
			t.Fatalf("Wait returned at head 1: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
		b.appendN(t, 1)
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Wait did not return")
		}
		if err := b.log.Wait(context.Background(), 0); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("WaitEndsWithTheContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		defer cancel()
		if err := b.log.Wait(ctx, 0); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Wait = %v", err)
		}
	})
}

// TestConcurrentReadersWhileAppending runs, under -race, readers that
// follow the log and check every event they get against the chain, an
// acknowledger that acks and so trims, and the appender.
func TestConcurrentReadersWhileAppending(t *testing.T) {
	t.Parallel()
	const n = 3000
	b := setup(t, commitlog.WithRetain(64))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			// Follow with Wait + Since, as a lane would; when acks have
			// trimmed past us, skip ahead to what is retained.
			seen, prev := int64(0), rpc.Genesis
			for seen < n {
				if err := b.log.Wait(ctx, seen); err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				events, err := b.log.Since(seen)
				if errors.Is(err, commitlog.ErrNotRetained) {
					oldest := b.log.Oldest()
					e, err := b.log.Get(oldest)
					if errors.Is(err, commitlog.ErrNotRetained) {
						continue // trimmed again meanwhile
					}
					if err != nil {
						t.Errorf("reader %d: Get(%d): %v", r, oldest, err)
						return
					}
					seen, prev = e.Rev-1, e.HashPrev
					continue
				}
				if err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				if prev, err = commitlog.VerifyChain(seen, prev, events); err != nil {
					t.Errorf("reader %d: %v", r, err)
					return
				}
				seen += int64(len(events))
			}
		})
	}
	wg.Go(func() { // heartbeat: send the patch, ack it
		for {
			p := b.log.UnackedLimit(100)
			if err := p.Verify(); err != nil {
				t.Errorf("heartbeat patch: %v", err)
				return
			}
			if err := b.log.Ack(p.NewRev); err != nil {
				t.Errorf("ack: %v", err)
				return
			}
			if p.NewRev == n {
				return
			}
			if err := b.log.Wait(ctx, p.NewRev); err != nil {
				t.Errorf("heartbeat: %v", err)
				return
			}
		}
	})
	for i := range n {
		if _, err := b.app.Append(rpc.EventModelOutput, "core:job", json.RawMessage(fmt.Sprintf(`{"i":%d}`, i))); err != nil {
			t.Fatal(err)
		}
		b.log.Head()
	}
	wg.Wait()
	if rev, _ := b.log.Acked(); rev != n {
		t.Fatalf("acked = %d", rev)
	}
}

func TestNewWithHistory(t *testing.T) {
	t.Parallel()
	_, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := app.Append(rpc.EventUserMsg, "edge", json.RawMessage(fmt.Sprintf(`{"text":"m%d"}`, i))); err != nil {
			t.Fatal(err)
		}
	}
	old := app.Log()
	tail, _ := old.Range(3, 5)
	head, hash := old.Head()

	t.Run("HistoryIsReadableAndTheChainContinues", func(t *testing.T) {
		t.Parallel()
		l, a, err := commitlog.NewWithHistory(head, hash, tail)
		if err != nil {
			t.Fatal(err)
		}
		got, err := l.Range(3, 5)
		if err != nil || len(got) != 3 {
			t.Fatalf("range: %d, %v", len(got), err)
		}
		ev, err := a.Append(rpc.EventModelOutput, "edge", json.RawMessage(`{"text":"after"}`))
		if err != nil || ev.Rev != 6 || ev.HashPrev != hash {
			t.Fatalf("append after recovery: %+v %v", ev, err)
		}
		if p := l.Unacked(); p.BaseRev != 5 || len(p.Events) != 1 {
			t.Errorf("unacked = %+v: history must count as acknowledged", p)
		}
	})
	t.Run("HistoryNotEndingAtTheBaseIsRefused", func(t *testing.T) {
		t.Parallel()
		if _, _, err := commitlog.NewWithHistory(head+1, hash, tail); err == nil {
			t.Fatal("history ending before the base was accepted")
		}
		bad := append([]rpc.Event(nil), tail...)
		bad[1].Payload = json.RawMessage(`{"text":"forged"}`)
		if _, _, err := commitlog.NewWithHistory(head, hash, bad); err == nil {
			t.Fatal("forged history was accepted")
		}
	})
}
