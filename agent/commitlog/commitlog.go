// Package commitlog is the agent's commit log (spec 7.4): the append-only,
// hash-chained, in-memory record of everything the arbiter commits, and
// the primary authority on the session while the agent runs. Heartbeats
// replicate it to choird (spec 13.1), which acknowledges what it stored.
//
// Only the arbiter appends. [New] returns the read side, a *[Log] that any
// lane may share, and the write side, an *[Appender], which the arbiter
// keeps to itself: a package that is handed only the *Log has no way to
// append, and an Appender made by any other means than New cannot append
// either.
//
// Revisions run base+1, base+2, ... where base is 0 for a fresh session, or
// the last host-acknowledged revision after recovery (spec 13.2). Each
// event is sealed with [rpc.Event.Seal] over the hash of its predecessor;
// the first over the base hash ([rpc.Genesis] for a fresh session).
//
// # Memory
//
// Events not yet acknowledged by the host are always kept. Of the
// acknowledged ones, at least the newest [WithRetain] (default
// [DefaultRetain]) are kept, so lanes can read their recent window; older
// ones are dropped from memory, in batches, and reading them returns
// [ErrNotRetained] (choird holds them). [Log.Oldest] says where memory
// starts now.
//
// Every read returns copies: callers may keep and modify what they get
// without touching the log.
package commitlog

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/choirhq/choir/rpc"
)

// Errors of the log. They are wrapped with the revisions involved; match
// them with errors.Is.
var (
	// ErrNotRetained: the revision is before the first one held in memory
	// (acknowledged and dropped, or before the recovery base).
	ErrNotRetained = errors.New("revision not retained in memory")
	// ErrBeyondHead: the revision has not been committed yet.
	ErrBeyondHead = errors.New("revision beyond the head of the log")
	// ErrInvalidRange: a range that ends before it starts, or starts below 1.
	ErrInvalidRange = errors.New("invalid revision range")
	// ErrInvalidEvent: an append with an unknown type, an invalid lane or a
	// payload that is not a JSON object.
	ErrInvalidEvent = errors.New("invalid event")
)

// DefaultRetain is how many acknowledged events a Log keeps in memory
// unless told otherwise with WithRetain.
const DefaultRetain = 1024

// Option configures a Log.
type Option func(*Log)

// WithRetain sets how many acknowledged events are kept in memory at least
// (beyond the unacknowledged ones, which are always kept). A negative n
// keeps every event.
func WithRetain(n int) Option {
	return func(l *Log) { l.retain = n }
}

// WithClock sets the clock that stamps events' CreatedAt (time.Now by
// default).
func WithClock(now func() time.Time) Option {
	return func(l *Log) { l.now = now }
}

// Log is the read side of the commit log. It is safe for concurrent use.
type Log struct {
	// wmu serialises appends. The head fields are written with both wmu
	// and mu held, so an appender may read them holding wmu alone and
	// seal the next event without blocking readers.
	wmu sync.Mutex
	mu  sync.RWMutex

	baseRev  int64
	baseHash rpc.Hash
	headRev  int64
	headHash rpc.Hash
	lastTime time.Time // CreatedAt of the head event: times never go back
	ackRev   int64
	ackHash  rpc.Hash

	events []rpc.Event // revisions first .. headRev
	first  int64

	changed chan struct{} // closed at the next append; nil if nobody asked

	retain int
	now    func() time.Time
}

// Appender is the write side of the commit log. Only the arbiter holds it.
type Appender struct {
	l *Log
}

// New returns an empty log whose first event will have revision baseRev+1
// and hash_prev baseHash, and the Appender that alone can extend it. A
// fresh session starts at New(0, rpc.Genesis); a recovered one at the last
// host-acknowledged revision and its hash. The base counts as
// acknowledged.
func New(baseRev int64, baseHash rpc.Hash, opts ...Option) (*Log, *Appender, error) {
	if baseRev < 0 {
		return nil, nil, fmt.Errorf("new commit log: negative base revision %d", baseRev)
	}
	l := &Log{
		baseRev: baseRev, baseHash: baseHash,
		headRev: baseRev, headHash: baseHash,
		ackRev: baseRev, ackHash: baseHash,
		first:  baseRev + 1,
		retain: DefaultRetain,
		now:    time.Now,
	}
	for _, o := range opts {
		o(l)
	}
	return l, &Appender{l: l}, nil
}

// Log returns the read side of the appender's log.
func (a *Appender) Log() *Log { return a.l }

// Append commits one event: it checks the type, lane and payload, numbers
// the event, stamps it, seals it over the previous hash, and returns a copy
// of it as committed. The payload must be a JSON object (empty means {});
// the log keeps its own copy. Readers never wait for the hashing.
func (a *Appender) Append(typ rpc.EventType, lane string, payload json.RawMessage) (rpc.Event, error) {
	if a == nil || a.l == nil {
		return rpc.Event{}, errors.New("append event: appender not made by commitlog.New")
	}
	if !typ.Valid() {
		return rpc.Event{}, fmt.Errorf("append event: unknown type %q: %w", typ, ErrInvalidEvent)
	}
	if !rpc.ValidLane(lane) {
		return rpc.Event{}, fmt.Errorf("append %s event: lane %q, want edge, system or core:<job>: %w", typ, lane, ErrInvalidEvent)
	}
	if len(payload) == 0 {
		payload = json.RawMessage(`{}`)
	} else if !isObject(payload) {
		return rpc.Event{}, fmt.Errorf("append %s event: payload is not a JSON object: %w", typ, ErrInvalidEvent)
	}

	l := a.l
	l.wmu.Lock()
	defer l.wmu.Unlock()
	e := rpc.Event{
		Rev:       l.headRev + 1,
		Type:      typ,
		Lane:      lane,
		Payload:   bytes.Clone(payload),
		CreatedAt: l.now(),
	}
	// Keep created_at in commit order even if the wall clock steps back.
	if e.CreatedAt.Before(l.lastTime) {
		e.CreatedAt = l.lastTime
	}
	if err := e.Seal(l.headHash); err != nil {
		return rpc.Event{}, fmt.Errorf("append %s event: %w: %w", typ, ErrInvalidEvent, err)
	}

	l.mu.Lock()
	l.events = append(l.events, e)
	l.headRev, l.headHash, l.lastTime = e.Rev, e.Hash, e.CreatedAt
	ch := l.changed
	l.changed = nil
	l.mu.Unlock()
	if ch != nil {
		close(ch)
	}
	e.Payload = bytes.Clone(e.Payload)
	return e, nil
}

// AppendPayload commits an event of p's type with p, encoded as JSON, as
// its payload. If p has a Validate method, it must pass.
func (a *Appender) AppendPayload(lane string, p Payload) (rpc.Event, error) {
	if v, ok := p.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			return rpc.Event{}, fmt.Errorf("append %s event: %w: %w", p.EventType(), ErrInvalidEvent, err)
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		return rpc.Event{}, fmt.Errorf("append %s event: encode payload: %w", p.EventType(), err)
	}
	return a.Append(p.EventType(), lane, b)
}

// isObject reports whether b is one valid JSON value, and an object.
func isObject(b []byte) bool {
	t := bytes.TrimLeft(b, " \t\r\n")
	return len(t) > 0 && t[0] == '{' && json.Valid(b)
}

// Head returns the revision and hash of the last committed event (the base
// if there is none).
func (l *Log) Head() (int64, rpc.Hash) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.headRev, l.headHash
}

// Base returns the revision and hash the log started from.
func (l *Log) Base() (int64, rpc.Hash) {
	return l.baseRev, l.baseHash
}

// Acked returns the last revision the host acknowledged, and its hash.
func (l *Log) Acked() (int64, rpc.Hash) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.ackRev, l.ackHash
}

// Oldest returns the first revision held in memory (Head()+1 if none is).
func (l *Log) Oldest() int64 {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return l.first
}

// Get returns a copy of the event at rev.
func (l *Log) Get(rev int64) (rpc.Event, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.check(rev, rev); err != nil {
		return rpc.Event{}, err
	}
	e := l.events[rev-l.first]
	e.Payload = bytes.Clone(e.Payload)
	return e, nil
}

// Range returns copies of the events from through to, inclusive. from may
// be to+1, for an empty range.
func (l *Log) Range(from, to int64) ([]rpc.Event, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if err := l.check(from, to); err != nil {
		return nil, err
	}
	return copyEvents(l.events[from-l.first : to-l.first+1]), nil
}

// Since returns copies of the events after rev, up to the head: what a
// reader that has seen rev has not seen yet.
func (l *Log) Since(rev int64) ([]rpc.Event, error) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if rev > l.headRev {
		return nil, fmt.Errorf("events since revision %d: head is %d: %w", rev, l.headRev, ErrBeyondHead)
	}
	if err := l.check(rev+1, l.headRev); err != nil {
		return nil, err
	}
	return copyEvents(l.events[rev+1-l.first:]), nil
}

// check validates the range from..to against what is retained. mu is held.
func (l *Log) check(from, to int64) error {
	switch {
	case from < 1 || from > to+1:
		return fmt.Errorf("revisions %d..%d: %w", from, to, ErrInvalidRange)
	case from < l.first:
		return fmt.Errorf("revision %d: memory starts at %d: %w", from, l.first, ErrNotRetained)
	case to > l.headRev:
		return fmt.Errorf("revision %d: head is %d: %w", to, l.headRev, ErrBeyondHead)
	}
	return nil
}

// copyEvents copies events, their payloads into one shared buffer; each
// payload's capacity ends at its length, so appending to one cannot
// overwrite the next.
func copyEvents(src []rpc.Event) []rpc.Event {
	n := 0
	for i := range src {
		n += len(src[i].Payload)
	}
	buf := make([]byte, 0, n)
	out := make([]rpc.Event, len(src))
	for i, e := range src {
		start := len(buf)
		buf = append(buf, e.Payload...)
		e.Payload = buf[start:len(buf):len(buf)]
		out[i] = e
	}
	return out
}

// Patch is the contiguous run of events a heartbeat replicates (spec 13.1):
// the events BaseRev+1..NewRev, chained from HashPrev (the hash at BaseRev)
// to HashNew (the hash at NewRev). The JSON names are those of the
// heartbeat.
type Patch struct {
	BaseRev  int64       `json:"base_rev"`
	NewRev   int64       `json:"new_rev"`
	HashPrev rpc.Hash    `json:"hash_prev"`
	HashNew  rpc.Hash    `json:"hash_new"`
	Events   []rpc.Event `json:"patches"`
}

// Empty reports whether the patch carries no event.
func (p Patch) Empty() bool { return p.NewRev == p.BaseRev }

// Verify checks that the patch is contiguous, that every event's hash
// matches its contents, and that the chain runs from HashPrev to HashNew.
func (p Patch) Verify() error {
	if int64(len(p.Events)) != p.NewRev-p.BaseRev {
		return fmt.Errorf("patch %d..%d: %d events", p.BaseRev, p.NewRev, len(p.Events))
	}
	h, err := VerifyChain(p.BaseRev, p.HashPrev, p.Events)
	if err != nil {
		return fmt.Errorf("patch %d..%d: %w", p.BaseRev, p.NewRev, err)
	}
	if h != p.HashNew {
		return fmt.Errorf("patch %d..%d: chain ends at %s, hash_new is %s", p.BaseRev, p.NewRev, h, p.HashNew)
	}
	return nil
}

// VerifyChain checks that events continue the chain at (prevRev, prev):
// consecutive revisions from prevRev+1, each verified against its
// predecessor's hash. It returns the hash of the last event (prev if there
// is none).
func VerifyChain(prevRev int64, prev rpc.Hash, events []rpc.Event) (rpc.Hash, error) {
	for i := range events {
		e := &events[i]
		if e.Rev != prevRev+1 {
			return prev, fmt.Errorf("event %d has revision %d, want %d", i, e.Rev, prevRev+1)
		}
		if err := e.Verify(prev); err != nil {
			return prev, err
		}
		prevRev, prev = e.Rev, e.Hash
	}
	return prev, nil
}

// Unacked returns the events the host has not acknowledged yet, as the
// patch for the next heartbeat. If everything is acknowledged the patch is
// empty, with BaseRev = NewRev and HashPrev = HashNew.
func (l *Log) Unacked() Patch { return l.UnackedLimit(0) }

// UnackedLimit is Unacked limited to the first max events (no limit if max
// is 0 or less), to bound the size of one heartbeat.
func (l *Log) UnackedLimit(max int) Patch {
	l.mu.RLock()
	defer l.mu.RUnlock()
	n := l.headRev - l.ackRev
	if max > 0 && n > int64(max) {
		n = int64(max)
	}
	p := Patch{BaseRev: l.ackRev, NewRev: l.ackRev + n, HashPrev: l.ackHash, HashNew: l.ackHash}
	if n > 0 {
		from := l.ackRev + 1 - l.first
		p.Events = copyEvents(l.events[from : from+n])
		p.HashNew = p.Events[n-1].Hash
	}
	return p
}

// Ack records that the host has stored every event up to rev. An ack at
// or below the current one is a no-op (heartbeat answers may be repeated);
// an ack beyond the head is an error, since the host cannot hold what was
// never sent. Acknowledged events beyond the retained window are dropped
// from memory.
func (l *Log) Ack(rev int64) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if rev > l.headRev {
		return fmt.Errorf("ack revision %d: head is %d: %w", rev, l.headRev, ErrBeyondHead)
	}
	if rev <= l.ackRev {
		return nil
	}
	l.ackRev, l.ackHash = rev, l.events[rev-l.first].Hash
	l.trim()
	return nil
}

// trim drops acknowledged events beyond the retained window, once at least
// half the events held can go, so that the copy it makes costs O(1) per
// event. mu is held.
func (l *Log) trim() {
	if l.retain < 0 {
		return
	}
	keepFrom := l.ackRev - int64(l.retain) + 1
	k := keepFrom - l.first
	if k <= 0 || 2*k < int64(len(l.events)) {
		return
	}
	n := copy(l.events, l.events[k:])
	clear(l.events[n:]) // let the payloads go
	l.events = l.events[:n]
	l.first = keepFrom
}

// Changed returns a channel that is closed at the next append. Readers
// follow the log by taking the channel, reading Since what they have seen,
// and waiting on the channel; the appender never blocks on them.
func (l *Log) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.changed == nil {
		l.changed = make(chan struct{})
	}
	return l.changed
}

// Wait blocks until the head is beyond rev, or ctx ends.
func (l *Log) Wait(ctx context.Context, rev int64) error {
	for {
		l.mu.Lock()
		if l.headRev > rev {
			l.mu.Unlock()
			return nil
		}
		if l.changed == nil {
			l.changed = make(chan struct{})
		}
		ch := l.changed
		l.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("wait for revision %d: %w", rev+1, ctx.Err())
		}
	}
}

// NewWithHistory returns a log like New whose memory already holds history:
// the acknowledged events a recovering agent received from choird (the tail
// after its snapshot), ending at baseRev with baseHash. The chain of the
// history is verified; readers see it as they would have before the
// restart, so the lanes' event windows survive a crash.
func NewWithHistory(baseRev int64, baseHash rpc.Hash, history []rpc.Event, opts ...Option) (*Log, *Appender, error) {
	l, a, err := New(baseRev, baseHash, opts...)
	if err != nil || len(history) == 0 {
		return l, a, err
	}
	first := history[0]
	last, err := VerifyChain(first.Rev-1, first.HashPrev, history)
	if err != nil {
		return nil, nil, fmt.Errorf("recovered history: %w", err)
	}
	end := history[len(history)-1]
	if end.Rev != baseRev || last != baseHash {
		return nil, nil, fmt.Errorf("recovered history ends at revision %d, not at the base %d with its hash: %w",
			end.Rev, baseRev, ErrInvalidRange)
	}
	l.events = copyEvents(history)
	l.first = first.Rev
	l.lastTime = end.CreatedAt
	return l, a, nil
}
