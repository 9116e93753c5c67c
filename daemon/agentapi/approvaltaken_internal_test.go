package agentapi

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/choirhq/choir/rpc"
)

// TestTakenApprovalIDs: a heartbeat's events take an approval's outcome
// with the lane's approval event, and give it back with a later one marked
// released (the session ended before the approved call ran); other events
// and other sources take nothing.
func TestTakenApprovalIDs(t *testing.T) {
	t.Parallel()
	const a, b = "0b6f1c9e-1d2b-4c1e-9a55-3f0f7f0e8c11", "5e1d1c0a-7a5b-4f0e-8d3e-2b9f4a6c7d21"
	ev := func(typ rpc.EventType, payload string) rpc.Event {
		return rpc.Event{Type: typ, Lane: "edge", Payload: json.RawMessage(payload)}
	}
	took := func(id string) rpc.Event {
		return ev(rpc.EventInjectedInstruction, `{"source":"approval","approval_id":"`+id+`","status":"approved"}`)
	}
	released := func(id string) rpc.Event {
		return ev(rpc.EventInjectedInstruction, `{"source":"approval","approval_id":"`+id+`","released":true}`)
	}
	for _, tc := range []struct {
		name   string
		events []rpc.Event
		want   []string
	}{
		{"Taken", []rpc.Event{took(a), took(b)}, []string{a, b}},
		{"ReleasedInTheSameHeartbeat", []rpc.Event{took(a), took(b), released(a)}, []string{b}},
		{"TakenAgainAfterARelease", []rpc.Event{took(a), released(a), took(a)}, []string{a}},
		{"OtherSourcesAndTypesTakeNothing", []rpc.Event{
			ev(rpc.EventInjectedInstruction, `{"source":"user","approval_id":"`+a+`","text":"x"}`),
			ev(rpc.EventToolResultCommitted, `{"source":"approval","approval_id":"`+a+`"}`),
			ev(rpc.EventInjectedInstruction, `{"source":"approval","approval_id":"appr-1"}`),
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := takenApprovalIDs(tc.events); !slices.Equal(got, tc.want) {
				t.Errorf("taken = %v, want %v", got, tc.want)
			}
		})
	}
}
