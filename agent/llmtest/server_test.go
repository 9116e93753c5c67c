package llmtest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/agent/llmtest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// recorder is a testing.TB that records failures instead of failing the
// test, so that the server's own checks can be tested.
type recorder struct {
	testing.TB
	mu     sync.Mutex
	errs   []string
	failed bool
}

func (r *recorder) Helper() {}

func (r *recorder) Errorf(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
	r.failed = true
}

func (r *recorder) Error(args ...any) { r.Errorf("%s", fmt.Sprint(args...)) }

func (r *recorder) Fail() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.failed = true
}

func (r *recorder) Failed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

func (r *recorder) errors() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}

// wantErrors fails t unless each of wants is a substring of some recorded
// error, and the number of errors is len(wants).
func (r *recorder) wantErrors(t *testing.T, wants ...string) {
	t.Helper()
	errs := r.errors()
	for _, w := range wants {
		if !slices.ContainsFunc(errs, func(e string) bool { return strings.Contains(e, w) }) {
			t.Errorf("no recorded error contains %q; recorded: %q", w, errs)
		}
	}
	if len(errs) != len(wants) {
		t.Errorf("recorded %d errors, want %d: %q", len(errs), len(wants), errs)
	}
}

type testBundle struct {
	srv    *llmtest.Server
	rec    *recorder
	client *http.Client
}

// setup starts a server that reports to a recorder; the test checks the
// recorder.
func setup(t *testing.T, steps ...llmtest.Step) *testBundle {
	t.Helper()
	rec := &recorder{TB: t}
	srv := llmtest.NewServer(rec, steps...)
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	return &testBundle{srv: srv, rec: rec, client: &http.Client{Transport: tr}}
}

const simpleBody = `{"model":"m","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"hi"}]}`

// post sends body to the server's chat completions endpoint.
func (b *testBundle) post(ctx context.Context, body string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.srv.BaseURL()+"/chat/completions", strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer sk-x")
	res, err := b.client.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer res.Body.Close()
	data, err := io.ReadAll(res.Body)
	return res, data, err
}

func (b *testBundle) mustPost(t *testing.T, body string) (*http.Response, []byte) {
	t.Helper()
	res, data, err := b.post(t.Context(), body)
	if err != nil {
		t.Fatal(err)
	}
	return res, data
}

type completion struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Model   string `json:"model"`
	Choices []struct {
		Message struct {
			Role      string  `json:"role"`
			Content   *string `json:"content"`
			ToolCalls []struct {
				ID       string `json:"id"`
				Type     string `json:"type"`
				Function struct {
					Name      string `json:"name"`
					Arguments string `json:"arguments"`
				} `json:"function"`
			} `json:"tool_calls"`
		} `json:"message"`
		FinishReason string `json:"finish_reason"`
	} `json:"choices"`
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
		TotalTokens      int64 `json:"total_tokens"`
	} `json:"usage"`
}

// complete posts body and decodes the completion it gets.
func (b *testBundle) complete(t *testing.T, body string) completion {
	t.Helper()
	res, data := b.mustPost(t, body)
	if res.StatusCode != http.StatusOK || res.Header.Get("Content-Type") != "application/json" {
		t.Fatalf("status %d, Content-Type %q: %s", res.StatusCode, res.Header.Get("Content-Type"), data)
	}
	var c completion
	if err := json.Unmarshal(data, &c); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	if len(c.Choices) != 1 {
		t.Fatalf("%d choices: %s", len(c.Choices), data)
	}
	return c
}

func TestText(t *testing.T) {
	t.Parallel()

	b := setup(t, llmtest.Text("hello there"))
	c := b.complete(t, simpleBody)
	msg := c.Choices[0].Message
	if msg.Role != "assistant" || msg.Content == nil || *msg.Content != "hello there" || len(msg.ToolCalls) != 0 {
		t.Errorf("message = %+v", msg)
	}
	if c.Object != "chat.completion" || c.Model != "m" || c.Choices[0].FinishReason != "stop" || c.ID == "" {
		t.Errorf("completion = %+v", c)
	}
	if c.Usage.PromptTokens < 1 || c.Usage.CompletionTokens != 3 || c.Usage.TotalTokens != c.Usage.PromptTokens+3 {
		t.Errorf("usage = %+v", c.Usage)
	}
	if got := b.srv.Usage(); got.PromptTokens != c.Usage.PromptTokens || got.CompletionTokens != 3 {
		t.Errorf("server usage = %+v", got)
	}
	b.rec.wantErrors(t)
}

func TestToolCalls(t *testing.T) {
	t.Parallel()

	b := setup(t, llmtest.ToolCalls(
		llmtest.Call{Name: "choir.fs.read", Arguments: `{"path":"a"}`},
		llmtest.Call{Name: "choir.x.a__b"},
		llmtest.Call{ID: "mine", Name: "not_canonical"},
		llmtest.Call{Name: "choir.fs.read", Verbatim: true, Arguments: `{broken`},
	).WithUsage(11, 22).WithModel("other"))
	c := b.complete(t, simpleBody)
	msg := c.Choices[0].Message
	if msg.Content != nil {
		t.Errorf("content = %q, want null", *msg.Content)
	}
	type call struct{ id, typ, name, args string }
	var got []call
	for _, tc := range msg.ToolCalls {
		got = append(got, call{tc.ID, tc.Type, tc.Function.Name, tc.Function.Arguments})
	}
	want := []call{
		{"call_1_1", "function", "choir__fs__read", `{"path":"a"}`},
		{"call_1_2", "function", "choir__x__a--b", `{}`},
		{"mine", "function", "not_canonical", `{}`},
		{"call_1_4", "function", "choir.fs.read", `{broken`},
	}
	if !slices.Equal(got, want) {
		t.Errorf("tool calls = %+v\nwant %+v", got, want)
	}
	if c.Choices[0].FinishReason != "tool_calls" || c.Model != "other" || c.Usage.PromptTokens != 11 || c.Usage.CompletionTokens != 22 || c.Usage.TotalTokens != 33 {
		t.Errorf("completion = %+v", c)
	}
	b.rec.wantErrors(t)
}

func TestToolCallsWithTextAndFinishReason(t *testing.T) {
	t.Parallel()

	b := setup(t, llmtest.ToolCalls(llmtest.Call{Name: "a.b"}).WithText("Looking.").WithFinishReason("length"))
	c := b.complete(t, simpleBody)
	if m := c.Choices[0].Message; m.Content == nil || *m.Content != "Looking." || len(m.ToolCalls) != 1 || c.Choices[0].FinishReason != "length" {
		t.Errorf("completion = %+v", c)
	}
}

func TestRequestRecorded(t *testing.T) {
	t.Parallel()

	body := `{
		"model": "gpt-x", "temperature": 0, "max_tokens": 50,
		"messages": [
			{"role": "system", "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}]},
			{"role": "user", "content": "read it"},
			{"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "choir__fs__read", "arguments": "{\"path\":\"a\"}"}}]},
			{"role": "tool", "tool_call_id": "c1", "content": "{\"status\":\"success\"}"}
		],
		"tools": [
			{"type": "function", "function": {"name": "choir__fs__read", "description": "Read.", "parameters": {"type": "object"}}},
			{"type": "function", "function": {"name": "plain_name", "parameters": {"type": "object"}}}
		]
	}`
	var seen *llmtest.Request
	b := setup(t, llmtest.Text("ok").Expect(func(t testing.TB, r *llmtest.Request) { seen = r }))
	b.mustPost(t, body)

	reqs := b.srv.Requests()
	if len(reqs) != 1 || reqs[0] != seen {
		t.Fatalf("requests = %v, seen by the check %p", reqs, seen)
	}
	r := reqs[0]
	if r.Index != 1 || r.Model != "gpt-x" || r.APIKey != "sk-x" || r.Temperature == nil || *r.Temperature != 0 ||
		r.MaxTokens == nil || *r.MaxTokens != 50 || r.ReasoningEffort != nil || !r.Has("temperature") || r.Has("reasoning_effort") {
		t.Errorf("request = %+v", r)
	}
	if got := r.System(); got != "part one\npart two" {
		t.Errorf("System() = %q", got)
	}
	if got := r.ToolNames(); !slices.Equal(got, []string{"choir.fs.read", "plain_name"}) {
		t.Errorf("ToolNames() = %q", got)
	}
	if tool, ok := r.Tool("choir.fs.read"); !ok || tool.Name != "choir__fs__read" || tool.Description != "Read." || string(tool.Parameters) != `{"type": "object"}` {
		t.Errorf("Tool(choir.fs.read) = %+v, %v", tool, ok)
	}
	if _, ok := r.Tool("choir__fs__read"); !ok {
		t.Errorf("Tool by wire name not found")
	}
	if _, ok := r.Tool("choir.fs.write"); ok {
		t.Errorf("Tool(choir.fs.write) found")
	}
	assistant := r.Messages[2]
	if assistant.Content != "" || len(assistant.ToolCalls) != 1 || assistant.ToolCalls[0].Canonical != "choir.fs.read" || assistant.ToolCalls[0].Arguments != `{"path":"a"}` {
		t.Errorf("assistant message = %+v", assistant)
	}
	if last := r.Last(); last.Role != "tool" || last.ToolCallID != "c1" || last.Content != `{"status":"success"}` {
		t.Errorf("Last() = %+v", last)
	}
	b.rec.wantErrors(t)
}

func TestErrorReplies(t *testing.T) {
	t.Parallel()

	t.Run("RateLimitedWithRetryAfter", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.RateLimited("3"))
		res, data := b.mustPost(t, simpleBody)
		if res.StatusCode != 429 || res.Header.Get("Retry-After") != "3" || res.Header.Get("Content-Type") != "application/json" ||
			!strings.Contains(string(data), `"type":"rate_limit_error"`) {
			t.Errorf("status %d, header %v, body %s", res.StatusCode, res.Header, data)
		}
	})

	t.Run("RateLimitedWithoutRetryAfter", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.RateLimited(""))
		res, _ := b.mustPost(t, simpleBody)
		if _, ok := res.Header["Retry-After"]; res.StatusCode != 429 || ok {
			t.Errorf("status %d, header %v", res.StatusCode, res.Header)
		}
	})

	t.Run("ServerError", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.ServerError(503, "overloaded"), llmtest.ServerError(502, ""))
		res, data := b.mustPost(t, simpleBody)
		if res.StatusCode != 503 || !strings.Contains(string(data), `"message":"overloaded"`) || !strings.Contains(string(data), `"type":"server_error"`) {
			t.Errorf("status %d, body %s", res.StatusCode, data)
		}
		res, data = b.mustPost(t, simpleBody)
		if res.StatusCode != 502 || !strings.Contains(string(data), `"message":"Bad Gateway"`) {
			t.Errorf("status %d, body %s", res.StatusCode, data)
		}
	})

	t.Run("Malformed", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Malformed(`{"choices": [`))
		res, data := b.mustPost(t, simpleBody)
		if res.StatusCode != 200 || res.Header.Get("Content-Type") != "application/json" || string(data) != `{"choices": [` {
			t.Errorf("status %d, header %v, body %s", res.StatusCode, res.Header, data)
		}
	})

	t.Run("Raw", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Raw(502, http.Header{"Content-Type": {"text/html"}, "X-Extra": {"1"}}, "<html>"))
		res, data := b.mustPost(t, simpleBody)
		if res.StatusCode != 502 || res.Header.Get("Content-Type") != "text/html" || res.Header.Get("X-Extra") != "1" || string(data) != "<html>" {
			t.Errorf("status %d, header %v, body %s", res.StatusCode, res.Header, data)
		}
	})
}

func TestHangAndDelay(t *testing.T) {
	t.Parallel()

	t.Run("HangUntilClientGivesUp", func(t *testing.T) {
		t.Parallel()

		// The client gives up once the request has arrived, so that the test
		// does not depend on how fast a loaded machine delivers it.
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		b := setup(t, llmtest.Hang().Expect(func(testing.TB, *llmtest.Request) { cancel() }))
		if _, _, err := b.post(ctx, simpleBody); err == nil {
			t.Fatal("a hung request returned")
		}
		b.rec.wantErrors(t)
	})

	t.Run("HangReleasedWhenServerCloses", func(t *testing.T) {
		t.Parallel()

		done := make(chan struct{})
		t.Run("Inner", func(t *testing.T) {
			b := setup(t, llmtest.Hang())
			go func() {
				defer close(done)
				b.post(context.Background(), simpleBody)
			}()
			for len(b.srv.Requests()) == 0 {
				time.Sleep(time.Millisecond)
			}
			// Returning runs the cleanup, which must not wait for the
			// hung request forever.
		})
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the hung request outlived the server")
		}
	})

	t.Run("After", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("late").After(20*time.Millisecond))
		start := time.Now()
		c := b.complete(t, simpleBody)
		if *c.Choices[0].Message.Content != "late" || time.Since(start) < 20*time.Millisecond {
			t.Errorf("completion %+v after %s", c, time.Since(start))
		}
	})
}

func TestScript(t *testing.T) {
	t.Parallel()

	t.Run("StepsInOrder", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("one"), llmtest.Text("two"))
		b.srv.Add(llmtest.Text("three"))
		for _, want := range []string{"one", "two", "three"} {
			if c := b.complete(t, simpleBody); *c.Choices[0].Message.Content != want {
				t.Errorf("content = %q, want %q", *c.Choices[0].Message.Content, want)
			}
		}
		b.srv.Done()
		b.rec.wantErrors(t)
	})

	t.Run("UnexpectedExtraRequest", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("only"))
		b.mustPost(t, simpleBody)
		res, _ := b.mustPost(t, simpleBody)
		if res.StatusCode != 500 {
			t.Errorf("status %d, want 500", res.StatusCode)
		}
		b.rec.wantErrors(t, "unexpected request 2")
		if n := len(b.srv.Requests()); n != 2 {
			t.Errorf("%d requests recorded", n)
		}
	})

	t.Run("StepsLeftOver", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("one"), llmtest.Text("two"), llmtest.Text("three"))
		b.mustPost(t, simpleBody)
		b.srv.Done()
		b.srv.Done() // reports once
		b.rec.wantErrors(t, "2 of 3 steps never requested (next is step 2)")
	})

	t.Run("CheckFatalAbortsStep", func(t *testing.T) {
		t.Parallel()

		ran := false
		b := setup(t, llmtest.Text("never").
			Expect(func(t testing.TB, r *llmtest.Request) { t.Fatalf("model is %s", r.Model) }).
			Expect(func(t testing.TB, r *llmtest.Request) { ran = true }),
			llmtest.Text("next"),
		)
		res, _ := b.mustPost(t, simpleBody)
		if res.StatusCode != 500 || ran {
			t.Errorf("status %d, second check ran %v", res.StatusCode, ran)
		}
		// The failing step is consumed; the script goes on.
		if c := b.complete(t, simpleBody); *c.Choices[0].Message.Content != "next" {
			t.Errorf("content = %q", *c.Choices[0].Message.Content)
		}
		b.rec.wantErrors(t, "model is m")
	})

	t.Run("CheckErrorStillReplies", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("fine").Expect(func(t testing.TB, r *llmtest.Request) { t.Errorf("noted") }))
		b.complete(t, simpleBody)
		b.rec.wantErrors(t, "noted")
	})

	t.Run("ConcurrentRequests", func(t *testing.T) {
		t.Parallel()

		const n = 16
		var steps []llmtest.Step
		for i := range n {
			steps = append(steps, llmtest.Text(fmt.Sprint(i)))
		}
		b := setup(t, steps...)
		var wg sync.WaitGroup
		var mu sync.Mutex
		got := map[string]bool{}
		for range n {
			wg.Go(func() {
				res, data, err := b.post(t.Context(), simpleBody)
				if err != nil || res.StatusCode != 200 {
					t.Errorf("post: %v", err)
					return
				}
				var c completion
				json.Unmarshal(data, &c)
				mu.Lock()
				got[*c.Choices[0].Message.Content] = true
				mu.Unlock()
			})
		}
		wg.Wait()
		if len(got) != n || len(b.srv.Requests()) != n {
			t.Errorf("%d distinct replies, %d requests; want %d", len(got), len(b.srv.Requests()), n)
		}
		b.srv.Done()
		b.rec.wantErrors(t)
	})
}

func TestWrongEndpoint(t *testing.T) {
	t.Parallel()

	t.Run("Path", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("x"))
		res, err := b.client.Post(strings.TrimSuffix(b.srv.BaseURL(), "/v1")+"/chat/completions", "application/json", strings.NewReader(simpleBody))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 404 {
			t.Errorf("status %d", res.StatusCode)
		}
		b.srv.Done()
		b.rec.wantErrors(t, "the endpoint to configure is "+b.srv.BaseURL(), "1 of 1 steps never requested")
	})

	t.Run("Method", func(t *testing.T) {
		t.Parallel()

		b := setup(t)
		res, err := b.client.Get(b.srv.BaseURL() + "/chat/completions")
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 405 {
			t.Errorf("status %d", res.StatusCode)
		}
		b.rec.wantErrors(t, "chat completions take POST")
	})
}

func TestBuiltinChecks(t *testing.T) {
	t.Parallel()

	const goodTool = `{"type":"function","function":{"name":"choir__fs__read","description":"Read.","parameters":{"type":"object","properties":{"path":{"type":"string"}}}}}`
	body := func(messages, tools string) string {
		s := `{"model":"m","messages":[` + messages + `]`
		if tools != "" {
			s += `,"tools":[` + tools + `]`
		}
		return s + "}"
	}
	const (
		sys  = `{"role":"system","content":"You are Choir."}`
		user = `{"role":"user","content":"hi"}`
	)
	call := func(ids ...string) string {
		var calls []string
		for _, id := range ids {
			calls = append(calls, `{"id":"`+id+`","type":"function","function":{"name":"choir__fs__read","arguments":"{}"}}`)
		}
		return `{"role":"assistant","content":null,"tool_calls":[` + strings.Join(calls, ",") + `]}`
	}
	result := func(id, content string) string {
		c, _ := json.Marshal(content)
		return `{"role":"tool","tool_call_id":"` + id + `","content":` + string(c) + `}`
	}

	tests := []struct {
		name  string
		body  string
		setup func(*llmtest.Server)
		want  []string
	}{
		{name: "CleanConversation", body: body(strings.Join([]string{sys, user, call("a", "b"), result("a", `{"status":"success"}`), result("b", "plain text"), user}, ","), goodTool)},
		{
			name: "LocksInSchema",
			body: body(sys+","+user, `{"type":"function","function":{"name":"choir__fs__read","parameters":{"type":"object","locks":[{"resource":"workspace","mode":"X"}]}}}`),
			want: []string{"runtime metadata leaked into tool choir__fs__read: tools[0].function.parameters.locks"},
		},
		{
			name: "RuntimeViewBesideFunction",
			body: body(sys+","+user, `{"type":"function","function":{"name":"choir__exec","parameters":{"type":"object"}},"runtime":{"exec_path":"/x","timeout_ms":5}}`),
			want: []string{"choir__exec: tools[0].runtime", "tools[0].runtime.exec_path", "tools[0].runtime.timeout_ms"},
		},
		{
			// An input field may share a name with runtime metadata
			// (choir.exec takes a timeout_ms): field names are not leaks.
			name: "ParameterNamedLikeRuntimeKeyIsAnInputField",
			body: body(sys+","+user, `{"type":"function","function":{"name":"choir__exec","parameters":{"type":"object","properties":{"timeout_ms":{"type":"integer"}}}}}`),
		},
		{
			name: "MetadataInsideAPropertySchemaIsALeak",
			body: body(sys+","+user, `{"type":"function","function":{"name":"choir__exec","parameters":{"type":"object","properties":{"path":{"type":"string","locks":["file:x:S"]}}}}}`),
			want: []string{"tools[0].function.parameters.properties.path.locks"},
		},
		{
			name: "OutputTagsInToolResult",
			body: body(strings.Join([]string{sys, user, call("a"), result("a", `{"status":"success","exposure":"edge","prompt_mask":true}`)}, ","), goodTool),
			want: []string{`tool result message 3: key "prompt_mask"`, `tool result message 3: key "exposure"`},
		},
		{
			name: "NestedKeyInToolResultIsContent",
			body: body(strings.Join([]string{sys, user, call("a"), result("a", `{"status":"success","content":"{\"locks\":[]}","data":{"locks":1}}`)}, ","), goodTool),
		},
		{
			name: "SchemaPastedIntoSystemPrompt",
			body: body(`{"role":"system","content":"Tools: {\"name\":\"choir.fs.read\",\"parameters\":{\"type\":\"object\",\"properties\":{}}}"}`+","+user, goodTool),
			want: []string{`system message 0 contains "properties"`, `system message 0 contains "parameters"`},
		},
		{
			name:  "CustomMarkers",
			body:  body(`{"role":"system","content":"TOOLS: read"}`+","+user, goodTool),
			setup: func(s *llmtest.Server) { s.SetSchemaMarkers("TOOLS:") },
			want:  []string{"system message 0 contains TOOLS:"},
		},
		{
			name: "DottedToolName",
			body: body(sys+","+user, `{"type":"function","function":{"name":"choir.fs.read","parameters":{"type":"object"}}}`),
			want: []string{`tool 0 name "choir.fs.read" does not match`},
		},
		{
			name: "LongToolName",
			body: body(sys+","+user, `{"type":"function","function":{"name":"`+strings.Repeat("a", 65)+`","parameters":{"type":"object"}}}`),
			want: []string{"does not match"},
		},
		{
			name: "DuplicateTool",
			body: body(sys+","+user, goodTool+","+goodTool),
			want: []string{`tool "choir__fs__read" offered twice`},
		},
		{
			name: "NotAFunctionTool",
			body: body(sys+","+user, `{"type":"custom","custom":{"name":"x"}}`),
			want: []string{`tool 0 has type "custom"`, `tool 0 name "" does not match`},
		},
		{
			name: "ResultWithoutCall",
			body: body(strings.Join([]string{sys, user, result("ghost", "x")}, ","), goodTool),
			want: []string{`tool result for "ghost", which no preceding assistant message called`},
		},
		{
			name: "CallWithoutResult",
			body: body(strings.Join([]string{sys, user, call("a", "b"), result("a", "x")}, ","), goodTool),
			want: []string{"conversation ends before results for tool calls b"},
		},
		{
			name: "UserBeforeResults",
			body: body(strings.Join([]string{sys, user, call("a"), user, result("a", "x")}, ","), goodTool),
			want: []string{"message 3 (user) comes before results for tool calls a", `tool result for "a"`},
		},
		{
			name: "ReplayedDottedCall",
			body: body(strings.Join([]string{sys, user, `{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"choir.fs.read","arguments":"{}"}}]}`, result("a", "x")}, ","), goodTool),
			want: []string{`replays a tool call named "choir.fs.read"`},
		},
		{
			name: "UnknownRole",
			body: body(sys+`,{"role":"developer","content":"x"}`, ""),
			want: []string{`message 1 has role "developer"`},
		},
		{
			name: "NoModelNoMessages",
			body: `{"messages":[]}`,
			want: []string{"no model", "no messages"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()

			b := setup(t, llmtest.Text("ok"))
			if tt.setup != nil {
				tt.setup(b.srv)
			}
			res, data := b.mustPost(t, tt.body)
			if res.StatusCode != 200 {
				t.Errorf("status %d: %s", res.StatusCode, data)
			}
			b.rec.wantErrors(t, tt.want...)
		})
	}

	t.Run("BodyNotJSON", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("ok"))
		res, _ := b.mustPost(t, `{"model":`)
		if res.StatusCode != 400 {
			t.Errorf("status %d", res.StatusCode)
		}
		b.rec.wantErrors(t, "request 1: body is not a JSON object")
	})

	t.Run("WrongContentType", func(t *testing.T) {
		t.Parallel()

		b := setup(t, llmtest.Text("ok"))
		res, err := b.client.Post(b.srv.BaseURL()+"/chat/completions", "text/plain", strings.NewReader(simpleBody))
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		b.rec.wantErrors(t, `Content-Type is "text/plain"`)
	})
}

func TestModel(t *testing.T) {
	t.Parallel()

	b := setup(t)
	m := b.srv.Model()
	if m.Endpoint != b.srv.BaseURL() || !strings.HasSuffix(m.Endpoint, "/v1") || m.Model != llmtest.DefaultModel ||
		m.Temperature != nil || m.ReasoningEffort != nil || m.APIKey != "" {
		t.Errorf("Model() = %+v", m)
	}
}

// TestServerListsItsModel answers GET /v1/models as the OpenAI API does,
// with the server's one model, and fails no test for it.
func TestServerListsItsModel(t *testing.T) {
	srv := llmtest.NewServer(t)
	resp, err := http.Get(srv.BaseURL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var list struct {
		Object string `json:"object"`
		Data   []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&list); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /v1/models: %d, %v", resp.StatusCode, err)
	}
	if list.Object != "list" || len(list.Data) != 1 || list.Data[0].ID != llmtest.DefaultModel {
		t.Fatalf("models = %+v", list)
	}
}
