package llm

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/choirhq/choir/rpc/egress"
)

// maxResponseBytes bounds the body read from a provider; a chat completion
// is a few kilobytes, so anything near this is not one.
const maxResponseBytes = 16 << 20

// maxErrorMessage bounds the provider text kept in a [*ProviderError].
const maxErrorMessage = 512

// Client calls OpenAI-compatible chat completions endpoints. The zero value
// is ready to use; a Client is safe for concurrent use. The model, endpoint
// and key come with each [Request], so a reloaded config applies to the
// next call.
//
// Requests go through openai-go with its retries switched off (the rate-limit
// retry of spec 7.7 is [RateLimitPolicy]'s job, and nothing else is retried)
// and without its OPENAI_* environment defaults: only what the request names
// is sent. The response body is decoded here, strictly, because the
// library's decoder accepts wrongly typed fields as zero values.
type Client struct {
	// HTTPClient sends the requests; nil uses a client of the Client's own
	// whose transport gives up on a provider that has not begun to answer
	// within ResponseHeaderTimeout. Bound each call with its context too.
	HTTPClient *http.Client
	// ResponseHeaderTimeout bounds the wait for a response's headers when
	// HTTPClient is nil (default DefaultResponseHeaderTimeout). Answers are
	// not streamed, so the headers come only once the whole answer is
	// ready: the bound is generous, and exists so that a provider that
	// accepted the request and hung cannot hold a lane forever.
	ResponseHeaderTimeout time.Duration
	// Gate, when set, reserves each call's largest cost before it is made
	// and may refuse it (usage caps).
	Gate Gate

	once sync.Once
	own  *http.Client
}

// DefaultResponseHeaderTimeout is how long a Client waits for a provider's
// response headers by default: a non-streamed answer from a reasoning model
// can take minutes, but not this long.
const DefaultResponseHeaderTimeout = 10 * time.Minute

func (c *Client) httpClient() *http.Client {
	if c.HTTPClient != nil {
		return c.HTTPClient
	}
	c.once.Do(func() {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.ResponseHeaderTimeout = c.ResponseHeaderTimeout
		if tr.ResponseHeaderTimeout <= 0 {
			tr.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
		}
		c.own = &http.Client{Transport: tr}
	})
	return c.own
}

// CloseIdleConnections closes the idle connections of the Client's own
// transport (not of HTTPClient's).
func (c *Client) CloseIdleConnections() {
	if c.HTTPClient == nil {
		c.httpClient().CloseIdleConnections()
	}
}

// Complete makes one chat completion call. It does not retry. Errors are
// a [*RateLimitError], a [*ProviderError], [ErrMalformedResponse],
// [ErrContentFiltered], [ErrInvalidRequest], the context's error, or a
// transport error, each wrapped with the model's name.
func (c *Client) Complete(ctx context.Context, req Request) (*Response, error) {
	label := req.Model.Name
	if label == "" {
		label = req.Model.Model
	}
	if req.SpendKey == "" {
		req.SpendKey = egress.NewSpendKey()
	}
	if c.Gate == nil {
		res, _, err := c.complete(ctx, label, req)
		return res, err
	}
	settle, err := c.Gate.Reserve(ctx, &req)
	if err != nil {
		return nil, fmt.Errorf("call model %s: %w", label, err)
	}
	res, billed, err := c.complete(ctx, label, req)
	if err != nil {
		// A call the provider billed although it failed (its answer
		// reported usage) is settled with what it reported.
		var spent *Response
		if billed != nil {
			spent = &Response{Usage: *billed, BilledFailure: true}
		}
		settle(spent)
		return nil, err
	}
	settle(res)
	return res, nil
}

// complete makes the call. When it fails after the provider answered,
// billed is the usage its answer reported, if any (billedUsage).
func (c *Client) complete(ctx context.Context, label string, req Request) (res *Response, billed *Usage, err error) {
	params, tools, err := buildParams(req)
	if err != nil {
		return nil, nil, fmt.Errorf("call model %s: %w", label, err)
	}

	// The body is taken as an *http.Response so that it is read and decoded
	// here, and so that the status and headers of an error response are
	// available whatever its body holds.
	var httpRes *http.Response
	opts := []option.RequestOption{
		option.WithBaseURL(req.Model.Endpoint),
		option.WithHTTPClient(c.httpClient()),
		option.WithMaxRetries(0),
		option.WithResponseBodyInto(&httpRes),
	}
	if req.Model.APIKey != "" {
		opts = append(opts, option.WithAPIKey(req.Model.APIKey))
	}
	if req.Model.Gateway {
		opts = append(opts, option.WithHeader(egress.HeaderSpendKey, req.SpendKey))
		if req.Lane != "" {
			opts = append(opts, option.WithHeader(egress.HeaderLane, req.Lane))
		}
		if req.JobID != "" {
			opts = append(opts, option.WithHeader(egress.HeaderJob, req.JobID))
		}
	}
	// NewChatCompletionService, unlike openai.NewClient, reads no OPENAI_*
	// environment variables: no ambient key or base URL can leak in.
	svc := openai.NewChatCompletionService(opts...)

	start := time.Now()
	_, err = svc.New(ctx, params)
	if httpRes != nil && httpRes.Body != nil {
		defer httpRes.Body.Close()
	}
	if ctxErr := ctx.Err(); ctxErr != nil {
		return nil, nil, fmt.Errorf("call model %s: %w", label, ctxErr)
	}
	if httpRes == nil {
		if err == nil {
			err = errors.New("no response")
		}
		return nil, nil, fmt.Errorf("call model %s: %w", label, err)
	}
	if httpRes.StatusCode < 200 || httpRes.StatusCode > 299 {
		errBody, _ := io.ReadAll(io.LimitReader(httpRes.Body, 64<<10))
		return nil, billedUsage(errBody, req), fmt.Errorf("call model %s: %w", label, statusError(httpRes, errBody, time.Now()))
	}

	body, err := io.ReadAll(io.LimitReader(httpRes.Body, maxResponseBytes+1))
	if err != nil {
		// The answer broke off: what arrived may still report usage.
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, billedUsage(body, req), fmt.Errorf("call model %s: %w", label, ctxErr)
		}
		return nil, billedUsage(body, req), fmt.Errorf("call model %s: read response: %w", label, err)
	}
	latency := time.Since(start)
	if len(body) > maxResponseBytes {
		return nil, billedUsage(body, req), fmt.Errorf("call model %s: %w: body larger than %d bytes", label, ErrMalformedResponse, maxResponseBytes)
	}
	res, err = decodeResponse(body, tools)
	if err != nil {
		return nil, billedUsage(body, req), fmt.Errorf("call model %s: %w", label, err)
	}
	res.Latency, res.SpendKey = latency, req.SpendKey
	priced(&res.Usage, req)
	return res, nil, nil
}

// priced prices u at the model's prices when the provider reported no
// cost.
func priced(u *Usage, req Request) {
	if u.CostSource == "" && req.Model.Prices != nil {
		u.CostUSD, u.CostSource = req.Model.Prices.Cost(u.PromptTokens, u.CachedTokens, u.CompletionTokens), "prices"
	}
}

// billedUsage is the usage a failed call's answer reports, priced, or nil
// when it reports none: the provider billed the call although the client
// cannot use its answer (an error with usage, a completion that does not
// decode, a body that broke off after its usage object).
func billedUsage(body []byte, req Request) *Usage {
	var w struct {
		Usage *wireUsage `json:"usage"`
	}
	if json.Unmarshal(body, &w) != nil {
		// A cut or malformed body: decode the usage object alone, if one
		// arrived whole.
		for rest := body; w.Usage == nil; {
			i := bytes.Index(rest, []byte(`"usage"`))
			if i < 0 {
				return nil
			}
			rest = bytes.TrimLeft(rest[i+len(`"usage"`):], " \t\r\n")
			if len(rest) > 0 && rest[0] == ':' {
				json.NewDecoder(bytes.NewReader(rest[1:])).Decode(&w.Usage) //nolint:errcheck // nil when it does not decode
			}
		}
	}
	if w.Usage == nil || w.Usage.PromptTokens < 0 || w.Usage.CompletionTokens < 0 ||
		w.Usage.PromptTokens+w.Usage.CompletionTokens == 0 && (w.Usage.Cost == nil || *w.Usage.Cost <= 0) {
		return nil
	}
	u := Usage{PromptTokens: w.Usage.PromptTokens, CompletionTokens: w.Usage.CompletionTokens}
	if d := w.Usage.PromptTokensDetails; d != nil && d.CachedTokens >= 0 && d.CachedTokens <= u.PromptTokens {
		u.CachedTokens = d.CachedTokens
	}
	if c := w.Usage.Cost; c != nil && *c >= 0 {
		u.CostUSD, u.CostSource = *c, "provider"
	}
	priced(&u, req)
	return &u
}

// buildParams turns a Request into the library's parameters and returns the
// wire-to-canonical map of the tools offered.
func buildParams(req Request) (openai.ChatCompletionNewParams, map[string]string, error) {
	var p openai.ChatCompletionNewParams
	m := req.Model
	if m.Model == "" {
		return p, nil, fmt.Errorf("%w: no model ID", ErrInvalidRequest)
	}
	if u, err := url.Parse(m.Endpoint); m.Endpoint == "" || err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return p, nil, fmt.Errorf("%w: endpoint %q is not an http or https URL", ErrInvalidRequest, m.Endpoint)
	}
	if len(req.Messages) == 0 {
		return p, nil, fmt.Errorf("%w: no messages", ErrInvalidRequest)
	}
	p.Model = shared.ChatModel(m.Model)
	if m.Temperature != nil {
		p.Temperature = openai.Float(*m.Temperature)
	}
	if m.ReasoningEffort != nil && *m.ReasoningEffort != "" {
		p.ReasoningEffort = shared.ReasoningEffort(*m.ReasoningEffort)
	}
	if req.MaxTokens > 0 {
		p.MaxTokens = openai.Int(req.MaxTokens)
	}

	tools := make(map[string]string, len(req.Tools))
	for _, t := range req.Tools {
		wire, err := SanitizeToolName(t.Name)
		if err != nil {
			return p, nil, fmt.Errorf("%w: tool: %w", ErrInvalidRequest, err)
		}
		if _, dup := tools[wire]; dup {
			return p, nil, fmt.Errorf("%w: tool %s offered twice", ErrInvalidRequest, t.Name)
		}
		tools[wire] = t.Name
		params, err := schemaParams(t.Parameters)
		if err != nil {
			return p, nil, fmt.Errorf("%w: tool %s: %w", ErrInvalidRequest, t.Name, err)
		}
		def := shared.FunctionDefinitionParam{Name: wire, Parameters: params}
		if t.Description != "" {
			def.Description = openai.String(t.Description)
		}
		p.Tools = append(p.Tools, openai.ChatCompletionFunctionTool(def))
	}

	for i, msg := range req.Messages {
		u, err := messageParam(msg)
		if err != nil {
			return p, nil, fmt.Errorf("%w: message %d: %w", ErrInvalidRequest, i, err)
		}
		p.Messages = append(p.Messages, u)
	}
	return p, tools, nil
}

// schemaParams passes a tool's JSON Schema through byte for byte below the
// top level: the values stay json.RawMessage.
func schemaParams(raw json.RawMessage) (shared.FunctionParameters, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		// Some compatible servers reject a function without parameters.
		return shared.FunctionParameters{"type": "object", "properties": map[string]any{}}, nil
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil || top == nil {
		return nil, errors.New("parameters are not a JSON object")
	}
	params := make(shared.FunctionParameters, len(top))
	for k, v := range top {
		params[k] = v
	}
	return params, nil
}

func messageParam(msg Message) (openai.ChatCompletionMessageParamUnion, error) {
	var u openai.ChatCompletionMessageParamUnion
	if msg.Role != RoleAssistant && len(msg.ToolCalls) > 0 {
		return u, fmt.Errorf("%s message with tool calls", msg.Role)
	}
	if msg.Role != RoleTool && msg.ToolCallID != "" {
		return u, fmt.Errorf("%s message with a tool call ID", msg.Role)
	}
	switch msg.Role {
	case RoleSystem:
		return openai.SystemMessage(msg.Content), nil
	case RoleUser:
		return openai.UserMessage(msg.Content), nil
	case RoleTool:
		if msg.ToolCallID == "" {
			return u, errors.New("tool result without a tool call ID")
		}
		return openai.ToolMessage(msg.Content, msg.ToolCallID), nil
	case RoleAssistant:
		var a openai.ChatCompletionAssistantMessageParam
		if msg.Content != "" || len(msg.ToolCalls) == 0 {
			a.Content.OfString = openai.String(msg.Content)
		}
		for j, call := range msg.ToolCalls {
			if call.ID == "" {
				return u, fmt.Errorf("tool call %d without an ID", j)
			}
			// Past calls are sanitised by the pure mapping, not looked up
			// among this request's tools: a tool offered earlier may no
			// longer be offered, and its call still has to be replayed.
			wire, err := SanitizeToolName(call.Name)
			if err != nil {
				return u, fmt.Errorf("tool call %d: %w", j, err)
			}
			args := string(call.Arguments)
			if strings.TrimSpace(args) == "" {
				args = "{}"
			} else if !json.Valid(call.Arguments) {
				return u, fmt.Errorf("tool call %d: arguments are not valid JSON", j)
			}
			a.ToolCalls = append(a.ToolCalls, openai.ChatCompletionMessageToolCallUnionParam{
				OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{
					ID:       call.ID,
					Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: wire, Arguments: args},
				},
			})
		}
		return openai.ChatCompletionMessageParamUnion{OfAssistant: &a}, nil
	default:
		return u, fmt.Errorf("unknown role %q", msg.Role)
	}
}

// The response as OpenAI-compatible servers send it. Pointers tell an absent
// or null field from an empty one; wrongly typed fields fail the decode.
type (
	wireCompletion struct {
		Model   string       `json:"model"`
		Choices []wireChoice `json:"choices"`
		Usage   *wireUsage   `json:"usage"`
		Error   *wireError   `json:"error"`
	}
	wireChoice struct {
		Message      *wireMessage `json:"message"`
		FinishReason *string      `json:"finish_reason"`
	}
	wireMessage struct {
		Content   *string        `json:"content"`
		Refusal   *string        `json:"refusal"`
		ToolCalls []wireToolCall `json:"tool_calls"`
	}
	wireToolCall struct {
		ID       string        `json:"id"`
		Type     string        `json:"type"`
		Function *wireFunction `json:"function"`
	}
	wireFunction struct {
		Name      string  `json:"name"`
		Arguments *string `json:"arguments"`
	}
	wireUsage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		// Cost is OpenRouter's usage accounting: the call's cost in
		// credits (US dollars).
		Cost *float64 `json:"cost"`
	}
	wireError struct {
		Message string          `json:"message"`
		Code    json.RawMessage `json:"code"`
	}
	wireErrorBody struct {
		Error *wireError `json:"error"`
	}
)

func decodeResponse(body []byte, tools map[string]string) (*Response, error) {
	malformed := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrMalformedResponse, fmt.Sprintf(format, args...))
	}
	var w wireCompletion
	if err := json.Unmarshal(body, &w); err != nil {
		return nil, malformed("decode: %v", err)
	}
	// Some routing providers answer 200 with an error object instead of a
	// completion.
	if w.Error != nil && len(w.Choices) == 0 {
		status := http.StatusOK
		if code, err := strconv.Atoi(strings.Trim(string(w.Error.Code), `"`)); err == nil && code >= 400 && code <= 599 {
			status = code
		}
		if status == http.StatusTooManyRequests {
			return nil, &RateLimitError{Message: truncate(w.Error.Message)}
		}
		return nil, &ProviderError{Status: status, Message: truncate(w.Error.Message)}
	}
	if len(w.Choices) == 0 {
		return nil, malformed("no choices")
	}
	choice := w.Choices[0]
	if choice.Message == nil {
		return nil, malformed("choice without a message")
	}
	res := &Response{Model: w.Model}
	if choice.FinishReason != nil {
		res.FinishReason = *choice.FinishReason
	}
	if w.Usage != nil {
		res.Usage = Usage{PromptTokens: w.Usage.PromptTokens, CompletionTokens: w.Usage.CompletionTokens}
		if d := w.Usage.PromptTokensDetails; d != nil {
			res.Usage.CachedTokens = d.CachedTokens
		}
		if c := w.Usage.Cost; c != nil && *c >= 0 {
			res.Usage.CostUSD, res.Usage.CostSource = *c, "provider"
		}
	}
	msg := choice.Message
	if msg.Content != nil {
		res.Content = *msg.Content
	}
	if msg.Refusal != nil {
		res.Refusal = *msg.Refusal
	}
	seen := make(map[string]bool, len(msg.ToolCalls))
	for i, tc := range msg.ToolCalls {
		if tc.Type != "" && tc.Type != "function" {
			return nil, malformed("tool call %d has type %q", i, tc.Type)
		}
		if tc.ID == "" {
			return nil, malformed("tool call %d has no ID", i)
		}
		if seen[tc.ID] {
			return nil, malformed("tool call ID %q repeated", tc.ID)
		}
		seen[tc.ID] = true
		if tc.Function == nil || tc.Function.Name == "" {
			return nil, malformed("tool call %d names no function", i)
		}
		name, ok := tools[tc.Function.Name]
		if !ok {
			// A call of a tool that was not offered still names a
			// canonical tool exactly (the mapping is reversible): it goes
			// on, so the arbiter can refuse it and tell the model what is
			// allowed. A name that maps to no canonical name is malformed.
			canonical, err := CanonicalToolName(tc.Function.Name)
			if err != nil {
				return nil, malformed("tool call %d names %q, which was not offered and is not a tool name", i, truncate(tc.Function.Name))
			}
			name = canonical
		}
		args := json.RawMessage("{}")
		if tc.Function.Arguments != nil && strings.TrimSpace(*tc.Function.Arguments) != "" {
			if !json.Valid([]byte(*tc.Function.Arguments)) {
				return nil, malformed("tool call %d (%s) has arguments that are not valid JSON", i, name)
			}
			args = json.RawMessage(*tc.Function.Arguments)
		}
		res.ToolCalls = append(res.ToolCalls, ToolCall{ID: tc.ID, Name: name, Arguments: args})
	}
	if len(res.ToolCalls) == 0 && strings.TrimSpace(res.Content) == "" && strings.TrimSpace(res.Refusal) == "" {
		if res.FinishReason == "content_filter" {
			return nil, ErrContentFiltered
		}
		return nil, malformed("empty message without tool calls (finish_reason %q)", res.FinishReason)
	}
	return res, nil
}

// statusError builds the error for a non-2xx response.
func statusError(res *http.Response, body []byte, now time.Time) error {
	msg := ""
	var eb wireErrorBody
	if json.Unmarshal(body, &eb) == nil && eb.Error != nil {
		msg = eb.Error.Message
	} else {
		msg = strings.TrimSpace(string(body))
	}
	msg = truncate(msg)
	if res.StatusCode == http.StatusTooManyRequests {
		return &RateLimitError{RetryAfter: parseRetryAfter(res.Header, now), Message: msg}
	}
	return &ProviderError{Status: res.StatusCode, Message: msg}
}

// truncate shortens provider text kept in errors, on a rune boundary.
func truncate(s string) string {
	if len(s) <= maxErrorMessage {
		return s
	}
	cut := maxErrorMessage
	for cut > 0 && !isRuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
