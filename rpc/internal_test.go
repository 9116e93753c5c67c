package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/choirhq/choir/rpc/wire"
)

func TestMemoryReplayStore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	key := func(s, r string) ReplayKey { return ReplayKey{SessionID: s, RequestID: r} }
	rec := func(n int) ReplayRecord {
		return ReplayRecord{Verb: VerbHeartbeat, Response: []byte(strings.Repeat("x", n))}
	}

	t.Run("SavedRecordLoads", func(t *testing.T) {
		t.Parallel()
		m := NewMemoryReplayStore(MemoryReplayOptions{})
		m.Save(ctx, key("s", "r1"), rec(3))
		got, ok, err := m.Load(ctx, key("s", "r1"))
		if err != nil || !ok || string(got.Response) != "xxx" {
			t.Errorf("got %+v %v %v", got, ok, err)
		}
		if _, ok, _ := m.Load(ctx, key("other", "r1")); ok {
			t.Error("request IDs leak across sessions")
		}
	})

	t.Run("OldestEntriesAreForgottenBeyondMaxEntries", func(t *testing.T) {
		t.Parallel()
		m := NewMemoryReplayStore(MemoryReplayOptions{MaxEntries: 3})
		for i := range 5 {
			m.Save(ctx, key("s", fmt.Sprint(i)), rec(1))
		}
		for i := range 5 {
			_, ok, _ := m.Load(ctx, key("s", fmt.Sprint(i)))
			if ok != (i >= 2) {
				t.Errorf("entry %d present %v", i, ok)
			}
		}
	})

	t.Run("OldestResponsesAreTrimmedBeyondMaxBytes", func(t *testing.T) {
		t.Parallel()
		m := NewMemoryReplayStore(MemoryReplayOptions{MaxBytes: 25})
		for i := range 4 {
			m.Save(ctx, key("s", fmt.Sprint(i)), rec(10))
		}
		for i := range 4 {
			got, ok, _ := m.Load(ctx, key("s", fmt.Sprint(i)))
			if !ok || got.Trimmed != (i < 2) || (got.Response == nil) != (i < 2) {
				t.Errorf("entry %d: present %v trimmed %v response %q", i, ok, got.Trimmed, got.Response)
			}
		}
		// A response larger than the whole budget is kept as a key only.
		m.Save(ctx, key("s", "huge"), rec(100))
		if got, ok, _ := m.Load(ctx, key("s", "huge")); !ok || !got.Trimmed {
			t.Errorf("huge: present %v trimmed %v", ok, got.Trimmed)
		}
	})

	t.Run("ForgetDropsTheSession", func(t *testing.T) {
		t.Parallel()
		m := NewMemoryReplayStore(MemoryReplayOptions{})
		m.Save(ctx, key("s", "r"), rec(1))
		m.Save(ctx, key("t", "r"), rec(1))
		m.Forget(ctx, "s")
		if _, ok, _ := m.Load(ctx, key("s", "r")); ok {
			t.Error("forgotten session still loads")
		}
		if _, ok, _ := m.Load(ctx, key("t", "r")); !ok {
			t.Error("another session was forgotten")
		}
	})
}

// TestTrimmedReplayIsRefused runs a server whose store has trimmed a
// response: the replay must be refused, not executed again.
func TestTrimmedReplayIsRefused(t *testing.T) {
	t.Parallel()
	s := &Server{replay: NewMemoryReplayStore(MemoryReplayOptions{MaxBytes: 1})}
	ran := 0
	run := func() outcome { ran++; return outcome{resp: []byte(`{"ack":true}`)} }
	key := ReplayKey{SessionID: "s", RequestID: "r"}
	digest := [32]byte{1}
	if out, replayed := s.once(context.Background(), key, VerbReportStatus, digest, run); out.err != nil || replayed {
		t.Fatalf("first: %+v %v", out, replayed)
	}
	out, _ := s.once(context.Background(), key, VerbReportStatus, digest, run)
	if out.err == nil || out.err.Code != wire.CodeConflict || !strings.Contains(out.err.Message, "no longer retained") {
		t.Errorf("replay: %+v", out.err)
	}
	if ran != 1 {
		t.Errorf("ran %d times", ran)
	}
}

// TestUncachedOutcomeLetsTheRetryRun checks that an internal error leaves
// no record, so that a retry with the same request ID runs again.
func TestUncachedOutcomeLetsTheRetryRun(t *testing.T) {
	t.Parallel()
	s := &Server{replay: NewMemoryReplayStore(MemoryReplayOptions{})}
	ran := 0
	run := func() outcome {
		ran++
		if ran == 1 {
			return outcome{err: wire.Errorf(wire.CodeInternal, "boom")}
		}
		return outcome{resp: []byte(`{}`)}
	}
	key := ReplayKey{SessionID: "s", RequestID: "r"}
	s.once(context.Background(), key, VerbHeartbeat, [32]byte{}, run)
	out, replayed := s.once(context.Background(), key, VerbHeartbeat, [32]byte{}, run)
	if out.err != nil || replayed || ran != 2 {
		t.Errorf("second: %+v replayed %v ran %d", out, replayed, ran)
	}
}

// keeperStore is a memory store that keeps no HEARTBEAT records and counts
// its lookups.
type keeperStore struct {
	*MemoryReplayStore
	loads int
}

func (k *keeperStore) Keeps(v Verb) bool { return v != VerbHeartbeat }

func (k *keeperStore) Load(ctx context.Context, key ReplayKey) (ReplayRecord, bool, error) {
	k.loads++
	return k.MemoryReplayStore.Load(ctx, key)
}

// TestReplayKeeperSkipsTheLookup: a store that keeps no record of a verb is
// not asked for one, and other verbs are still looked up and replayed.
func TestReplayKeeperSkipsTheLookup(t *testing.T) {
	t.Parallel()
	store := &keeperStore{MemoryReplayStore: NewMemoryReplayStore(MemoryReplayOptions{})}
	s := &Server{replay: store}
	run := func() outcome { return outcome{resp: []byte(`{"ack":true}`)} }
	ctx := context.Background()
	s.once(ctx, ReplayKey{SessionID: "s", RequestID: "hb"}, VerbHeartbeat, [32]byte{}, run)
	if store.loads != 0 {
		t.Errorf("%d lookups for a verb the store keeps no record of", store.loads)
	}
	key := ReplayKey{SessionID: "s", RequestID: "st"}
	s.once(ctx, key, VerbReportStatus, [32]byte{2}, run)
	if _, replayed := s.once(ctx, key, VerbReportStatus, [32]byte{2}, run); !replayed || store.loads != 2 {
		t.Errorf("kept verb: replayed %v after %d lookups", replayed, store.loads)
	}
}

// fencedHandler refuses every heartbeat, as choird's does for a session
// that is no longer live.
type fencedHandler struct{ fuzzHandler }

func (fencedHandler) HandleHeartbeat(context.Context, Call, HeartbeatRequest) (HeartbeatResponse, error) {
	return HeartbeatResponse{}, fmt.Errorf("session is crashed: %w", wire.ErrUnauthenticated)
}

// identityAuth knows one session's token and nothing of its state.
type identityAuth struct{ hash []byte }

func (a identityAuth) Authenticate(context.Context, string, string) (Session, error) {
	return Session{}, wire.ErrUnauthenticated // The session is revoked.
}

func (a identityAuth) AuthenticateIdentity(_ context.Context, id, token string) (Session, error) {
	if id != fuzzSession || !LeaseTokenMatches(token, a.hash) {
		return Session{}, wire.ErrUnauthenticated
	}
	return Session{ID: id, AgentID: "alice"}, nil
}

// TestFencedHeartbeat checks that a HEARTBEAT is authenticated by its token
// alone, that the handler's refusal of a revoked session reaches the agent
// as unauthenticated, and that the server then keeps nothing for the
// session; other verbs still need a live session.
func TestFencedHeartbeat(t *testing.T) {
	t.Parallel()
	token, hash := NewLeaseToken()
	srv, err := NewServer(ServerOptions{Handler: fencedHandler{}, Authenticator: identityAuth{hash}})
	if err != nil {
		t.Fatal(err)
	}
	events, last := fuzzChain()
	post := func(verb Verb, body []byte) *httptest.ResponseRecorder {
		req := httptest.NewRequest(http.MethodPost, PathRPCPrefix+string(verb), bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(HeaderRequestID, "r-1")
		req.Header.Set(HeaderSessionID, fuzzSession)
		req.Header.Set(HeaderAuthorization, "Bearer "+token)
		rec := httptest.NewRecorder()
		srv.ServeHTTP(rec, req)
		return rec
	}
	hb, _ := json.Marshal(HeartbeatRequest{BaseRev: 0, NewRev: 2, Patches: events, HashNew: last, Timestamp: fuzzAt})
	rec := post(VerbHeartbeat, hb)
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), "session is crashed") {
		t.Errorf("heartbeat of a revoked session: %d %s", rec.Code, rec.Body)
	}
	if kept := srv.core.Sessions.Len(); kept != 0 {
		t.Errorf("the server keeps state for %d sessions after the refusal", kept)
	}
	if rec := post(VerbReportStatus, []byte(`{"lane":"edge","state":"IDLE","budget_remaining":{}}`)); rec.Code != http.StatusUnauthorized {
		t.Errorf("REPORT_STATUS of a revoked session: %d %s", rec.Code, rec.Body)
	}
}
