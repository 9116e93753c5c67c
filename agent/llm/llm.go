// Package llm is the agent's client for OpenAI-compatible chat completions
// with structured tool calling (spec sections 7.7, 8.2 and 21).
//
// The package speaks its own types at the boundary ([Request], [Message],
// [ToolSpec], [Response]) so that callers never import the provider library.
// Tool names are canonical and dotted inside Choir (choir.fs.read) and are
// sanitised on the way out and mapped back on the way in (see
// [SanitizeToolName]); a tool name the model invents is an error, never a
// guess. Tool calls come only from the structured tool_calls channel, never
// from text.
//
// Failures are typed so that a lane can act on them: [*RateLimitError] for a
// 429, [*ProviderError] for any other HTTP error, [ErrMalformedResponse] and
// [ErrContentFiltered] for an unusable answer, and the context's error for a
// timeout or cancellation. [RateLimitPolicy] implements the single
// notify-wait-retry of spec 7.7.
package llm

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/choirhq/choir/config"
)

// ModelSettings says which model to call and how. It is resolved per call so
// that a reloaded config takes effect on the next call.
type ModelSettings struct {
	// Name is the model's name in config.json, used in errors and logs.
	Name string
	// Model is the provider's model ID, sent as "model".
	Model string
	// Endpoint is the API base URL, the part before /chat/completions
	// (https://openrouter.ai/api/v1).
	Endpoint string
	// Temperature is sent when non-nil and omitted from the request when nil.
	Temperature *float64
	// ReasoningEffort is sent as-is when non-nil and non-empty, and omitted
	// otherwise.
	ReasoningEffort *string
	// APIKey is sent as a bearer token when non-empty.
	APIKey string
	// Gateway says Endpoint is choird's service route for the model
	// (daemon/egress/svc), which adds the key and meters the call: the
	// call then carries its spend key, lane and job in Choir-* headers,
	// which the gateway takes off before the provider sees the call.
	Gateway bool
	// ContextWindow is the model's context window in tokens, never sent:
	// a lane's working memory keeps its prompts within it (spec 11.3).
	// Zero means config.DefaultContextWindow.
	ContextWindow int64
	// Prices price a call whose provider reports no cost; nil leaves it
	// unpriced.
	Prices *config.Prices
}

// String describes the settings with the API key redacted, so that a
// logged or printed Request never shows it.
func (m ModelSettings) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "{Name:%s Model:%s Endpoint:%s", m.Name, m.Model, m.Endpoint)
	if m.Temperature != nil {
		fmt.Fprintf(&b, " Temperature:%g", *m.Temperature)
	}
	if m.ReasoningEffort != nil {
		fmt.Fprintf(&b, " ReasoningEffort:%s", *m.ReasoningEffort)
	}
	if m.APIKey != "" {
		b.WriteString(" APIKey:[redacted]")
	}
	b.WriteString("}")
	return b.String()
}

// GoString is String, for %#v.
func (m ModelSettings) GoString() string { return "llm.ModelSettings" + m.String() }

// LogValue logs the settings without the API key.
func (m ModelSettings) LogValue() slog.Value {
	return slog.GroupValue(slog.String("name", m.Name), slog.String("model", m.Model), slog.String("endpoint", m.Endpoint))
}

// ModelSettingsFromConfig builds the settings of the model named name in
// config.json; apiKey is the value of its secret, empty when it has none.
func ModelSettingsFromConfig(name string, m config.Model, apiKey string) ModelSettings {
	return ModelSettings{
		Name:            name,
		Model:           m.Model,
		Endpoint:        m.Endpoint,
		Temperature:     m.Temperature,
		ReasoningEffort: m.ReasoningEffort,
		APIKey:          apiKey,
		ContextWindow:   m.ContextWindowTokens(),
		Prices:          m.Prices,
	}
}

// Role is the author of a [Message].
type Role string

// The roles of chat completions.
const (
	RoleSystem    Role = "system"
	RoleUser      Role = "user"
	RoleAssistant Role = "assistant"
	RoleTool      Role = "tool"
)

// Message is one entry of the conversation sent to the model.
type Message struct {
	Role Role
	// Content is the text. An assistant message that only calls tools may
	// leave it empty.
	Content string
	// ToolCalls are the calls an assistant message made, with canonical
	// names, replayed so that the tool results that follow make sense.
	ToolCalls []ToolCall
	// ToolCallID is required for RoleTool: the ID of the call answered.
	ToolCallID string
}

// SystemMessage returns a system message.
func SystemMessage(content string) Message { return Message{Role: RoleSystem, Content: content} }

// UserMessage returns a user message.
func UserMessage(content string) Message { return Message{Role: RoleUser, Content: content} }

// AssistantMessage returns an assistant message with optional tool calls.
func AssistantMessage(content string, calls ...ToolCall) Message {
	return Message{Role: RoleAssistant, Content: content, ToolCalls: calls}
}

// ToolResultMessage returns the result of the tool call with ID callID.
func ToolResultMessage(callID, content string) Message {
	return Message{Role: RoleTool, Content: content, ToolCallID: callID}
}

// ToolSpec is the LLM view of a tool (spec 8.3): only this reaches a model.
type ToolSpec struct {
	// Name is canonical (choir.fs.read).
	Name        string
	Description string
	// Parameters is a JSON Schema object; empty means no parameters.
	Parameters json.RawMessage
}

// ToolCall is a structured tool call made by the model.
type ToolCall struct {
	ID string
	// Name is canonical: one of the request's tool names.
	Name string
	// Arguments is valid JSON as the model sent it.
	Arguments json.RawMessage
}

// Request is one chat completion call.
type Request struct {
	Model    ModelSettings
	Messages []Message
	Tools    []ToolSpec
	// MaxTokens bounds the completion, sent as max_tokens; zero omits it.
	MaxTokens int64
	// Lane and JobID say whose call it is (edge, system, core:<job>, and
	// the core job's ID), for a [Gate]'s accounting; sent only to the
	// gateway (ModelSettings.Gateway).
	Lane  string
	JobID string
	// SpendKey names the call in the gateway's spend ledger and in the
	// log's record of it (llm_call_committed's spend_key), so that the
	// usage views count the call once. [Client.Complete] makes one when
	// it is empty; the [Response] carries it.
	SpendKey string
}

// Usage is the token count the provider reported; zero when it reported
// none. CachedTokens are the prompt tokens served from the provider's
// cache (part of PromptTokens).
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	CachedTokens     int64
	// CostUSD is the call's cost: the provider's usage.cost when it
	// reported one (CostSource "provider"), else computed from the model's
	// prices ("prices"), else zero (CostSource empty).
	CostUSD    float64
	CostSource string
}

// Tokens is prompt plus completion tokens.
func (u Usage) Tokens() int64 { return u.PromptTokens + u.CompletionTokens }

// Gate is consulted by [Client.Complete] before every call and told what
// the call used after it: a usage meter that enforces caps. Reserve may
// lower req.MaxTokens so that the call cannot cost more than it reserved;
// an error refuses the call, which is then not made. settle is called
// once, with the response; when the call failed, with nil, or with a
// Response holding only the Usage the provider's answer reported (it
// billed the call: an error with usage, a completion that does not decode,
// a body that broke off after its usage).
type Gate interface {
	Reserve(ctx context.Context, req *Request) (settle func(*Response), err error)
}

// Response is a successful chat completion: text, tool calls or both.
type Response struct {
	Content string
	// Refusal is the model's refusal message, when it refused.
	Refusal   string
	ToolCalls []ToolCall
	// FinishReason is as the provider sent it: stop, tool_calls, length, ...
	FinishReason string
	Usage        Usage
	// BilledFailure marks the Response a Gate's settle gets for a call
	// that failed after the provider billed it: it holds only Usage.
	BilledFailure bool
	// Latency is the wall time of the HTTP call, body included.
	Latency time.Duration
	// SpendKey is the call's Request.SpendKey.
	SpendKey string
	// Model is the model that answered, as the provider reported it (a
	// routing provider may name a more specific model than was asked for).
	Model string
}
