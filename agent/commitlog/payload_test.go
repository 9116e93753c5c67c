package commitlog_test

import (
	"encoding/json"
	"errors"
	"maps"
	"slices"
	"testing"

	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/rpc"
)

// TestPayloadKeys pins the JSON keys that the choir_audit views read from
// session_events.payload (sql/00005_audit.sql).
func TestPayloadKeys(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		p        commitlog.Payload
		wantType rpc.EventType
		wantKeys []string
	}{
		{"LLMCall", commitlog.LLMCall{Model: "gpt-x", Lane: "edge", PromptTokens: 1200, CompletionTokens: 80, LatencyMS: 950},
			rpc.EventLLMCallCommitted, []string{"model", "lane", "prompt_tokens", "completion_tokens", "latency_ms"}},
		{"ToolRequest", commitlog.ToolRequest{CallID: "c1", Tool: "choir.fs.read", Input: json.RawMessage(`{"path":"a.go"}`)},
			rpc.EventToolCallRequested, []string{"call_id", "tool", "input"}},
		{"ToolCall", commitlog.ToolCall{CallID: "c1", Tool: "choir.fs.read", Input: json.RawMessage(`{"path":"a.go"}`), Locks: []string{"file:a.go:S"}},
			rpc.EventToolCallCommitted, []string{"call_id", "tool", "input", "locks"}},
		{"ToolResultSuccess", commitlog.ToolResult{CallID: "c1", Tool: "choir.fs.read", Status: commitlog.ToolSuccess, DurationMS: 3, Output: json.RawMessage(`{"content":"x"}`)},
			rpc.EventToolResultCommitted, []string{"call_id", "tool", "status", "duration_ms", "output"}},
		{"ToolResultError", commitlog.ToolResult{CallID: "c1", Tool: "choir.exec", Status: commitlog.ToolError, DurationMS: 30000, Error: "timeout after 30s"},
			rpc.EventToolResultCommitted, []string{"call_id", "tool", "status", "duration_ms", "error"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, app, err := commitlog.New(0, rpc.Genesis)
			if err != nil {
				t.Fatal(err)
			}
			e, err := app.AppendPayload("core:job", tc.p)
			if err != nil {
				t.Fatal(err)
			}
			if e.Type != tc.wantType {
				t.Fatalf("type = %s, want %s", e.Type, tc.wantType)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(e.Payload, &m); err != nil {
				t.Fatal(err)
			}
			if got := slices.Sorted(maps.Keys(m)); !slices.Equal(got, slices.Sorted(slices.Values(tc.wantKeys))) {
				t.Fatalf("payload keys = %q, want %q (payload %s)", got, tc.wantKeys, e.Payload)
			}
		})
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	t.Parallel()
	_, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	call := commitlog.ToolCall{CallID: "c7", Tool: "choir.fs.write", Input: json.RawMessage(`{"path":"a.go","append":"x"}`), Locks: []string{"file:a.go:X"}}
	e, err := app.AppendPayload("core:refactor-auth", call)
	if err != nil {
		t.Fatal(err)
	}
	got, err := commitlog.Decode[commitlog.ToolCall](e)
	if err != nil {
		t.Fatal(err)
	}
	if got.CallID != call.CallID || got.Tool != call.Tool || !slices.Equal(got.Locks, call.Locks) || string(got.Input) != string(call.Input) {
		t.Fatalf("decoded %+v, want %+v", got, call)
	}
	if _, err := commitlog.Decode[commitlog.ToolResult](e); err == nil {
		t.Fatal("decoded a tool call as a tool result")
	}

	t.Run("MissingInputAndLocksAreEmptyNotNull", func(t *testing.T) {
		t.Parallel()
		for _, p := range []commitlog.Payload{
			commitlog.ToolCall{CallID: "c1", Tool: "choir.web.search"},
			commitlog.ToolRequest{CallID: "c1", Tool: "choir.web.search"},
		} {
			b, err := json.Marshal(p)
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			if string(m["input"]) != "{}" {
				t.Errorf("%T input = %s, want {}", p, m["input"])
			}
			if l, ok := m["locks"]; ok && string(l) != "[]" {
				t.Errorf("%T locks = %s, want []", p, l)
			}
		}
	})
}

func TestPayloadValidation(t *testing.T) {
	t.Parallel()
	_, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	for name, p := range map[string]commitlog.Payload{
		"LLMCallWithoutModel":        commitlog.LLMCall{Lane: "edge"},
		"LLMCallWithBadLane":         commitlog.LLMCall{Model: "m", Lane: "core"},
		"LLMCallWithNegativeTokens":  commitlog.LLMCall{Model: "m", Lane: "edge", PromptTokens: -1},
		"ToolCallWithoutCallID":      commitlog.ToolCall{Tool: "choir.exec"},
		"ToolCallWithoutTool":        commitlog.ToolCall{CallID: "c1"},
		"ToolCallWithEmptyLock":      commitlog.ToolCall{CallID: "c1", Tool: "choir.exec", Locks: []string{""}},
		"ToolRequestWithoutTool":     commitlog.ToolRequest{CallID: "c1"},
		"ToolResultWithBadStatus":    commitlog.ToolResult{CallID: "c1", Tool: "t", Status: "ok"},
		"ToolResultErrorWithoutText": commitlog.ToolResult{CallID: "c1", Tool: "t", Status: commitlog.ToolError},
		"ToolResultSuccessWithError": commitlog.ToolResult{CallID: "c1", Tool: "t", Status: commitlog.ToolSuccess, Error: "x"},
		"ToolResultNegativeDuration": commitlog.ToolResult{CallID: "c1", Tool: "t", Status: commitlog.ToolSuccess, DurationMS: -1},
		"ToolResultWithBrokenOutput": commitlog.ToolResult{CallID: "c1", Tool: "t", Status: commitlog.ToolSuccess, Output: json.RawMessage(`{`)},
	} {
		_, err := app.AppendPayload("edge", p)
		if err == nil {
			t.Errorf("%s: appended", name)
		}
		if name != "ToolResultWithBrokenOutput" && !errors.Is(err, commitlog.ErrInvalidEvent) {
			t.Errorf("%s: %v, want ErrInvalidEvent", name, err)
		}
	}
	if rev, _ := app.Log().Head(); rev != 0 {
		t.Fatalf("head moved to %d", rev)
	}
}
