package workmem

import (
	"encoding/json"
	"strings"

	"github.com/choirhq/choir/agent/llm"
)

// The estimator. Working memory measures a prompt in tokens estimated as
// one token per four bytes of its JSON encoding as chat completion
// messages (role, content, tool calls and tool call ID; a tool as
// {"type":"function","function":{...}}), rounded up. It is the estimate
// llmtest reports as prompt_tokens, it needs no tokenizer for whatever
// model a provider serves, and for English text and JSON it errs on the
// high side of real tokenizers (about 4 characters per token, and the
// encoding's quotes and keys count too), which is the safe side for a
// budget. The provider's reported prompt_tokens are not used: they come
// after the call, and only for the whole prompt, while compaction must
// know what each event costs before it decides what to fold.

// tokensOf converts bytes to estimated tokens.
func tokensOf(bytes int64) int64 { return (bytes + 3) / 4 }

// EstimateText estimates the tokens of a text sent as one message's
// content.
func EstimateText(s string) int64 {
	if s == "" {
		return 0
	}
	return tokensOf(messageBytes(llm.SystemMessage(s)))
}

// EstimateTokens estimates the tokens msgs take of a prompt.
func EstimateTokens(msgs ...llm.Message) int64 {
	var n int64
	for _, m := range msgs {
		n += messageBytes(m)
	}
	return tokensOf(n)
}

// EstimateTools estimates the tokens the tools parameter takes. A tool's
// parameters schema counts as written, whitespace included: that is how
// it goes out. A dotted name goes out with each dot as two underscores.
func EstimateTools(tools []llm.ToolSpec) int64 {
	type fn struct {
		Name        string `json:"name"`
		Description string `json:"description"`
	}
	type wire struct {
		Type     string `json:"type"`
		Function fn     `json:"function"`
	}
	var n int64
	for _, t := range tools {
		b, _ := json.Marshal(wire{Type: "function", Function: fn{Name: t.Name, Description: t.Description}})
		n += int64(len(b)+strings.Count(t.Name, ".")) + 1
		if len(t.Parameters) > 0 {
			n += int64(len(`,"parameters":`) + len(t.Parameters))
		}
	}
	return tokensOf(n)
}

// messageBytes is the length of m's JSON encoding, plus its separator.
func messageBytes(m llm.Message) int64 {
	type call struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	type wire struct {
		Role       llm.Role `json:"role"`
		Content    string   `json:"content"`
		ToolCalls  []call   `json:"tool_calls,omitempty"`
		ToolCallID string   `json:"tool_call_id,omitempty"`
	}
	w := wire{Role: m.Role, Content: m.Content, ToolCallID: m.ToolCallID}
	for _, c := range m.ToolCalls {
		var wc call
		wc.ID, wc.Type, wc.Function.Name, wc.Function.Arguments = c.ID, "function", c.Name, string(c.Arguments)
		w.ToolCalls = append(w.ToolCalls, wc)
	}
	b, _ := json.Marshal(w)
	return int64(len(b)) + 1
}
