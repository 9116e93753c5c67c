package commitlog_test

import (
	"encoding/json"
	"testing"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/rpc"
)

// BenchmarkAppend commits a typical tool call event: validation, the
// canonical JSON and SHA-256 of rpc.Event.Seal, the copy in and the copy
// returned.
func BenchmarkAppend(b *testing.B) {
	l, app, err := commitlog.New(0, rpc.Genesis, commitlog.WithRetain(0))
	if err != nil {
		b.Fatal(err)
	}
	payload, err := json.Marshal(commitlog.ToolCall{
		CallID: "call_8f14e45f", Tool: "choir.fs.write",
		Input: json.RawMessage(`{"path":"src/auth/session.go","op":"replace","start":120,"end":134,"text":"func (s *Session) Valid() bool {\n\treturn s.expires.After(time.Now())\n}\n"}`),
		Locks: []string{"file:src/auth/session.go:X"},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(payload)))
	for b.Loop() {
		e, err := app.Append(rpc.EventToolCallCommitted, "core:refactor-auth", payload)
		if err != nil {
			b.Fatal(err)
		}
		// Acknowledge as heartbeats would, so memory stays flat and the
		// trimming is part of the cost.
		if e.Rev%1024 == 0 {
			if err := l.Ack(e.Rev); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// BenchmarkUnacked builds a heartbeat patch of 100 events.
func BenchmarkUnacked(b *testing.B) {
	l, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		b.Fatal(err)
	}
	for range 100 {
		if _, err := app.AppendPayload("edge", commitlog.LLMCall{Model: "m", Lane: "edge", PromptTokens: 1000, CompletionTokens: 100, LatencyMS: 800}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if p := l.Unacked(); len(p.Events) != 100 {
			b.Fatal(len(p.Events))
		}
	}
}
