package rpc

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/choirhq/choir/rpc/internal/callserve"
	"github.com/choirhq/choir/rpc/internal/check"
	"github.com/choirhq/choir/rpc/internal/stream"
	"github.com/choirhq/choir/rpc/wire"
)

// ErrPushBufferFull is returned by Server.Push when a session already has
// Limits.PushBuffer pushes that no event stream has taken.
var ErrPushBufferFull = stream.ErrFull

// Push queues p for the session's agent and returns its sequence number. It
// never blocks: the session's event stream delivers the push as soon as it
// is attached, and a reconnecting stream resumes where its agent left off.
//
// The queue is bounded by Limits.PushBuffer. When it is full of pushes no
// stream has taken yet (the agent is away), Push returns an error wrapping
// ErrPushBufferFull and queues nothing: the caller keeps its durable record
// (inbox row, pending approval) and redelivers later. Pushes already
// written are kept for resumption only while there is room; an agent that
// resumes after they were evicted sees a gap in Seq.
func (s *Server) Push(sessionID string, p Push) (uint64, error) {
	if err := p.Validate(); err != nil {
		return 0, fmt.Errorf("push %s to session %s: %w: %w", p.Kind, sessionID, wire.ErrBadRequest, err)
	}
	seq, err := s.core.Sessions.Get(sessionID).Pushes.Add(string(p.Kind), func(seq uint64) ([]byte, error) {
		p.Epoch, p.Seq = s.core.Epoch, seq
		return json.Marshal(p)
	})
	if err != nil {
		return 0, fmt.Errorf("push %s to session %s: %w", p.Kind, sessionID, err)
	}
	return seq, nil
}

// StreamAttached reports whether the session's agent has an event stream
// open.
func (s *Server) StreamAttached(sessionID string) bool {
	st := s.core.Sessions.Lookup(sessionID)
	return st != nil && st.Pushes.Attached()
}

func (s *Server) serveEvents(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet {
		s.reject(w, r, wire.Errorf(wire.CodeBadRequest, "method %s not allowed for %s; use GET", check.Quote(r.Method), PathEvents))
		return
	}
	if id := r.Header.Get(HeaderRequestID); id != "" && !ValidID(id) {
		s.reject(w, r, wire.Errorf(wire.CodeBadRequest, "header %s: not a valid ID", HeaderRequestID))
		return
	}
	sessionID, token, rf := callserve.ParseAuth(r.Header, &envelopeNames)
	if rf != nil {
		s.reject(w, r, refusalError(rf))
		return
	}
	_, st, aerr := s.authenticate(r.Context(), "", sessionID, token)
	if aerr != nil {
		s.reject(w, r, aerr)
		return
	}
	if rf := st.ServeStream(w, r, sessionID, HeaderLastEventID, s.core.Epoch, s.core.Ping, callserve.Stopping(r.Context())); rf != nil {
		s.reject(w, r, refusalError(rf))
	}
}
