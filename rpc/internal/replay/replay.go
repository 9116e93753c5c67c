// Package replay is the bookkeeping behind rpc.MemoryReplayStore, which
// knows nothing of calls: a bounded per-session memory of records that
// forgets the oldest records beyond a count, and beyond a size drops the
// bulk of the oldest but keeps their keys, so that a replay of one of them
// can be refused rather than run again.
package replay

import (
	"container/list"
	"sync"
)

// Memory is a bounded, per-session, in-memory map from request IDs to
// records of type R.
type Memory[R any] struct {
	maxEntries, maxBytes int
	size                 func(R) int
	trimmed              func(R) bool
	trim                 func(R) R

	mu       sync.Mutex
	sessions map[string]*session[R]
}

// NewMemory returns an empty memory that keeps at most maxEntries records
// and maxBytes bytes of them per session. size measures a record, trimmed
// reports a record without its bulk, and trim drops the bulk.
func NewMemory[R any](maxEntries, maxBytes int, size func(R) int, trimmed func(R) bool, trim func(R) R) *Memory[R] {
	return &Memory[R]{maxEntries: maxEntries, maxBytes: maxBytes, size: size, trimmed: trimmed, trim: trim,
		sessions: map[string]*session[R]{}}
}

type session[R any] struct {
	entries map[string]*list.Element // request ID -> element of order
	order   list.List                // of *entry[R], oldest first
	// firstKept is the oldest entry whose response is still held. Trimming
	// goes oldest first and eviction removes the oldest, so the trimmed
	// entries are always a prefix of order.
	firstKept *list.Element
	bytes     int
}

type entry[R any] struct {
	requestID string
	rec       R
	size      int
}

// Load returns the record saved for a session's request, if any.
func (m *Memory[R]) Load(sessionID, requestID string) (R, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var zero R
	s := m.sessions[sessionID]
	if s == nil {
		return zero, false
	}
	el := s.entries[requestID]
	if el == nil {
		return zero, false
	}
	return el.Value.(*entry[R]).rec, true
}

// Save records rec for a session's request, forgetting or trimming the
// session's oldest records to stay within the bounds.
func (m *Memory[R]) Save(sessionID, requestID string, rec R) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.sessions[sessionID]
	if s == nil {
		s = &session[R]{entries: map[string]*list.Element{}}
		m.sessions[sessionID] = s
	}
	if el := s.entries[requestID]; el != nil {
		s.remove(el)
	}
	e := &entry[R]{requestID: requestID, rec: rec}
	el := s.order.PushBack(e)
	s.entries[requestID] = el
	if m.trimmed(e.rec) {
		e.rec = m.trim(e.rec)
	} else if s.firstKept == nil {
		s.firstKept = el
	}
	e.size = m.size(e.rec)
	s.bytes += e.size
	for s.order.Len() > m.maxEntries {
		s.remove(s.order.Front())
	}
	for s.bytes > m.maxBytes && s.firstKept != nil {
		el := s.firstKept
		e := el.Value.(*entry[R])
		s.bytes -= e.size
		e.rec = m.trim(e.rec)
		e.size = m.size(e.rec)
		s.bytes += e.size
		s.firstKept = el.Next()
	}
}

// remove drops el entirely.
func (s *session[R]) remove(el *list.Element) {
	e := el.Value.(*entry[R])
	if el == s.firstKept {
		s.firstKept = el.Next()
	}
	s.bytes -= e.size
	delete(s.entries, e.requestID)
	s.order.Remove(el)
}

// Forget drops every record of a session.
func (m *Memory[R]) Forget(sessionID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.sessions, sessionID)
}
