package callserve

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
)

// Key identifies a mutating call: request IDs are scoped to their session.
type Key struct {
	SessionID string
	RequestID string
}

// Tag is what a request ID was first used for: a duplicate with another
// tag is a conflict.
type Tag struct {
	Verb   string
	Digest [sha256.Size]byte
}

// Mismatch returns the conflict of a request ID reused for want's call,
// nil if first is the same call.
func Mismatch(requestID string, first, want Tag) *Refusal {
	if first != want {
		return refuse(Conflict, fmt.Sprintf("request ID %s was already used for a different %s call in this session; use a fresh request ID", requestID, first.Verb))
	}
	return nil
}

// Flights runs each mutating call at most once at a time per Key, its
// duplicates waiting for it. The zero value is ready to use.
type Flights[O any] struct {
	mu sync.Mutex
	m  map[Key]*flight[O]
}

// flight is a mutating call in progress; duplicates wait for it.
type flight[O any] struct {
	tag  Tag
	done chan struct{}
	out  O
	// cached reports that out was stored: a duplicate returns it. An
	// uncached outcome (internal, unavailable) lets a duplicate run.
	cached bool
}

// Do runs the call key names, unless a duplicate is in flight: then it
// waits for that one and returns its outcome if run reported it cached
// (replayed is then true), or runs after it if not. run reports whether its
// outcome is stored for replays, and whether it is itself a replay.
func (fs *Flights[O]) Do(ctx context.Context, key Key, tag Tag, run func() (out O, cached, replayed bool)) (out O, replayed bool, r *Refusal) {
	var f *flight[O]
	for f == nil {
		fs.mu.Lock()
		if g := fs.m[key]; g != nil {
			fs.mu.Unlock()
			select {
			case <-g.done:
			case <-ctx.Done():
				return out, false, refuse(Unavailable, "request canceled while a duplicate was in flight")
			}
			if r := Mismatch(key.RequestID, g.tag, tag); r != nil {
				return out, false, r
			}
			if g.cached {
				return g.out, true, nil
			}
			continue // The first attempt left no trace: run again.
		}
		f = &flight[O]{tag: tag, done: make(chan struct{})}
		if fs.m == nil {
			fs.m = map[Key]*flight[O]{}
		}
		fs.m[key] = f
		fs.mu.Unlock()
	}
	defer func() {
		fs.mu.Lock()
		delete(fs.m, key)
		fs.mu.Unlock()
		close(f.done)
	}()
	f.out, f.cached, replayed = run()
	return f.out, replayed, nil
}
