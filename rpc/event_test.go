package rpc

import (
	"encoding/json"
	"testing"
	"time"
)

func TestEventChain(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 21, 10, 0, 0, 123456789, time.UTC)
	e1 := Event{Rev: 1, Type: EventUserMsg, Lane: "edge", Payload: json.RawMessage(`{"text":"hi","b":[1,2.50]}`), CreatedAt: at}
	if err := e1.Seal(Genesis); err != nil {
		t.Fatal(err)
	}
	t.Run("VerifiesAfterSeal", func(t *testing.T) {
		t.Parallel()
		if err := e1.Verify(Genesis); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("PayloadAsPostgresReturnsItHashesTheSame", func(t *testing.T) {
		t.Parallel()
		// jsonb sorts keys by length and drops whitespace; numbers keep their text.
		e := e1
		e.Payload = json.RawMessage(`{"b": [1, 2.50], "text": "hi"}`)
		if err := e.Verify(Genesis); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("AnyChangedFieldBreaksTheHash", func(t *testing.T) {
		t.Parallel()
		for name, mut := range map[string]func(*Event){
			"Rev":     func(e *Event) { e.Rev = 2 },
			"Type":    func(e *Event) { e.Type = EventModelOutput },
			"Lane":    func(e *Event) { e.Lane = "core:x" },
			"Payload": func(e *Event) { e.Payload = json.RawMessage(`{"text":"ho","b":[1,2.50]}`) },
			"Time":    func(e *Event) { e.CreatedAt = at.Add(time.Microsecond) },
		} {
			e := e1
			mut(&e)
			if e.Verify(Genesis) == nil {
				t.Errorf("changing %s kept the hash valid", name)
			}
		}
	})
	t.Run("WrongPredecessorIsRejected", func(t *testing.T) {
		t.Parallel()
		e2 := Event{Rev: 2, Type: EventModelOutput, Lane: "edge", CreatedAt: at}
		if err := e2.Seal(e1.Hash); err != nil {
			t.Fatal(err)
		}
		if err := e2.Verify(e1.Hash); err != nil {
			t.Fatal(err)
		}
		if e2.Verify(Genesis) == nil {
			t.Fatal("verify against the wrong predecessor passed")
		}
	})
	t.Run("HashRoundTripsThroughJSON", func(t *testing.T) {
		t.Parallel()
		b, err := json.Marshal(e1)
		if err != nil {
			t.Fatal(err)
		}
		var back Event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if err := back.Verify(Genesis); err != nil {
			t.Fatal(err)
		}
	})
}
