package agentapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// TestHelloTailReachesBackToTheWindows checks the tail a resumed session
// gets: it starts at the lowest event window boundary the snapshot records
// (the edge's, or a core job's) when that is below the snapshot, so that
// the events between a lane's boundary and the snapshot, in neither the
// snapshot nor the lane's summary, are in its window again; a boundary the
// tolerant decode cannot read is ignored, and a boundary too far back is
// capped at 20,000 events, with a warning.
func TestHelloTailReachesBackToTheWindows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	// resume replicates evs in one session with a snapshot of state at
	// rev, crashes it, and returns what the next session's hello gets and
	// what choird logged.
	resume := func(t *testing.T, evs []rpc.Event, rev int64, state string) (rpc.InitHelloResponse, string) {
		t.Helper()
		pool := dbtest.NewPool(t)
		cfg := choirdtest.TwoAgentsConfig(t)
		s1, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		const batch = 5000
		for from := 0; from < len(evs); from += batch {
			end := min(from+batch, len(evs))
			req := choirdtest.Patch(evs[from:end], int64(from), chainHash(evs, int64(from)))
			if int64(from) < rev && rev <= int64(end) {
				req.Snapshot = &rpc.Snapshot{Rev: rev, Hash: evs[rev-1].Hash, State: json.RawMessage(state)}
			}
			if _, err := agentapi.Replicate(ctx, pool, s1.Session.ID, req); err != nil {
				t.Fatal(err)
			}
		}
		session.EndSession(ctx, pool, nil, s1.Session.ID, "crashed", "test crash")
		s2, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
		if err != nil {
			t.Fatal(err)
		}
		var logs bytes.Buffer
		resp, err := agentapi.HelloWith(ctx, pool, slog.New(slog.NewJSONHandler(&logs, nil)), choirdtest.SessionCall(s2), choirdtest.HelloRequest(s2))
		if err != nil {
			t.Fatal(err)
		}
		if resp.Snapshot == nil || resp.Snapshot.Rev != rev {
			t.Fatalf("snapshot = %+v, want the one at rev %d", resp.Snapshot, rev)
		}
		return resp, logs.String()
	}
	// checkTail fails unless the tail is the chain's events from..to.
	checkTail := func(t *testing.T, resp rpc.InitHelloResponse, evs []rpc.Event, from, to int64) {
		t.Helper()
		tail := resp.TailEvents
		if len(tail) == 0 || tail[0].Rev != from || tail[len(tail)-1].Rev != to || int64(len(tail)) != to-from+1 {
			t.Fatalf("tail of %d events from %v, want revisions %d to %d", len(tail), firstRev(tail), from, to)
		}
		for _, e := range tail {
			if e.Hash != evs[e.Rev-1].Hash {
				t.Fatalf("tail event %d is not the chain's", e.Rev)
			}
		}
		if err := resp.Validate(); err != nil {
			t.Errorf("the response does not validate: %v", err)
		}
	}

	for _, tc := range []struct {
		name     string
		state    string
		from     int64
		capped   bool
		snapshot int64
	}{
		{name: "EdgeBoundaryBelowTheSnapshot", snapshot: 10, from: 4,
			state: `{"edge":{"tool_calls_used":2,"event_window_boundary":4},"open_jobs":[]}`},
		{name: "AJobsBoundaryIsLower", snapshot: 10, from: 2, state: `{"edge":{"event_window_boundary":7},
			"open_jobs":[{"start":{"job_name":"a"},"event_window_boundary":5},{"start":{"job_name":"b"},"event_window_boundary":2}]}`},
		{name: "BoundaryAtTheSnapshotAddsNothing", snapshot: 10, from: 11,
			state: `{"edge":{"event_window_boundary":11},"open_jobs":null}`},
		{name: "NoBoundaryAddsNothing", snapshot: 10, from: 11, state: `{"lane_state":{"edge":"idle"}}`},
		{name: "UnreadableBoundariesAreIgnored", snapshot: 10, from: 8, state: `{"edge":{"event_window_boundary":"3"},
			"open_jobs":[{"event_window_boundary":-1},{"event_window_boundary":2.5},7,{"event_window_boundary":8}]}`},
		{name: "OpenJobsOfAnotherShape", snapshot: 10, from: 6, state: `{"edge":{"event_window_boundary":6},"open_jobs":{"x":1}}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			evs := choirdtest.ChainEvents(t, 1, 12, rpc.Genesis)
			resp, logs := resume(t, evs, tc.snapshot, tc.state)
			checkTail(t, resp, evs, tc.from, 12)
			if strings.Contains(logs, "tail capped") {
				t.Errorf("a short tail was capped: %s", logs)
			}
		})
	}

	t.Run("ATailTooFarBackIsCapped", func(t *testing.T) {
		t.Parallel()
		const n = 20_010
		evs := choirdtest.ChainEvents(t, 1, n, rpc.Genesis)
		resp, logs := resume(t, evs, n-5, `{"edge":{"event_window_boundary":1}}`)
		// The latest 20,000 events: from the snapshot's window back as far
		// as the cap lets it.
		checkTail(t, resp, evs, n-20_000+1, n)
		if !strings.Contains(logs, "tail capped") || !strings.Contains(logs, `"window_boundary":1`) ||
			!strings.Contains(logs, fmt.Sprintf(`"tail_from":%d`, n-20_000+1)) {
			t.Errorf("the cap is not logged: %s", logs)
		}
	})
}

// TestHelloTailBoundedInBytes: a tail reaching back before the snapshot
// is trimmed from its oldest end while its events before the snapshot take
// more than 16 MiB, so that no snapshot makes the response too large for
// the agent to read; the events after the snapshot are all sent.
func TestHelloTailBoundedInBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	cfg := choirdtest.TwoAgentsConfig(t)
	s1, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
	if err != nil {
		t.Fatal(err)
	}
	// Twelve events of 2 MiB each, then two small ones; the snapshot at
	// 12 says the edge's window starts at 1.
	big := strings.Repeat("x", 2<<20)
	var evs []rpc.Event
	prev := rpc.Genesis
	for rev := int64(1); rev <= 14; rev++ {
		text := "small"
		if rev <= 12 {
			text = big
		}
		e := rpc.Event{Rev: rev, Type: rpc.EventUserMsg, Lane: "edge", Payload: json.RawMessage(`{"text":"` + text + `"}`)}
		if err := e.Seal(prev); err != nil {
			t.Fatal(err)
		}
		evs, prev = append(evs, e), e.Hash
	}
	for i := range 14 {
		req := choirdtest.Patch(evs[i:i+1], int64(i), chainHash(evs, int64(i)))
		if i == 11 {
			req.Snapshot = &rpc.Snapshot{Rev: 12, Hash: evs[11].Hash, State: json.RawMessage(`{"edge":{"event_window_boundary":1}}`)}
		}
		if _, err := agentapi.Replicate(ctx, pool, s1.Session.ID, req); err != nil {
			t.Fatal(err)
		}
	}
	session.EndSession(ctx, pool, nil, s1.Session.ID, "crashed", "test crash")
	s2, err := session.CreateSession(ctx, pool, cfg, "assistant", admin.StartOverrides{}, 1, "process")
	if err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	resp, err := agentapi.HelloWith(ctx, pool, slog.New(slog.NewJSONHandler(&logs, nil)), choirdtest.SessionCall(s2), choirdtest.HelloRequest(s2))
	if err != nil {
		t.Fatal(err)
	}
	// 16 MiB hold seven of the 2 MiB events with their allowance, not eight.
	if got := firstRev(resp.TailEvents); got != int64(6) || len(resp.TailEvents) != 9 {
		t.Errorf("tail of %d events from %v, want 9 from 6", len(resp.TailEvents), got)
	}
	if !strings.Contains(logs.String(), "tail capped") || !strings.Contains(logs.String(), `"tail_from":6`) {
		t.Errorf("the trim is not logged: %s", logs.String())
	}
}

func firstRev(tail []rpc.Event) any {
	if len(tail) == 0 {
		return "nothing"
	}
	return tail[0].Rev
}
