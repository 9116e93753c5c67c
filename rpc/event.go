package rpc

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/choirhq/choir/rpc/internal/chain"
	"github.com/choirhq/choir/rpc/internal/check"
)

// EventType names a committed event of the agent's log. The set matches the
// CHECK constraint on choir_control.session_events.event_type.
type EventType string

// The event types of spec 7.4 and 13.1.
const (
	EventUserMsg                  EventType = "user_msg"
	EventModelOutput              EventType = "model_output"
	EventLLMCallCommitted         EventType = "llm_call_committed"
	EventToolCallRequested        EventType = "tool_call_requested"
	EventToolCallCommitted        EventType = "tool_call_committed"
	EventToolResultCommitted      EventType = "tool_result_committed"
	EventMemoryWriteCommitted     EventType = "memory_write_committed"
	EventSkillTransitionCommitted EventType = "skill_transition_committed"
	EventCoreStarted              EventType = "core_started"
	EventCoreStopped              EventType = "core_stopped"
	EventInjectedInstruction      EventType = "injected_instruction"
	EventCancelled                EventType = "cancelled"
	EventSessionSummary           EventType = "session_summary"
)

var eventTypes = map[EventType]bool{
	EventUserMsg: true, EventModelOutput: true, EventLLMCallCommitted: true,
	EventToolCallRequested: true, EventToolCallCommitted: true, EventToolResultCommitted: true,
	EventMemoryWriteCommitted: true, EventSkillTransitionCommitted: true,
	EventCoreStarted: true, EventCoreStopped: true, EventInjectedInstruction: true,
	EventCancelled: true, EventSessionSummary: true,
}

// Valid reports whether t is a known event type.
func (t EventType) Valid() bool { return eventTypes[t] }

// ValidLane reports whether lane names a lane the log accepts: "edge",
// "system", or "core:<job-name>", as the session_events CHECK constraint
// does.
func ValidLane(lane string) bool { return check.ValidLane(lane) }

// Hash is a SHA-256 chain hash.
type Hash [32]byte

// Genesis is hash_prev of the first event of a fresh session.
var Genesis Hash

// String returns the hash in hex.
func (h Hash) String() string { return hex.EncodeToString(h[:]) }

// MarshalText encodes the hash as hex.
func (h Hash) MarshalText() ([]byte, error) { return []byte(h.String()), nil }

// UnmarshalText decodes a hex hash.
func (h *Hash) UnmarshalText(b []byte) error {
	if len(b) != 64 {
		return fmt.Errorf("hash: want 64 hex digits, got %d characters", len(b))
	}
	_, err := hex.Decode(h[:], b)
	if err != nil {
		return fmt.Errorf("hash: %w", err)
	}
	return nil
}

// HashFromBytes copies a 32-byte slice (as stored in Postgres) into a Hash.
func HashFromBytes(b []byte) (Hash, error) {
	var h Hash
	if len(b) != len(h) {
		return h, fmt.Errorf("hash: want 32 bytes, got %d", len(b))
	}
	copy(h[:], b)
	return h, nil
}

// Event is one committed entry of an agent's log, as the arbiter appends it
// and as HEARTBEAT replicates it.
type Event struct {
	Rev       int64           `json:"rev"`
	Type      EventType       `json:"type"`
	Lane      string          `json:"lane"`
	Payload   json.RawMessage `json:"payload"`
	CreatedAt time.Time       `json:"created_at"`
	HashPrev  Hash            `json:"hash_prev"`
	Hash      Hash            `json:"hash"`
}

// ComputeHash returns SHA-256 over hash_prev and the event's canonical
// bytes: the revision, type, lane, creation time (UTC, microseconds, as
// Postgres keeps it) and the canonical JSON of the payload, each length-
// prefixed so that no two distinct events share an encoding (see package
// rpc/internal/chain).
func (e *Event) ComputeHash() (Hash, error) {
	h, err := chain.Hash(e.HashPrev, e.Rev, string(e.Type), e.Lane, e.CreatedAt, e.Payload)
	return Hash(h), err
}

// Seal sets e.HashPrev to prev, normalises CreatedAt and sets e.Hash.
func (e *Event) Seal(prev Hash) error {
	e.HashPrev = prev
	e.CreatedAt = e.CreatedAt.UTC().Truncate(time.Microsecond)
	if len(e.Payload) == 0 {
		e.Payload = json.RawMessage(`{}`)
	}
	h, err := e.ComputeHash()
	if err != nil {
		return err
	}
	e.Hash = h
	return nil
}

// Verify checks that e's hash matches its contents and that it follows prev.
func (e *Event) Verify(prev Hash) error {
	if e.HashPrev != prev {
		return fmt.Errorf("event rev %d: hash_prev %s does not continue the chain at %s", e.Rev, e.HashPrev, prev)
	}
	h, err := e.ComputeHash()
	if err != nil {
		return err
	}
	if h != e.Hash {
		return fmt.Errorf("event rev %d: hash %s does not match its contents (computed %s)", e.Rev, e.Hash, h)
	}
	return nil
}

// CanonicalJSON re-encodes a JSON document with object keys sorted, no
// insignificant whitespace and numbers kept as written, so that the bytes
// hashed do not depend on who serialised the payload (Go, or Postgres jsonb
// on the way back from the replica).
func CanonicalJSON(raw json.RawMessage) ([]byte, error) { return chain.Canonical(raw) }
