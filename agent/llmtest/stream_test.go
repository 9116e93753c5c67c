package llmtest_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
)

// TestStreamedAnswer asks for a streamed answer: the content arrives in
// chat.completion.chunk events, then the finish reason, then (asked for)
// a chunk with no choices and the usage, then [DONE]; without
// include_usage no usage chunk is sent.
func TestStreamedAnswer(t *testing.T) {
	t.Parallel()
	for _, withUsage := range []bool{true, false} {
		srv := llmtest.NewServer(t, llmtest.Text("hello there").WithUsage(12, 3))
		body := `{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}`
		if withUsage {
			body = strings.Replace(body, `"stream":true`, `"stream":true,"stream_options":{"include_usage":true}`, 1)
		}
		res, err := http.Post(srv.BaseURL()+"/chat/completions", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if ct := res.Header.Get("Content-Type"); ct != "text/event-stream" {
			t.Errorf("Content-Type %q", ct)
		}
		var text, finish string
		var usage *struct{ PromptTokens, CompletionTokens int64 }
		done := false
		sc := bufio.NewScanner(res.Body)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			if data == "[DONE]" {
				done = true
				continue
			}
			var chunk struct {
				Object  string
				Choices []struct {
					Delta        struct{ Content string }
					FinishReason *string `json:"finish_reason"`
				}
				Usage *struct {
					PromptTokens     int64 `json:"prompt_tokens"`
					CompletionTokens int64 `json:"completion_tokens"`
				}
			}
			if err := json.Unmarshal([]byte(data), &chunk); err != nil || chunk.Object != "chat.completion.chunk" {
				t.Fatalf("chunk %s: %v", data, err)
			}
			for _, c := range chunk.Choices {
				text += c.Delta.Content
				if c.FinishReason != nil {
					finish = *c.FinishReason
				}
			}
			if chunk.Usage != nil {
				usage = &struct{ PromptTokens, CompletionTokens int64 }{chunk.Usage.PromptTokens, chunk.Usage.CompletionTokens}
			}
		}
		res.Body.Close()
		if text != "hello there" || finish != "stop" || !done {
			t.Errorf("usage %v: text %q, finish %q, done %v", withUsage, text, finish, done)
		}
		if withUsage != (usage != nil) || usage != nil && (usage.PromptTokens != 12 || usage.CompletionTokens != 3) {
			t.Errorf("include_usage %v: usage %+v", withUsage, usage)
		}
	}
}
