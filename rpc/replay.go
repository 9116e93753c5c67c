package rpc

import (
	"container/list"
	"context"
	"crypto/sha256"
	"sync"
)

// ReplayKey identifies a call for replay protection: request IDs are
// scoped to their session.
type ReplayKey struct {
	SessionID string
	RequestID string
}

// ReplayRecord is the outcome of the first execution of a mutating call.
type ReplayRecord struct {
	Verb Verb
	// Digest is the SHA-256 of the request payload; a replay whose payload
	// differs is refused with CodeConflict.
	Digest [sha256.Size]byte
	// Response is the JSON response payload, when the call succeeded.
	Response []byte
	// ErrCode and ErrMessage are the error, when it failed.
	ErrCode    Code
	ErrMessage string
	// Trimmed reports that the store dropped the response to stay within
	// its bounds: the call was executed, but its response cannot be
	// returned again, so a replay is refused with CodeConflict.
	Trimmed bool
}

// ReplayStore keeps the outcomes of mutating calls so that a call replayed
// with the same request ID returns the first outcome and is not executed
// again. The server guarantees that concurrent duplicates run the handler
// once (single-flight within the process); the store makes that hold
// across time, and, for a durable implementation, across restarts of
// choird.
//
// Outcomes with code internal or unavailable are never saved: nothing
// durable is known to have happened, so a retry may run again.
type ReplayStore interface {
	// Load returns the record saved for key, if any.
	Load(ctx context.Context, key ReplayKey) (ReplayRecord, bool, error)
	// Save records the outcome of key's first execution.
	Save(ctx context.Context, key ReplayKey, rec ReplayRecord) error
	// Forget drops every record of a session, when it ends.
	Forget(ctx context.Context, sessionID string) error
}

// ReplayKeeper is implemented by a ReplayStore that keeps no record of some
// verbs (choird's keeps none of HEARTBEAT, which is idempotent by revision):
// the server then skips the lookup for them. Concurrent duplicates still run
// once.
type ReplayKeeper interface {
	Keeps(verb Verb) bool
}

// MemoryReplayOptions bound a MemoryReplayStore. A zero field takes its
// default.
type MemoryReplayOptions struct {
	// MaxEntries is how many calls are remembered per session; beyond it
	// the oldest are forgotten entirely, and a replay of one of them runs
	// again (default 4096).
	MaxEntries int
	// MaxBytes bounds the responses kept per session; beyond it the oldest
	// responses are dropped but their keys kept (Trimmed), so a replay of
	// one of them is refused rather than run again (default 8 MiB).
	MaxBytes int
}

// MemoryReplayStore is a bounded, per-session, in-memory ReplayStore. It
// forgets everything when the process ends.
type MemoryReplayStore struct {
	opts     MemoryReplayOptions
	mu       sync.Mutex
	sessions map[string]*replaySession
}

type replaySession struct {
	entries map[string]*list.Element // request ID -> element of order
	order   list.List                // of *replayEntry, oldest first
	// firstKept is the oldest entry whose response is still held. Trimming
	// goes oldest first and eviction removes the oldest, so the trimmed
	// entries are always a prefix of order.
	firstKept *list.Element
	bytes     int
}

type replayEntry struct {
	requestID string
	rec       ReplayRecord
}

func (e *replayEntry) size() int { return len(e.rec.Response) + len(e.rec.ErrMessage) }

// NewMemoryReplayStore returns an empty store.
func NewMemoryReplayStore(opts MemoryReplayOptions) *MemoryReplayStore {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 4096
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 8 << 20
	}
	return &MemoryReplayStore{opts: opts, sessions: map[string]*replaySession{}}
}

// Load implements ReplayStore.
func (m *MemoryReplayStore) Load(_ context.Context, key ReplayKey) (ReplayRecord, bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[key.SessionID]
	if s == nil {
		return ReplayRecord{}, false, nil
	}
	el := s.entries[key.RequestID]
	if el == nil {
		return ReplayRecord{}, false, nil
	}
	return el.Value.(*replayEntry).rec, true, nil
}

// Save implements ReplayStore.
func (m *MemoryReplayStore) Save(_ context.Context, key ReplayKey, rec ReplayRecord) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[key.SessionID]
	if s == nil {
		s = &replaySession{entries: map[string]*list.Element{}}
		m.sessions[key.SessionID] = s
	}
	if el := s.entries[key.RequestID]; el != nil {
		s.remove(el)
	}
	e := &replayEntry{requestID: key.RequestID, rec: rec}
	el := s.order.PushBack(e)
	s.entries[key.RequestID] = el
	if e.rec.Trimmed {
		e.rec.Response, e.rec.ErrMessage = nil, ""
	} else if s.firstKept == nil {
		s.firstKept = el
	}
	s.bytes += e.size()
	for s.order.Len() > m.opts.MaxEntries {
		s.remove(s.order.Front())
	}
	for s.bytes > m.opts.MaxBytes && s.firstKept != nil {
		s.trim()
	}
	return nil
}

// remove drops el entirely.
func (s *replaySession) remove(el *list.Element) {
	e := el.Value.(*replayEntry)
	if el == s.firstKept {
		s.firstKept = el.Next()
	}
	s.bytes -= e.size()
	delete(s.entries, e.requestID)
	s.order.Remove(el)
}

// trim drops the response of the oldest entry that still has one.
func (s *replaySession) trim() {
	el := s.firstKept
	e := el.Value.(*replayEntry)
	s.bytes -= e.size()
	e.rec.Response, e.rec.ErrMessage, e.rec.Trimmed = nil, "", true
	s.firstKept = el.Next()
}

// Forget implements ReplayStore.
func (m *MemoryReplayStore) Forget(_ context.Context, sessionID string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions, sessionID)
	return nil
}
