package rpc

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// FuzzEncodeHeartbeat checks that the heartbeat encoder writes exactly what
// json.Marshal writes, or leaves the request to it.
func FuzzEncodeHeartbeat(f *testing.F) {
	f.Add(`{"call_id":"c-1","output":"<b>&amp;</b>"}`, "tool_result_committed", "core:job", int64(1), int64(1700000000123456789), false)
	f.Add(`{"b":1,"a":"\u2028"}`, "model_output", "edge", int64(7), int64(-62135596800000000), true)
	f.Add(` {"a": [1, 2]} `, "user_msg", "ed<ge>\u2028\xff\x01", int64(-1), int64(0), false)
	f.Add(``, "x", "y", int64(0), int64(1), true)
	f.Add(`"\u003c"`, "t\"\\", "\n\t\b\f\r", int64(1<<62), int64(253402300800000000), false)
	f.Fuzz(func(t *testing.T, payload, typ, lane string, rev, nanos int64, snapshot bool) {
		e := Event{Rev: rev, Type: EventType(typ), Lane: lane, CreatedAt: time.Unix(0, nanos).In(time.FixedZone("x", 3600)), HashPrev: Hash{1, 2}, Hash: Hash{0xff}}
		if payload != "" {
			e.Payload = json.RawMessage(payload)
		}
		for _, req := range []HeartbeatRequest{
			{BaseRev: rev, NewRev: rev + 2, Patches: []Event{e, e}, ConfigVersion: 3, HashPrev: Hash{9}, HashNew: Hash{8}, Timestamp: e.CreatedAt},
			{Patches: []Event{}, Timestamp: time.Unix(0, nanos)},
			{},
		} {
			if snapshot {
				req.Snapshot = &Snapshot{Rev: 1, Hash: Hash{3}, State: e.Payload}
			}
			want, werr := json.Marshal(req)
			got, ok := req.appendJSON(nil)
			if !ok {
				continue // left to json.Marshal
			}
			if werr != nil {
				t.Fatalf("appendJSON encoded what json.Marshal refuses (%v): %s", werr, got)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("appendJSON wrote\n%s\njson.Marshal\n%s", got, want)
			}
		}
	})
}

func TestEncodeHeartbeatResponse(t *testing.T) {
	t.Parallel()
	for _, r := range []HeartbeatResponse{{}, {AckRev: 12, ConfigVersionLatest: 3}, {AckRev: -1, ConfigVersionLatest: 1 << 62}} {
		got, _ := r.appendJSON(nil)
		if want, _ := json.Marshal(r); !bytes.Equal(got, want) {
			t.Errorf("appendJSON wrote %s, json.Marshal %s", got, want)
		}
	}
}

func TestEncodeHeartbeatTakesCanonicalPayloads(t *testing.T) {
	t.Parallel()
	e := Event{Rev: 1, Type: EventModelOutput, Lane: "edge", Payload: json.RawMessage(`{"text":"a < b && c > d"}`), CreatedAt: time.Now()}
	if err := e.Seal(Genesis); err != nil {
		t.Fatal(err)
	}
	req := HeartbeatRequest{NewRev: 1, Patches: []Event{e}, HashNew: e.Hash, Timestamp: time.Now()}
	got, ok := req.appendJSON(nil)
	if !ok {
		t.Fatal("appendJSON left a canonical heartbeat to json.Marshal")
	}
	if want, _ := json.Marshal(req); !bytes.Equal(got, want) {
		t.Fatalf("appendJSON wrote\n%s\njson.Marshal\n%s", got, want)
	}
}

// BenchmarkEncodeHeartbeat compares the heartbeat encoder (the fast path
// of package fastpath's writers) with json.Marshal, on a heartbeat of
// about 1 KiB with one event.
func BenchmarkEncodeHeartbeat(b *testing.B) {
	e := Event{Rev: 1, Type: EventModelOutput, Lane: "edge", CreatedAt: time.Now(),
		Payload: json.RawMessage(`{"text":"` + strings.Repeat("word ", 150) + `","tokens":812}`)}
	if err := e.Seal(Genesis); err != nil {
		b.Fatal(err)
	}
	req := HeartbeatRequest{NewRev: 1, Patches: []Event{e}, HashNew: e.Hash, Timestamp: time.Now()}
	b.Run("Plain", func(b *testing.B) {
		for b.Loop() {
			if _, err := json.Marshal(req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Fast", func(b *testing.B) {
		for b.Loop() {
			if _, err := Encode(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
