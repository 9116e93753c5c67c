package llm_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
)

var (
	readTool = llm.ToolSpec{
		Name:        "choir.fs.read",
		Description: "Read a file in the workspace.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"Relative path."},"head":{"type":"integer","minimum":1}},"required":["path"],"additionalProperties":false}`),
	}
	readFileTool = llm.ToolSpec{
		Name:        "choir.fs.read_file",
		Description: "Another tool, with an underscore.",
		Parameters:  json.RawMessage(`{"type":"object","properties":{}}`),
	}
)

type testBundle struct {
	srv    *llmtest.Server
	client *llm.Client
}

func setup(t *testing.T, steps ...llmtest.Step) *testBundle {
	t.Helper()
	srv := llmtest.NewServer(t, steps...)
	// A transport per test, so that goleak sees no idle connection left.
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &testBundle{srv: srv, client: &llm.Client{HTTPClient: &http.Client{Transport: tr}}}
}

func (b *testBundle) request(msgs ...llm.Message) llm.Request {
	if len(msgs) == 0 {
		msgs = []llm.Message{llm.SystemMessage("You are a test."), llm.UserMessage("hello")}
	}
	return llm.Request{Model: b.srv.Model(), Messages: msgs, Tools: []llm.ToolSpec{readTool, readFileTool}}
}

func ptr[T any](v T) *T { return &v }

func jsonEqual(t testing.TB, got, want []byte) bool {
	t.Helper()
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("decode %s: %v", got, err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("decode %s: %v", want, err)
	}
	gb, _ := json.Marshal(g)
	wb, _ := json.Marshal(w)
	return string(gb) == string(wb)
}

func TestCompleteRequestShape(t *testing.T) {
	t.Parallel()

	t.Run("MessagesToolsAndParameters", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("ok").Expect(func(t testing.TB, r *llmtest.Request) {
			for k := range r.Fields {
				if !slices.Contains([]string{"model", "messages", "tools", "temperature", "max_tokens"}, k) {
					t.Errorf("unexpected top-level field %q in %s", k, r.Body)
				}
			}
			if r.Model != llmtest.DefaultModel {
				t.Errorf("model = %q", r.Model)
			}
			if r.Temperature == nil || *r.Temperature != 0 || string(r.Fields["temperature"]) != "0" {
				t.Errorf("temperature = %s, want 0 sent explicitly", r.Fields["temperature"])
			}
			if r.Has("reasoning_effort") {
				t.Errorf("reasoning_effort sent: %s", r.Fields["reasoning_effort"])
			}
			if r.MaxTokens == nil || *r.MaxTokens != 300 {
				t.Errorf("max_tokens = %s", r.Fields["max_tokens"])
			}
			if r.APIKey != "sk-test" {
				t.Errorf("API key = %q", r.APIKey)
			}

			if got, want := len(r.Tools), 2; got != want {
				t.Fatalf("%d tools, want %d", got, want)
			}
			for i, want := range []struct {
				wire string
				spec llm.ToolSpec
			}{{"choir__fs__read", readTool}, {"choir__fs__read_file", readFileTool}} {
				tool := r.Tools[i]
				if tool.Type != "function" || tool.Name != want.wire || tool.Canonical != want.spec.Name || tool.Description != want.spec.Description {
					t.Errorf("tool %d = %+v", i, tool)
				}
				if !jsonEqual(t, tool.Parameters, want.spec.Parameters) {
					t.Errorf("tool %d parameters = %s, want %s", i, tool.Parameters, want.spec.Parameters)
				}
			}

			want := []llmtest.Message{
				{Role: "system", Content: "You are a test."},
				{Role: "user", Content: "read a.txt"},
				{Role: "assistant", Content: "Reading.", ToolCalls: []llmtest.ToolCall{
					{ID: "c1", Type: "function", Name: "choir__fs__read", Canonical: "choir.fs.read", Arguments: `{"path":"a.txt"}`},
					{ID: "c2", Type: "function", Name: "choir__fs__read_file", Canonical: "choir.fs.read_file", Arguments: `{}`},
				}},
				{Role: "tool", Content: `{"status":"success","summary":"hi"}`, ToolCallID: "c1"},
				{Role: "tool", Content: `{"status":"success"}`, ToolCallID: "c2"},
				{Role: "assistant", Content: "It says hi."},
				{Role: "user", Content: "thanks"},
			}
			if len(r.Messages) != len(want) {
				t.Fatalf("%d messages, want %d: %s", len(r.Messages), len(want), r.Fields["messages"])
			}
			for i := range want {
				g, w := r.Messages[i], want[i]
				if g.Role != w.Role || g.Content != w.Content || g.ToolCallID != w.ToolCallID || !slices.Equal(g.ToolCalls, w.ToolCalls) {
					t.Errorf("message %d = %+v, want %+v", i, g, w)
				}
			}
			// An assistant message that only calls tools is sent without
			// content; one with no calls carries no tool_calls field.
			var raw []map[string]json.RawMessage
			if err := json.Unmarshal(r.Fields["messages"], &raw); err != nil {
				t.Fatal(err)
			}
			if _, ok := raw[5]["tool_calls"]; ok {
				t.Errorf("assistant message without calls has tool_calls: %s", r.Fields["messages"])
			}
		}))

		req := b.request(
			llm.SystemMessage("You are a test."),
			llm.UserMessage("read a.txt"),
			llm.AssistantMessage("Reading.",
				llm.ToolCall{ID: "c1", Name: "choir.fs.read", Arguments: json.RawMessage(`{"path":"a.txt"}`)},
				llm.ToolCall{ID: "c2", Name: "choir.fs.read_file"},
			),
			llm.ToolResultMessage("c1", `{"status":"success","summary":"hi"}`),
			llm.ToolResultMessage("c2", `{"status":"success"}`),
			llm.AssistantMessage("It says hi."),
			llm.UserMessage("thanks"),
		)
		req.Model.Temperature = ptr(0.0)
		req.Model.APIKey = "sk-test"
		req.MaxTokens = 300
		if _, err := b.client.Complete(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ReasoningEffortWithoutTemperature", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("ok").Expect(func(t testing.TB, r *llmtest.Request) {
			if r.Has("temperature") {
				t.Errorf("temperature sent: %s", r.Fields["temperature"])
			}
			if got := string(r.Fields["reasoning_effort"]); got != `"high"` {
				t.Errorf("reasoning_effort = %s, want \"high\"", got)
			}
			if r.Has("max_tokens") {
				t.Errorf("max_tokens sent: %s", r.Fields["max_tokens"])
			}
			if _, ok := r.Header["Authorization"]; ok {
				t.Errorf("Authorization sent without an API key")
			}
		}))
		req := b.request()
		req.Model.ReasoningEffort = ptr("high")
		if _, err := b.client.Complete(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("NoToolsNoToolsField", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("ok").Expect(func(t testing.TB, r *llmtest.Request) {
			if r.Has("tools") {
				t.Errorf("tools sent: %s", r.Fields["tools"])
			}
		}))
		req := b.request()
		req.Tools = nil
		if _, err := b.client.Complete(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("ToolWithoutParametersGetsEmptyObjectSchema", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("ok").Expect(func(t testing.TB, r *llmtest.Request) {
			if !jsonEqual(t, r.Tools[0].Parameters, []byte(`{"type":"object","properties":{}}`)) {
				t.Errorf("parameters = %s", r.Tools[0].Parameters)
			}
		}))
		req := b.request()
		req.Tools = []llm.ToolSpec{{Name: "choir.skill.done"}}
		if _, err := b.client.Complete(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("FromConfig", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("ok").Expect(func(t testing.TB, r *llmtest.Request) {
			if r.Model != "openai/o3" || string(r.Fields["reasoning_effort"]) != `"medium"` || r.Has("temperature") || r.APIKey != "k" {
				t.Errorf("request = %s, key %q", r.Body, r.APIKey)
			}
		}))
		m := llm.ModelSettingsFromConfig("o3", config.Model{
			Provider: "openrouter", Model: "openai/o3", Endpoint: b.srv.BaseURL(), ReasoningEffort: ptr("medium"), Secret: "s",
		}, "k")
		if m.ContextWindow != config.DefaultContextWindow {
			t.Errorf("context window = %d, want the default %d", m.ContextWindow, config.DefaultContextWindow)
		}
		if w := llm.ModelSettingsFromConfig("small", config.Model{ContextWindow: 4096}, "").ContextWindow; w != 4096 {
			t.Errorf("configured context window = %d, want 4096", w)
		}
		req := b.request()
		req.Model = m
		if _, err := b.client.Complete(t.Context(), req); err != nil {
			t.Fatal(err)
		}
	})
}

// TestCompleteIgnoresOpenAIEnvironment cannot run in parallel: it sets
// environment variables.
func TestCompleteIgnoresOpenAIEnvironment(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-ambient")
	t.Setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1")
	t.Setenv("OPENAI_ORG_ID", "org-ambient")

	b := setup(t, llmtest.Text("ok").Expect(func(t testing.TB, r *llmtest.Request) {
		for k, v := range r.Header {
			if strings.Contains(strings.Join(v, ","), "ambient") {
				t.Errorf("header %s = %q comes from the environment", k, v)
			}
		}
	}))
	if _, err := b.client.Complete(t.Context(), b.request()); err != nil {
		t.Fatal(err)
	}
}

func TestCompleteToolCallRoundTrip(t *testing.T) {
	t.Parallel()

	b := setup(t,
		llmtest.ToolCalls(
			llmtest.Call{Name: "choir.fs.read", Arguments: `{"path":"a.txt","head":3}`},
			llmtest.Call{Name: "choir.fs.read_file"},
		).WithUsage(120, 30).WithModel("provider/exact-model"),
		llmtest.Text("The file says hi.").WithUsage(200, 8).Expect(func(t testing.TB, r *llmtest.Request) {
			last := r.Messages[len(r.Messages)-3:]
			if last[0].Role != "assistant" || len(last[0].ToolCalls) != 2 ||
				last[0].ToolCalls[0].Name != "choir__fs__read" || last[0].ToolCalls[0].ID != "call_1_1" ||
				last[1].ToolCallID != "call_1_1" || last[2].ToolCallID != "call_1_2" {
				t.Errorf("replayed calls and results = %+v", last)
			}
		}),
	)

	req := b.request()
	res, err := b.client.Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	want := []llm.ToolCall{
		{ID: "call_1_1", Name: "choir.fs.read", Arguments: json.RawMessage(`{"path":"a.txt","head":3}`)},
		{ID: "call_1_2", Name: "choir.fs.read_file", Arguments: json.RawMessage(`{}`)},
	}
	if len(res.ToolCalls) != len(want) {
		t.Fatalf("tool calls = %+v", res.ToolCalls)
	}
	for i := range want {
		g := res.ToolCalls[i]
		if g.ID != want[i].ID || g.Name != want[i].Name || string(g.Arguments) != string(want[i].Arguments) {
			t.Errorf("tool call %d = %+v, want %+v", i, g, want[i])
		}
	}
	if res.Content != "" || res.FinishReason != "tool_calls" || res.Model != "provider/exact-model" ||
		res.Usage != (llm.Usage{PromptTokens: 120, CompletionTokens: 30}) || res.Latency <= 0 {
		t.Errorf("response = %+v", res)
	}

	req.Messages = append(req.Messages, llm.AssistantMessage(res.Content, res.ToolCalls...),
		llm.ToolResultMessage(res.ToolCalls[0].ID, `{"status":"success","summary":"hi"}`),
		llm.ToolResultMessage(res.ToolCalls[1].ID, `{"status":"success"}`))
	res, err = b.client.Complete(t.Context(), req)
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != "The file says hi." || len(res.ToolCalls) != 0 || res.FinishReason != "stop" || res.Model != llmtest.DefaultModel {
		t.Errorf("response = %+v", res)
	}
	if got := b.srv.Usage(); got != (llmtest.Usage{PromptTokens: 320, CompletionTokens: 38}) {
		t.Errorf("server usage = %+v", got)
	}
}

func TestCompleteTextAndToolCallsTogether(t *testing.T) {
	t.Parallel()

	b := setup(t, llmtest.ToolCalls(llmtest.Call{Name: "choir.fs.read", Arguments: `{"path":"x"}`}).WithText("Let me look."))
	res, err := b.client.Complete(t.Context(), b.request())
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != "Let me look." || len(res.ToolCalls) != 1 || res.ToolCalls[0].Name != "choir.fs.read" {
		t.Errorf("response = %+v", res)
	}
}

func TestCompleteNeverParsesToolCallsFromText(t *testing.T) {
	t.Parallel()

	text := `<tool_call>{"name": "choir.fs.read", "arguments": {"path": "a"}}</tool_call>
{"tool_calls": [{"id": "x", "function": {"name": "choir__fs__read", "arguments": "{}"}}]}`
	b := setup(t, llmtest.Text(text))
	res, err := b.client.Complete(t.Context(), b.request())
	if err != nil {
		t.Fatal(err)
	}
	if res.Content != text || len(res.ToolCalls) != 0 {
		t.Errorf("response = %+v", res)
	}
}

func TestCompleteUsageEstimated(t *testing.T) {
	t.Parallel()

	b := setup(t, llmtest.Text("four"))
	res, err := b.client.Complete(t.Context(), b.request())
	if err != nil {
		t.Fatal(err)
	}
	if res.Usage.PromptTokens < 10 || res.Usage.CompletionTokens != 1 {
		t.Errorf("usage = %+v", res.Usage)
	}
}

func TestCompleteProviderErrors(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		step    llmtest.Step
		status  int
		message string
	}{
		{"ServiceUnavailable", llmtest.ServerError(503, "overloaded"), 503, "overloaded"},
		{"InternalServerError", llmtest.ServerError(500, ""), 500, "Internal Server Error"},
		{"BadRequest", llmtest.ServerError(400, "temperature is not supported with this model"), 400, "temperature is not supported with this model"},
		{"Unauthorized", llmtest.ServerError(401, "invalid api key"), 401, "invalid api key"},
		{"HTMLBadGateway", llmtest.Raw(502, http.Header{"Content-Type": {"text/html"}}, "<html>bad gateway</html>"), 502, "<html>bad gateway</html>"},
		{"EmptyBody", llmtest.Raw(504, nil, ""), 504, ""},
		{"ErrorObjectIn200", llmtest.Malformed(`{"error":{"message":"upstream failed","code":502}}`), 502, "upstream failed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setup(t, tt.step)
			_, err := b.client.Complete(t.Context(), b.request())
			var pe *llm.ProviderError
			if !errors.As(err, &pe) {
				t.Fatalf("error = %v (%T), want *ProviderError", err, err)
			}
			if pe.Status != tt.status || pe.Message != tt.message {
				t.Errorf("ProviderError = %+v, want status %d message %q", pe, tt.status, tt.message)
			}
			if !strings.HasPrefix(err.Error(), "call model llmtest: model provider returned HTTP") {
				t.Errorf("error text = %q", err)
			}
			var rl *llm.RateLimitError
			if errors.As(err, &rl) || errors.Is(err, llm.ErrMalformedResponse) {
				t.Errorf("error %v also matches another kind", err)
			}
		})
	}
}

func TestCompleteRateLimitError(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name       string
		step       llmtest.Step
		retryAfter time.Duration
	}{
		{"RetryAfterSeconds", llmtest.RateLimited("7"), 7 * time.Second},
		{"NoRetryAfter", llmtest.RateLimited(""), 0},
		{"GarbageRetryAfter", llmtest.RateLimited("soon"), 0},
		{"RetryAfterMs", llmtest.Raw(429, http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"2"}}, `{"error":{"message":"slow down"}}`), 1500 * time.Millisecond},
		{"ErrorObjectIn200", llmtest.Malformed(`{"error":{"message":"rate limited upstream","code":429}}`), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setup(t, tt.step)
			_, err := b.client.Complete(t.Context(), b.request())
			var rl *llm.RateLimitError
			if !errors.As(err, &rl) {
				t.Fatalf("error = %v, want *RateLimitError", err)
			}
			if rl.RetryAfter != tt.retryAfter {
				t.Errorf("RetryAfter = %s, want %s", rl.RetryAfter, tt.retryAfter)
			}
			if rl.Message == "" {
				t.Errorf("no message kept")
			}
		})
	}
}

func TestCompleteMalformedResponses(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name  string
		step  llmtest.Step
		tools []llm.ToolSpec // nil: readTool and readFileTool
		want  string
	}{
		{name: "NotJSON", step: llmtest.Malformed(`{"choices": [`), want: "decode"},
		{name: "HTMLWith200", step: llmtest.Raw(200, http.Header{"Content-Type": {"text/html"}}, "<html>login</html>"), want: "decode"},
		{name: "EmptyBody", step: llmtest.Malformed(``), want: "decode"},
		{name: "ChoicesWrongType", step: llmtest.Malformed(`{"choices": "x"}`), want: "decode"},
		{name: "ContentWrongType", step: llmtest.Malformed(`{"choices": [{"message": {"content": 7}}]}`), want: "decode"},
		{name: "NoChoices", step: llmtest.Malformed(`{"choices": []}`), want: "no choices"},
		{name: "ChoicesAbsent", step: llmtest.Malformed(`{"id": "x"}`), want: "no choices"},
		{name: "NoMessage", step: llmtest.Malformed(`{"choices": [{"finish_reason": "stop"}]}`), want: "without a message"},
		{name: "EmptyMessage", step: llmtest.Text(""), want: "empty message"},
		{name: "BlankMessage", step: llmtest.Text(" \n"), want: "empty message"},
		{name: "NullContentNoCalls", step: llmtest.Malformed(`{"choices": [{"message": {"role": "assistant", "content": null}, "finish_reason": "stop"}]}`), want: "empty message"},
		{
			name: "ArgumentsNotJSON",
			step: llmtest.ToolCalls(llmtest.Call{Name: "choir.fs.read", Arguments: `{"path": "a`}).WithFinishReason("length"),
			want: "not valid JSON",
		},
		{
			name: "ArgumentsAsObject",
			step: llmtest.Malformed(`{"choices": [{"message": {"tool_calls": [{"id": "c", "type": "function", "function": {"name": "choir__fs__read", "arguments": {"path": "a"}}}]}}]}`),
			want: "decode",
		},
		{name: "DottedNameEchoed", step: llmtest.ToolCalls(llmtest.Call{Name: "choir.fs.read", Verbatim: true}), want: `"choir.fs.read", which was not offered`},
		{name: "NearMissNotGuessed", step: llmtest.ToolCalls(llmtest.Call{Name: "choir__fs__read-file"}), want: "which was not offered"},
		{
			name: "ToolCallWithoutID",
			step: llmtest.Malformed(`{"choices": [{"message": {"tool_calls": [{"type": "function", "function": {"name": "choir__fs__read", "arguments": "{}"}}]}}]}`),
			want: "no ID",
		},
		{name: "DuplicateIDs", step: llmtest.ToolCalls(llmtest.Call{ID: "same", Name: "choir.fs.read"}, llmtest.Call{ID: "same", Name: "choir.fs.read_file"}), want: "repeated"},
		{
			name: "CustomToolCall",
			step: llmtest.Malformed(`{"choices": [{"message": {"tool_calls": [{"id": "c", "type": "custom", "custom": {"name": "choir__fs__read", "input": "x"}}]}}]}`),
			want: `type "custom"`,
		},
		{
			name: "ToolCallWithoutFunction",
			step: llmtest.Malformed(`{"choices": [{"message": {"tool_calls": [{"id": "c", "type": "function"}]}}]}`),
			want: "names no function",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setup(t, tt.step)
			req := b.request()
			if tt.tools != nil {
				req.Tools = tt.tools
			}
			res, err := b.client.Complete(t.Context(), req)
			if !errors.Is(err, llm.ErrMalformedResponse) {
				t.Fatalf("Complete = %+v, %v; want ErrMalformedResponse", res, err)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestCompleteContentFiltered(t *testing.T) {
	t.Parallel()

	b := setup(t, llmtest.Text("").WithFinishReason("content_filter"))
	_, err := b.client.Complete(t.Context(), b.request())
	if !errors.Is(err, llm.ErrContentFiltered) {
		t.Fatalf("error = %v, want ErrContentFiltered", err)
	}
}

func TestCompleteRefusalIsAnAnswer(t *testing.T) {
	t.Parallel()

	b := setup(t, llmtest.Malformed(`{"model":"m","choices":[{"message":{"role":"assistant","content":null,"refusal":"I can't help with that."},"finish_reason":"stop"}]}`))
	res, err := b.client.Complete(t.Context(), b.request())
	if err != nil {
		t.Fatal(err)
	}
	if res.Refusal != "I can't help with that." || res.Content != "" {
		t.Errorf("response = %+v", res)
	}
}

func TestCompleteContext(t *testing.T) {
	t.Parallel()

	t.Run("DeadlineWhileServerHangs", func(t *testing.T) {
		t.Parallel()

		// Long enough for the request to arrive even on a loaded machine
		// (the script expects it), short enough to keep the test quick.
		b := setup(t, llmtest.Hang())
		ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
		defer cancel()
		_, err := b.client.Complete(ctx, b.request())
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("error = %v, want DeadlineExceeded", err)
		}
		if !strings.HasPrefix(err.Error(), "call model llmtest: ") {
			t.Errorf("error text = %q", err)
		}
	})

	t.Run("CancelWhileServerHangs", func(t *testing.T) {
		t.Parallel()

		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		b := setup(t, llmtest.Hang().Expect(func(testing.TB, *llmtest.Request) { cancel() }))
		_, err := b.client.Complete(ctx, b.request())
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error = %v, want Canceled", err)
		}
	})

	t.Run("CancelledBeforeCall", func(t *testing.T) {
		t.Parallel()

		b := setup(t)
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, err := b.client.Complete(ctx, b.request())
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("error = %v, want Canceled", err)
		}
		if n := len(b.srv.Requests()); n != 0 {
			t.Errorf("%d requests sent", n)
		}
	})

	t.Run("SlowReplyWithinDeadline", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("late but fine").After(30*time.Millisecond))
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		res, err := b.client.Complete(ctx, b.request())
		if err != nil {
			t.Fatal(err)
		}
		if res.Content != "late but fine" {
			t.Errorf("content = %q", res.Content)
		}
	})
}

func TestCompleteConnectionRefused(t *testing.T) {
	t.Parallel()

	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	c := &llm.Client{HTTPClient: &http.Client{Transport: tr}}
	_, err = c.Complete(t.Context(), llm.Request{
		Model:    llm.ModelSettings{Name: "gone", Model: "m", Endpoint: "http://" + addr + "/v1"},
		Messages: []llm.Message{llm.UserMessage("hi")},
	})
	if err == nil {
		t.Fatal("no error")
	}
	var pe *llm.ProviderError
	if errors.As(err, &pe) || errors.Is(err, llm.ErrMalformedResponse) || !strings.HasPrefix(err.Error(), "call model gone: ") {
		t.Errorf("error = %v (%T)", err, err)
	}
}

func TestCompleteInvalidRequest(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		modify func(*llm.Request)
		want   string
	}{
		{"NoModel", func(r *llm.Request) { r.Model.Model = "" }, "no model ID"},
		{"NoEndpoint", func(r *llm.Request) { r.Model.Endpoint = "" }, `endpoint "" is not an http or https URL`},
		{"EndpointWithoutScheme", func(r *llm.Request) { r.Model.Endpoint = "localhost:11434/v1" }, "not an http or https URL"},
		{"EndpointUnparsable", func(r *llm.Request) { r.Model.Endpoint = "http://[::1" }, "not an http or https URL"},
		{"NoMessages", func(r *llm.Request) { r.Messages = nil }, "no messages"},
		{"BadToolName", func(r *llm.Request) { r.Tools = []llm.ToolSpec{{Name: "Choir.Fs"}} }, "not a canonical name"},
		{"DuplicateTool", func(r *llm.Request) { r.Tools = []llm.ToolSpec{readTool, readTool} }, "offered twice"},
		{"ParametersNotObject", func(r *llm.Request) { r.Tools = []llm.ToolSpec{{Name: "a.b", Parameters: json.RawMessage(`[1]`)}} }, "not a JSON object"},
		{"ParametersNull", func(r *llm.Request) { r.Tools = []llm.ToolSpec{{Name: "a.b", Parameters: json.RawMessage(`null`)}} }, "not a JSON object"},
		{"ToolResultWithoutID", func(r *llm.Request) { r.Messages = append(r.Messages, llm.ToolResultMessage("", "x")) }, "without a tool call ID"},
		{"UnknownRole", func(r *llm.Request) { r.Messages = append(r.Messages, llm.Message{Role: "developer"}) }, `unknown role "developer"`},
		{"UserWithToolCalls", func(r *llm.Request) {
			r.Messages = append(r.Messages, llm.Message{Role: llm.RoleUser, ToolCalls: []llm.ToolCall{{ID: "x", Name: "a.b"}}})
		}, "user message with tool calls"},
		{"ReplayedCallBadName", func(r *llm.Request) {
			r.Messages = append(r.Messages, llm.AssistantMessage("", llm.ToolCall{ID: "x", Name: "nodot"}))
		}, "not a canonical name"},
		{"ReplayedCallBadArguments", func(r *llm.Request) {
			r.Messages = append(r.Messages, llm.AssistantMessage("", llm.ToolCall{ID: "x", Name: "a.b", Arguments: json.RawMessage(`{`)}))
		}, "arguments are not valid JSON"},
		{"ReplayedCallWithoutID", func(r *llm.Request) {
			r.Messages = append(r.Messages, llm.AssistantMessage("", llm.ToolCall{Name: "a.b"}))
		}, "without an ID"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setup(t) // no step: any request fails the test
			req := b.request()
			tt.modify(&req)
			_, err := b.client.Complete(t.Context(), req)
			if !errors.Is(err, llm.ErrInvalidRequest) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want ErrInvalidRequest saying %q", err, tt.want)
			}
		})
	}
}

func TestZeroClient(t *testing.T) {
	t.Parallel()

	b := setup(t, llmtest.Text("ok"))
	var c llm.Client
	res, err := c.Complete(t.Context(), b.request())
	if err != nil || res.Content != "ok" {
		t.Fatalf("Complete = %+v, %v", res, err)
	}
	// The shared default client keeps the connection open; close it so
	// that goleak sees no reader goroutine left.
	http.DefaultTransport.(*http.Transport).CloseIdleConnections()
}

func TestModelSettingsRedactAPIKey(t *testing.T) {
	t.Parallel()

	req := llm.Request{Model: llm.ModelSettings{Name: "n", Model: "m", Endpoint: "http://x", APIKey: "sk-secret", Temperature: ptr(0.5)}}
	var logged strings.Builder
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("call", "model", req.Model)
	for _, s := range []string{fmt.Sprint(req), fmt.Sprintf("%+v", req), fmt.Sprintf("%#v", req), fmt.Sprintf("%v", &req.Model), logged.String()} {
		if strings.Contains(s, "sk-secret") {
			t.Errorf("API key printed: %s", s)
		}
	}
	if got := req.Model.String(); got != "{Name:n Model:m Endpoint:http://x Temperature:0.5 APIKey:[redacted]}" {
		t.Errorf("String() = %q", got)
	}
}

// A model may call a tool it was not offered (one outside a skill state's
// allowlist, say): the exact canonical name comes back, never a guess, so
// the arbiter can refuse the call and tell the model what is allowed.
func TestCompleteKeepsCallsOfToolsNotOffered(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name  string
		tools []llm.ToolSpec
	}{
		{"UnknownTool", nil},
		{"ToolCallWithoutTools", []llm.ToolSpec{}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, llmtest.ToolCalls(llmtest.Call{ID: "c1", Name: "choir.fs.delete", Arguments: `{"path":"a"}`}))
			req := b.request()
			if tt.tools != nil {
				req.Tools = tt.tools
			}
			res, err := b.client.Complete(t.Context(), req)
			if err != nil {
				t.Fatal(err)
			}
			if len(res.ToolCalls) != 1 || res.ToolCalls[0].Name != "choir.fs.delete" {
				t.Fatalf("tool calls = %+v", res.ToolCalls)
			}
		})
	}
}

// TestCompleteGivesUpOnAProviderThatNeverAnswers: a provider that takes the
// request and never sends headers cannot hold a call without a deadline
// forever; the default client's transport gives up.
func TestCompleteGivesUpOnAProviderThatNeverAnswers(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	client := &llm.Client{ResponseHeaderTimeout: 200 * time.Millisecond}
	t.Cleanup(client.CloseIdleConnections)

	// The context only keeps a regression from hanging the test run.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := client.Complete(ctx, llm.Request{
		Model:    llm.ModelSettings{Name: "hung", Model: "m", Endpoint: srv.URL},
		Messages: []llm.Message{llm.UserMessage("hello")},
	})
	if err == nil {
		t.Fatal("Complete succeeded against a provider that never answers")
	}
	if ctx.Err() != nil {
		t.Fatalf("Complete returned only when the test's own deadline passed: %v", err)
	}
	if !strings.Contains(err.Error(), "timeout awaiting response headers") {
		t.Errorf("error = %v, want the transport's response-header timeout", err)
	}
}
