package llmtest

import (
	"net/http"
	"testing"
	"time"
)

type replyKind int

const (
	replyCompletion replyKind = iota
	replyRaw
	replyRateLimit
	replyError
	replyHang
)

// Step is one scripted exchange: optional checks on the request received,
// then one reply. Build it with [Text], [ToolCalls], [Malformed], [Raw],
// [RateLimited], [ServerError] or [Hang], and refine it with its methods;
// each method returns a modified copy.
type Step struct {
	kind   replyKind
	checks []func(testing.TB, *Request)
	delay  time.Duration

	// completion
	content      string
	calls        []Call
	finishReason string
	usage        *Usage
	cost         *float64
	cached       int64
	model        string

	// raw, rate limit, error
	status     int
	header     http.Header
	body       string
	retryAfter string
}

// Call is a tool call in a scripted reply.
type Call struct {
	// ID defaults to call_<step>_<index>, both counted from 1.
	ID string
	// Name is the tool called. A name containing a dot is canonical and goes
	// out sanitised (choir.fs.read as choir__fs__read); any other name is
	// sent as given, which is how a test makes the model name a tool that was
	// never offered. Set Verbatim to send a dotted name as is.
	Name     string
	Verbatim bool
	// Arguments is sent verbatim as the JSON string the API carries; empty
	// sends {}. Invalid JSON is allowed, to test the client.
	Arguments string
}

// Usage is the token count reported in a reply.
type Usage struct {
	PromptTokens     int64
	CompletionTokens int64
	// CachedTokens are reported as prompt_tokens_details.cached_tokens.
	CachedTokens int64
	// CostUSD is reported as usage.cost (OpenRouter's usage accounting)
	// when the step set one with [Step.WithCost]; the server's total
	// sums them.
	CostUSD float64
}

// Text replies with an assistant message holding content and no tool calls
// (finish_reason stop).
func Text(content string) Step {
	return Step{kind: replyCompletion, content: content}
}

// ToolCalls replies with an assistant message making calls (finish_reason
// tool_calls, content null unless set with [Step.WithText]).
func ToolCalls(calls ...Call) Step {
	return Step{kind: replyCompletion, calls: calls}
}

// Malformed replies 200 with body verbatim as application/json, whatever it
// holds.
func Malformed(body string) Step {
	return Raw(http.StatusOK, nil, body)
}

// Raw replies with status, header and body verbatim. Content-Type is
// application/json unless header sets it.
func Raw(status int, header http.Header, body string) Step {
	return Step{kind: replyRaw, status: status, header: header.Clone(), body: body}
}

// RateLimited replies 429 with an OpenAI-style error body and, when
// retryAfter is not empty, a Retry-After header with that value (seconds or
// an HTTP date).
func RateLimited(retryAfter string) Step {
	return Step{kind: replyRateLimit, status: http.StatusTooManyRequests, retryAfter: retryAfter}
}

// ServerError replies status (a 4xx or 5xx) with an OpenAI-style error body
// whose message is message, or the status text when empty.
func ServerError(status int, message string) Step {
	return Step{kind: replyError, status: status, body: message}
}

// Hang never replies: the request is held until the client gives up (its
// context ends) or the server closes. Use it to test timeouts.
func Hang() Step {
	return Step{kind: replyHang}
}

// Expect adds a check run on the request before the reply. Checks run on the
// server's goroutine: t.Error works as usual, and t.Fatal (or FailNow)
// fails the test, stops the step's remaining checks and answers 500.
func (s Step) Expect(check func(t testing.TB, r *Request)) Step {
	s.checks = append(append([]func(testing.TB, *Request){}, s.checks...), check)
	return s
}

// After delays the reply by d (cut short if the client goes away).
func (s Step) After(d time.Duration) Step {
	s.delay = d
	return s
}

// WithText sets the content of a [ToolCalls] reply.
func (s Step) WithText(content string) Step {
	s.content = content
	return s
}

// WithUsage sets the usage reported. Without it, a completion reports an
// estimate of about four bytes per token: the request's messages and tools
// for the prompt, the reply's content and calls for the completion, at least
// 1 each.
func (s Step) WithUsage(prompt, completion int64) Step {
	s.usage = &Usage{PromptTokens: prompt, CompletionTokens: completion}
	return s
}

// WithCost reports usage.cost, in US dollars, as OpenRouter does, and
// cached prompt tokens.
func (s Step) WithCost(usd float64, cached int64) Step {
	s.cost, s.cached = &usd, cached
	return s
}

// WithModel sets the model reported; by default the request's model is
// echoed.
func (s Step) WithModel(model string) Step {
	s.model = model
	return s
}

// WithFinishReason overrides the finish_reason (stop or tool_calls by
// default), for example to content_filter or length.
func (s Step) WithFinishReason(reason string) Step {
	s.finishReason = reason
	return s
}
