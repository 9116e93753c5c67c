// Package llmtest is a scripted OpenAI-compatible chat completions server
// for tests anywhere in the repository: it plays a conversation step by step
// over real HTTP and checks what the agent sent.
//
// A test lists the exchanges it expects:
//
//	srv := llmtest.NewServer(t,
//		llmtest.ToolCalls(llmtest.Call{Name: "choir.fs.read", Arguments: `{"path":"a.txt"}`}).
//			Expect(func(t testing.TB, r *llmtest.Request) { ... }),
//		llmtest.Text("done"),
//	)
//	model := srv.Model() // or point any OpenAI-compatible client at srv.BaseURL()
//
// The server answers POST <BaseURL>/chat/completions, where BaseURL is the
// server's URL plus /v1, as with https://api.openai.com/v1: configure it as
// a model's endpoint. Steps are consumed in arrival order; a request beyond
// the script fails the test and gets a 500, and at cleanup (or at
// [Server.Done]) a step never reached fails the test. A request with
// "stream": true gets a completion step's answer as OpenAI streams it
// (server-sent chat.completion.chunk events, each flushed, the usage last
// when stream_options.include_usage asks for it).
//
// Every request is also checked, whatever the script says, for what a real
// provider would refuse and for what must never reach a model: tool names
// outside ^[a-zA-Z0-9_-]{1,64}$, runtime metadata of the tool manifest
// (locks, exec_path, ...) anywhere in tools or at the top level of a tool
// result, tool schemas pasted into a system message, and tool results that
// do not answer the tool calls before them.
package llmtest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llm"
)

// CompletionsPath is the path the server answers with the script.
const CompletionsPath = "/v1/chat/completions"

// ModelsPath lists the server's one model (GET, as the OpenAI API's
// /v1/models does): choird asks it at start whether the endpoint answers.
const ModelsPath = "/v1/models"

// DefaultModel is the model ID of [Server.Model].
const DefaultModel = "llmtest-model"

// DefaultForbiddenKeys are the keys of a tool manifest's runtime view (spec
// 8.3) and output tags (spec 8.5) that must never reach a model. They are
// looked for as object keys anywhere in tools, parameter names included,
// and at the top level of JSON tool results.
var DefaultForbiddenKeys = []string{
	"locks", "exec_path", "secret_resources", "side_effect", "timeout_ms",
	"runtime", "prompt_mask", "exposure",
}

// DefaultSchemaMarkers are strings that betray a JSON Schema pasted into a
// system message: tool schemas belong in the tools parameter only.
var DefaultSchemaMarkers = []string{`"properties"`, `"input_schema"`, `"parameters"`}

var wireToolNameRE = regexp.MustCompile(`^[a-zA-Z0-9_-]{1,64}$`)

// Server is a scripted chat completions server. Its methods are safe for
// concurrent use.
type Server struct {
	t    testing.TB
	srv  *httptest.Server
	quit chan struct{}

	mu            sync.Mutex
	steps         []Step
	next          int
	requests      []*Request
	forbiddenKeys []string
	markers       []string
	usage         Usage
	doneChecked   bool
	responder     func(ctx context.Context, r *Request) Step
}

// SetResponder answers every request the script has no step left for with
// the step fn returns, and lets a client vanish mid-request. fn runs on the request's goroutine and may block
// until ctx, the request's context, ends (the client went away): that is
// how a test holds a model call in flight while it kills the caller. A
// test whose requests are not known in advance (an agent killed and
// resumed at random points) answers from the request itself this way.
func (s *Server) SetResponder(fn func(ctx context.Context, r *Request) Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.responder = fn
}

// NewServer starts a server that plays steps in order. It closes at the
// end of the test, after checking that every step was consumed.
func NewServer(t testing.TB, steps ...Step) *Server {
	t.Helper()
	s := &Server{
		t:             t,
		quit:          make(chan struct{}),
		steps:         slices.Clone(steps),
		forbiddenKeys: slices.Clone(DefaultForbiddenKeys),
		markers:       slices.Clone(DefaultSchemaMarkers),
	}
	s.srv = httptest.NewServer(http.HandlerFunc(s.serveHTTP))
	t.Cleanup(func() {
		close(s.quit)
		s.srv.Close()
		if !t.Failed() {
			s.Done()
		}
	})
	return s
}

// BaseURL is the endpoint to configure: the server's URL plus /v1.
func (s *Server) BaseURL() string { return s.srv.URL + "/v1" }

// Model returns model settings that point at the server, with no
// temperature, reasoning effort or API key.
func (s *Server) Model() llm.ModelSettings {
	return llm.ModelSettings{Name: "llmtest", Model: DefaultModel, Endpoint: s.BaseURL()}
}

// Add appends steps to the script.
func (s *Server) Add(steps ...Step) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.steps = append(s.steps, steps...)
}

// Requests returns the requests received so far, in arrival order,
// including those that failed a check.
func (s *Server) Requests() []*Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.requests)
}

// Usage returns the sum of the usage reported in completions served.
func (s *Server) Usage() Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.usage
}

// SetForbiddenKeys replaces [DefaultForbiddenKeys] for later requests, for
// a tool whose parameter is legitimately named like a runtime key.
func (s *Server) SetForbiddenKeys(keys ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forbiddenKeys = slices.Clone(keys)
}

// SetSchemaMarkers replaces [DefaultSchemaMarkers] for later requests.
func (s *Server) SetSchemaMarkers(markers ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.markers = slices.Clone(markers)
}

// Done fails the test if a step has not been consumed. Cleanup calls it
// too, unless the test has already failed; a second call reports nothing.
func (s *Server) Done() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.doneChecked {
		return
	}
	s.doneChecked = true
	if left := len(s.steps) - s.next; left > 0 {
		s.t.Errorf("llmtest: %d of %d steps never requested (next is step %d)", left, len(s.steps), s.next+1)
	}
}

func (s *Server) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == ModelsPath && r.Method == http.MethodGet {
		writeJSON(w, http.StatusOK, map[string]any{"object": "list", "data": []map[string]any{
			{"id": DefaultModel, "object": "model", "created": 0, "owned_by": "llmtest"}}})
		return
	}
	if r.URL.Path != CompletionsPath {
		s.t.Errorf("llmtest: request to %s %s; the endpoint to configure is %s", r.Method, r.URL.Path, s.BaseURL())
		writeError(w, http.StatusNotFound, "no such path")
		return
	}
	if r.Method != http.MethodPost {
		s.t.Errorf("llmtest: %s %s; chat completions take POST", r.Method, r.URL.Path)
		writeError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		s.mu.Lock()
		killing := s.responder != nil
		s.mu.Unlock()
		if killing {
			// A test with a responder kills its clients: one killed
			// while sending is no fault of the request.
			return
		}
		s.t.Errorf("llmtest: read request body: %v", err)
		writeError(w, http.StatusBadRequest, "unreadable body")
		return
	}

	s.mu.Lock()
	index := len(s.requests) + 1
	req, decodeErr := decodeRequest(index, r.Header.Clone(), body)
	s.requests = append(s.requests, req)
	var (
		step    Step
		stepNum int
		haveOne = s.next < len(s.steps)
	)
	if haveOne {
		step = s.steps[s.next]
		s.next++
		stepNum = s.next
	}
	forbidden, markers := s.forbiddenKeys, s.markers
	responder := s.responder
	s.mu.Unlock()

	if !haveOne && responder != nil && decodeErr == nil {
		step, stepNum, haveOne = responder(r.Context(), req), index, true
		if r.Context().Err() != nil {
			return
		}
	}
	if !haveOne {
		s.t.Errorf("llmtest: unexpected request %d: the script has no step left; last message: %s %q",
			index, req.Last().Role, clip(req.Last().Content))
		writeError(w, http.StatusInternalServerError, "llmtest: unexpected request")
		return
	}
	if decodeErr != nil {
		s.t.Errorf("llmtest: request %d: %v", index, decodeErr)
		writeError(w, http.StatusBadRequest, "invalid request body")
		return
	}
	for _, problem := range builtinProblems(r.Header, req, forbidden, markers) {
		s.t.Errorf("llmtest: request %d: %s", index, problem)
	}
	if !s.runChecks(step, req) {
		writeError(w, http.StatusInternalServerError, "llmtest: step check failed")
		return
	}
	if step.delay > 0 && !s.wait(r, step.delay) {
		return
	}
	s.reply(w, r, step, stepNum, req)
}

// runChecks runs the step's checks, turning FailNow into an abort of the
// step: FailNow may only stop the test's own goroutine.
func (s *Server) runChecks(step Step, req *Request) (ok bool) {
	defer func() {
		if v := recover(); v != nil {
			if _, abort := v.(stepAbort); !abort {
				panic(v)
			}
			ok = false
		}
	}()
	tb := checkTB{TB: s.t}
	for _, check := range step.checks {
		check(tb, req)
	}
	return true
}

// wait sleeps d, or returns false as soon as the client or the server goes.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.Context().Done():
	case <-s.quit:
	}
	return false
}

func (s *Server) reply(w http.ResponseWriter, r *http.Request, step Step, stepNum int, req *Request) {
	switch step.kind {
	case replyHang:
		select {
		case <-r.Context().Done():
		case <-s.quit:
		}
	case replyRaw:
		for k, vs := range step.header {
			w.Header()[k] = vs
		}
		if w.Header().Get("Content-Type") == "" {
			w.Header().Set("Content-Type", "application/json")
		}
		w.WriteHeader(step.status)
		io.WriteString(w, step.body)
	case replyRateLimit:
		if step.retryAfter != "" {
			w.Header().Set("Retry-After", step.retryAfter)
		}
		writeErrorTyped(w, http.StatusTooManyRequests, "Rate limit reached, please retry later.", "rate_limit_error", "rate_limit_exceeded")
	case replyError:
		msg := step.body
		if msg == "" {
			msg = http.StatusText(step.status)
		}
		writeError(w, step.status, msg)
	case replyCompletion:
		s.writeCompletion(w, step, stepNum, req)
	}
}

func (s *Server) writeCompletion(w http.ResponseWriter, step Step, stepNum int, req *Request) {
	type (
		function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		}
		toolCall struct {
			ID       string   `json:"id"`
			Type     string   `json:"type"`
			Function function `json:"function"`
		}
		message struct {
			Role      string     `json:"role"`
			Content   *string    `json:"content"`
			Refusal   *string    `json:"refusal"`
			ToolCalls []toolCall `json:"tool_calls,omitempty"`
		}
		choice struct {
			Index        int     `json:"index"`
			Message      message `json:"message"`
			FinishReason string  `json:"finish_reason"`
			Logprobs     *string `json:"logprobs"`
		}
		completion struct {
			ID      string    `json:"id"`
			Object  string    `json:"object"`
			Created int64     `json:"created"`
			Model   string    `json:"model"`
			Choices []choice  `json:"choices"`
			Usage   wireUsage `json:"usage"`
		}
	)

	msg := message{Role: "assistant"}
	completionBytes := len(step.content)
	for i, c := range step.calls {
		id := c.ID
		if id == "" {
			id = fmt.Sprintf("call_%d_%d", stepNum, i+1)
		}
		name := c.Name
		if strings.Contains(name, ".") && !c.Verbatim {
			wire, err := llm.SanitizeToolName(name)
			if err != nil {
				s.t.Errorf("llmtest: step %d: call %d: %v", stepNum, i+1, err)
			} else {
				name = wire
			}
		}
		args := c.Arguments
		if args == "" {
			args = "{}"
		}
		completionBytes += len(name) + len(args)
		msg.ToolCalls = append(msg.ToolCalls, toolCall{ID: id, Type: "function", Function: function{Name: name, Arguments: args}})
	}
	if step.content != "" || len(step.calls) == 0 {
		content := step.content
		msg.Content = &content
	}
	finish := step.finishReason
	if finish == "" {
		finish = "stop"
		if len(step.calls) > 0 {
			finish = "tool_calls"
		}
	}
	wu, cut := s.bill(req, step, completionBytes)
	if cut {
		finish = "length"
	}
	model := step.model
	if model == "" {
		model = req.Model
	}
	if req.Stream() {
		calls := make([]any, len(msg.ToolCalls))
		for i, c := range msg.ToolCalls {
			calls[i] = c
		}
		writeStream(w, fmt.Sprintf("chatcmpl-llmtest-%d", req.Index), model, msg.Content, calls, finish, wu, req.StreamUsage())
		return
	}

	writeJSON(w, http.StatusOK, completion{
		ID:      fmt.Sprintf("chatcmpl-llmtest-%d", req.Index),
		Object:  "chat.completion",
		Created: time.Now().Unix(),
		Model:   model,
		Choices: []choice{{Message: msg, FinishReason: finish}},
		Usage:   wu,
	})
}

// The usage of a completion as the wire has it (OpenRouter's cost too).
type (
	wireDetails struct {
		CachedTokens int64 `json:"cached_tokens"`
	}
	wireUsage struct {
		PromptTokens     int64        `json:"prompt_tokens"`
		CompletionTokens int64        `json:"completion_tokens"`
		TotalTokens      int64        `json:"total_tokens"`
		Details          *wireDetails `json:"prompt_tokens_details,omitempty"`
		Cost             *float64     `json:"cost,omitempty"`
	}
)

// bill works out and counts a completion's usage. Like a real provider,
// the server bills no more completion than max_tokens allows, and says
// the answer was cut.
func (s *Server) bill(req *Request, step Step, completionBytes int) (wireUsage, bool) {
	u := Usage{
		PromptTokens:     tokens(len(req.Fields["messages"]) + len(req.Fields["tools"])),
		CompletionTokens: tokens(completionBytes),
	}
	if step.usage != nil {
		u = *step.usage
	}
	var maxTokens int64
	cut := false
	if raw, ok := req.Fields["max_tokens"]; ok && json.Unmarshal(raw, &maxTokens) == nil && maxTokens > 0 &&
		u.CompletionTokens > maxTokens {
		u.CompletionTokens, cut = maxTokens, true
	}
	wu := wireUsage{PromptTokens: u.PromptTokens, CompletionTokens: u.CompletionTokens, TotalTokens: u.PromptTokens + u.CompletionTokens}
	if step.cost != nil {
		u.CostUSD, u.CachedTokens = *step.cost, step.cached
		wu.Cost, wu.Details = step.cost, &wireDetails{CachedTokens: step.cached}
	}
	s.mu.Lock()
	s.usage.PromptTokens += u.PromptTokens
	s.usage.CompletionTokens += u.CompletionTokens
	s.usage.CachedTokens += u.CachedTokens
	s.usage.CostUSD += u.CostUSD
	s.mu.Unlock()
	return wu, cut
}

// tokens estimates about four bytes per token, at least one.
func tokens(n int) int64 { return max(1, int64((n+3)/4)) }

// builtinProblems returns what is wrong with a request whatever the script.
func builtinProblems(h http.Header, req *Request, forbidden, markers []string) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }

	if mt, _, _ := mime.ParseMediaType(h.Get("Content-Type")); mt != "application/json" {
		add("Content-Type is %q, want application/json", h.Get("Content-Type"))
	}
	if req.Model == "" {
		add("no model")
	}
	if len(req.Messages) == 0 {
		add("no messages")
	}

	seen := map[string]bool{}
	for i, tool := range req.Tools {
		if tool.Type != "function" {
			add("tool %d has type %q, want function", i, tool.Type)
		}
		if !wireToolNameRE.MatchString(tool.Name) {
			add("tool %d name %q does not match %s", i, tool.Name, wireToolNameRE)
		}
		if seen[tool.Name] {
			add("tool %q offered twice", tool.Name)
		}
		seen[tool.Name] = true
		var v any
		if err := json.Unmarshal(tool.Raw, &v); err == nil {
			for _, path := range findKeys(v, forbidden, fmt.Sprintf("tools[%d]", i)) {
				add("runtime metadata leaked into tool %s: %s", tool.Name, path)
			}
		}
	}

	// Tool results must answer the calls of the assistant message before
	// them, all of them: real providers refuse anything else.
	pending := map[string]bool{}
	for i, m := range req.Messages {
		if m.Role != "tool" && len(pending) > 0 {
			add("message %d (%s) comes before results for tool calls %s", i, m.Role, strings.Join(slices.Sorted(maps.Keys(pending)), ", "))
			clear(pending)
		}
		switch m.Role {
		case "system":
			for _, marker := range markers {
				if strings.Contains(m.Content, marker) {
					add("system message %d contains %s: tool schemas belong in tools only", i, marker)
				}
			}
		case "assistant":
			for _, tc := range m.ToolCalls {
				if !wireToolNameRE.MatchString(tc.Name) {
					add("message %d replays a tool call named %q, which does not match %s", i, tc.Name, wireToolNameRE)
				}
				pending[tc.ID] = true
			}
		case "tool":
			if !pending[m.ToolCallID] {
				add("message %d is a tool result for %q, which no preceding assistant message called (or it was answered already)", i, m.ToolCallID)
			}
			delete(pending, m.ToolCallID)
			var obj map[string]json.RawMessage
			if json.Unmarshal([]byte(m.Content), &obj) == nil {
				for _, k := range forbidden {
					if _, ok := obj[k]; ok {
						add("runtime metadata leaked into tool result message %d: key %q", i, k)
					}
				}
			}
		case "user":
		default:
			add("message %d has role %q", i, m.Role)
		}
	}
	if len(pending) > 0 {
		add("conversation ends before results for tool calls %s", strings.Join(slices.Sorted(maps.Keys(pending)), ", "))
	}
	return problems
}

// findKeys returns the JSON paths of every object key in v that is one of
// keys.
// findKeys lists the paths of forbidden keys in v. The names of a JSON
// Schema's "properties" are the tool's input fields, not metadata: a tool
// may well take a "timeout_ms" argument. They are not flagged themselves,
// but their schemas are searched.
func findKeys(v any, keys []string, path string) []string {
	return findKeysIn(v, keys, path, false)
}

func findKeysIn(v any, keys []string, path string, fieldNames bool) []string {
	var found []string
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			p := path + "." + k
			if !fieldNames && slices.Contains(keys, k) {
				found = append(found, p)
			}
			found = append(found, findKeysIn(x[k], keys, p, !fieldNames && k == "properties")...)
		}
	case []any:
		for i, e := range x {
			found = append(found, findKeysIn(e, keys, fmt.Sprintf("%s[%d]", path, i), false)...)
		}
	}
	return found
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	typ := "invalid_request_error"
	if status >= 500 {
		typ = "server_error"
	}
	writeErrorTyped(w, status, msg, typ, "")
}

func writeErrorTyped(w http.ResponseWriter, status int, msg, typ, code string) {
	type apiError struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	}
	e := apiError{Message: msg, Type: typ}
	if code != "" {
		e.Code = &code
	}
	writeJSON(w, status, map[string]apiError{"error": e})
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// stepAbort is the panic value with which a check's FailNow stops its step.
type stepAbort struct{}

// checkTB is the testing.TB given to step checks: FailNow, Fatal and Skip
// record the failure and abort the step instead of calling runtime.Goexit on
// a server goroutine.
type checkTB struct{ testing.TB }

func (c checkTB) FailNow() {
	c.TB.Fail()
	panic(stepAbort{})
}

func (c checkTB) Fatal(args ...any) {
	c.TB.Helper()
	c.TB.Error(args...)
	panic(stepAbort{})
}

func (c checkTB) Fatalf(format string, args ...any) {
	c.TB.Helper()
	c.TB.Errorf(format, args...)
	panic(stepAbort{})
}

func (c checkTB) SkipNow() {
	c.TB.Error("llmtest: Skip called in a step check")
	panic(stepAbort{})
}

func (c checkTB) Skip(args ...any) { c.SkipNow() }

func (c checkTB) Skipf(format string, args ...any) { c.SkipNow() }
