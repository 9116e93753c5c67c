package llmtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/choirhq/choir/agent/llm"
)

// Request is a chat completion request as the server received it.
type Request struct {
	// Index counts requests from 1.
	Index  int
	Header http.Header
	// APIKey is the bearer token sent, if any.
	APIKey string
	// Body is the raw JSON body.
	Body []byte
	// Fields holds the body's top-level fields, to tell an absent field
	// from a null or zero one.
	Fields map[string]json.RawMessage

	Model           string
	Messages        []Message
	Tools           []Tool
	Temperature     *float64
	ReasoningEffort *string
	MaxTokens       *int64
}

// Message is one message of a request.
type Message struct {
	Role string
	// Content is the text: the string sent, or the text parts joined; empty
	// when null or absent.
	Content    string
	ToolCalls  []ToolCall
	ToolCallID string
}

// ToolCall is a tool call replayed in an assistant message.
type ToolCall struct {
	ID   string
	Type string
	// Name is as sent; Canonical is its canonical form, empty when Name is
	// not the wire form of a canonical name.
	Name      string
	Canonical string
	Arguments string
}

// Tool is one entry of the request's tools.
type Tool struct {
	Type string
	// Name is as sent; Canonical is its canonical form, empty when Name is
	// not the wire form of a canonical name.
	Name        string
	Canonical   string
	Description string
	Parameters  json.RawMessage
	// Raw is the whole entry as sent.
	Raw json.RawMessage
}

// Has reports whether the body has the top-level field name, even if null.
func (r *Request) Has(field string) bool {
	_, ok := r.Fields[field]
	return ok
}

// ToolNames returns the canonical names of the tools offered, or the wire
// name for a tool that has no canonical form.
func (r *Request) ToolNames() []string {
	names := make([]string, 0, len(r.Tools))
	for _, t := range r.Tools {
		if t.Canonical != "" {
			names = append(names, t.Canonical)
		} else {
			names = append(names, t.Name)
		}
	}
	return names
}

// Tool returns the tool offered under a canonical or wire name.
func (r *Request) Tool(name string) (Tool, bool) {
	for _, t := range r.Tools {
		if t.Name == name || (t.Canonical != "" && t.Canonical == name) {
			return t, true
		}
	}
	return Tool{}, false
}

// System returns the content of the system messages, joined by newlines.
func (r *Request) System() string {
	var parts []string
	for _, m := range r.Messages {
		if m.Role == "system" {
			parts = append(parts, m.Content)
		}
	}
	return strings.Join(parts, "\n")
}

// Last returns the last message, or a zero Message when there is none.
func (r *Request) Last() Message {
	if len(r.Messages) == 0 {
		return Message{}
	}
	return r.Messages[len(r.Messages)-1]
}

// The request body on the wire.
type (
	wireRequest struct {
		Model           string          `json:"model"`
		Messages        []wireMessage   `json:"messages"`
		Tools           json.RawMessage `json:"tools"`
		Temperature     *float64        `json:"temperature"`
		ReasoningEffort *string         `json:"reasoning_effort"`
		MaxTokens       *int64          `json:"max_tokens"`
	}
	wireMessage struct {
		Role       string          `json:"role"`
		Content    json.RawMessage `json:"content"`
		ToolCalls  []wireToolCall  `json:"tool_calls"`
		ToolCallID string          `json:"tool_call_id"`
	}
	wireToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	wireTool struct {
		Type     string `json:"type"`
		Function struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
		} `json:"function"`
	}
	wirePart struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
)

func decodeRequest(index int, header http.Header, body []byte) (*Request, error) {
	r := &Request{Index: index, Header: header, Body: body}
	if auth, ok := strings.CutPrefix(header.Get("Authorization"), "Bearer "); ok {
		r.APIKey = auth
	}
	if err := json.Unmarshal(body, &r.Fields); err != nil {
		return r, fmt.Errorf("body is not a JSON object: %w", err)
	}
	var w wireRequest
	if err := json.Unmarshal(body, &w); err != nil {
		return r, fmt.Errorf("decode body: %w", err)
	}
	r.Model, r.Temperature, r.ReasoningEffort, r.MaxTokens = w.Model, w.Temperature, w.ReasoningEffort, w.MaxTokens
	for i, wm := range w.Messages {
		content, err := decodeContent(wm.Content)
		if err != nil {
			return r, fmt.Errorf("message %d: %w", i, err)
		}
		m := Message{Role: wm.Role, Content: content, ToolCallID: wm.ToolCallID}
		for _, tc := range wm.ToolCalls {
			canonical, _ := llm.CanonicalToolName(tc.Function.Name)
			m.ToolCalls = append(m.ToolCalls, ToolCall{
				ID: tc.ID, Type: tc.Type, Name: tc.Function.Name, Canonical: canonical, Arguments: tc.Function.Arguments,
			})
		}
		r.Messages = append(r.Messages, m)
	}
	if len(w.Tools) > 0 && !bytes.Equal(w.Tools, []byte("null")) {
		var raws []json.RawMessage
		if err := json.Unmarshal(w.Tools, &raws); err != nil {
			return r, fmt.Errorf("tools: %w", err)
		}
		for i, raw := range raws {
			var wt wireTool
			if err := json.Unmarshal(raw, &wt); err != nil {
				return r, fmt.Errorf("tool %d: %w", i, err)
			}
			canonical, _ := llm.CanonicalToolName(wt.Function.Name)
			r.Tools = append(r.Tools, Tool{
				Type: wt.Type, Name: wt.Function.Name, Canonical: canonical,
				Description: wt.Function.Description, Parameters: wt.Function.Parameters, Raw: raw,
			})
		}
	}
	return r, nil
}

func decodeContent(raw json.RawMessage) (string, error) {
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return "", nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		return s, nil
	}
	var parts []wirePart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", errors.New("content is neither a string nor an array of parts")
	}
	var texts []string
	for _, p := range parts {
		if p.Type == "text" {
			texts = append(texts, p.Text)
		}
	}
	return strings.Join(texts, "\n"), nil
}
