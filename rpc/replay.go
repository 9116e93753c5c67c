package rpc

import (
	"context"
	"crypto/sha256"

	"github.com/choirhq/choir/rpc/internal/replay"
	"github.com/choirhq/choir/rpc/wire"
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
	ErrCode    wire.Code
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
	m *replay.Memory[ReplayRecord]
}

// NewMemoryReplayStore returns an empty store.
func NewMemoryReplayStore(opts MemoryReplayOptions) *MemoryReplayStore {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = 4096
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = 8 << 20
	}
	return &MemoryReplayStore{m: replay.NewMemory(opts.MaxEntries, opts.MaxBytes,
		func(r ReplayRecord) int { return len(r.Response) + len(r.ErrMessage) },
		func(r ReplayRecord) bool { return r.Trimmed },
		func(r ReplayRecord) ReplayRecord {
			r.Response, r.ErrMessage, r.Trimmed = nil, "", true
			return r
		})}
}

// Load implements ReplayStore.
func (m *MemoryReplayStore) Load(_ context.Context, key ReplayKey) (ReplayRecord, bool, error) {
	rec, ok := m.m.Load(key.SessionID, key.RequestID)
	return rec, ok, nil
}

// Save implements ReplayStore.
func (m *MemoryReplayStore) Save(_ context.Context, key ReplayKey, rec ReplayRecord) error {
	m.m.Save(key.SessionID, key.RequestID, rec)
	return nil
}

// Forget implements ReplayStore.
func (m *MemoryReplayStore) Forget(_ context.Context, sessionID string) error {
	m.m.Forget(sessionID)
	return nil
}
