package llmtest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"time"
)

// Stream reports whether the request asked for a streamed answer
// ("stream": true).
func (r *Request) Stream() bool {
	var on bool
	return json.Unmarshal(r.Fields["stream"], &on) == nil && on
}

// StreamUsage reports whether a streamed request asked for its usage
// (stream_options.include_usage).
func (r *Request) StreamUsage() bool {
	var o struct {
		IncludeUsage bool `json:"include_usage"`
	}
	return json.Unmarshal(r.Fields["stream_options"], &o) == nil && o.IncludeUsage
}

// writeStream answers a streamed request as OpenAI's chat completions
// API does: server-sent events of chat.completion.chunk objects, the
// role first, then the content in pieces and the tool calls, then the
// finish reason; when the request asked for it, a last chunk with no
// choices carries the usage; then "data: [DONE]". Each event is flushed
// as it is written, so a client sees the first token before the rest.
func writeStream(w http.ResponseWriter, id, model string, content *string, calls []any, finish string, u wireUsage, withUsage bool) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	created := time.Now().Unix()
	send := func(choices []any, usage *wireUsage) {
		chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": model, "choices": choices}
		if usage != nil {
			chunk["usage"] = usage
		}
		b, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", b)
		if flusher != nil {
			flusher.Flush()
		}
	}
	delta := func(d map[string]any, finish any) []any {
		return []any{map[string]any{"index": 0, "delta": d, "finish_reason": finish, "logprobs": nil}}
	}
	send(delta(map[string]any{"role": "assistant", "content": ""}, nil), nil)
	if content != nil {
		for _, piece := range pieces(*content, 4) {
			send(delta(map[string]any{"content": piece}, nil), nil)
		}
	}
	for i, c := range calls {
		raw, _ := json.Marshal(c)
		var call map[string]any
		json.Unmarshal(raw, &call) //nolint:errcheck // marshaled above
		call["index"] = i
		send(delta(map[string]any{"tool_calls": []any{call}}, nil), nil)
	}
	send(delta(map[string]any{}, finish), nil)
	if withUsage {
		send([]any{}, &u)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

// pieces splits s into at most n pieces on rune boundaries.
func pieces(s string, n int) []string {
	r := []rune(s)
	if len(r) == 0 {
		return nil
	}
	size := max(1, (len(r)+n-1)/n)
	var out []string
	for i := 0; i < len(r); i += size {
		out = append(out, string(r[i:min(i+size, len(r))]))
	}
	return out
}
