package core

import (
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llm"
)

// TestPairCalls checks the repair of a laid-out window: a call whose
// result is missing is answered before anything follows its step, and a
// result whose call a compaction folded is kept as a note.
func TestPairCalls(t *testing.T) {
	t.Parallel()
	call := func(ids ...string) llm.Message {
		var calls []llm.ToolCall
		for _, id := range ids {
			calls = append(calls, llm.ToolCall{ID: id, Name: "choir.fs.read", Arguments: []byte(`{}`)})
		}
		return llm.AssistantMessage("", calls...)
	}
	res := func(id string) llm.Message { return llm.ToolResultMessage(id, `{"status":"success"}`) }
	sum := llm.SystemMessage("Reference summary of earlier events")
	note := llm.UserMessage("The agent restarted")
	for _, tc := range []struct {
		name string
		in   []llm.Message
		want string // roles and call IDs, in order
	}{
		{"WholeStepsAreKept", []llm.Message{sum, call("a", "b"), res("b"), res("a"), llm.AssistantMessage("done")},
			"system assistant(a,b) tool(b) tool(a) assistant"},
		{"AMissingResultIsAnsweredBeforeWhatFollows", []llm.Message{call("a", "b"), res("a"), note},
			"assistant(a,b) tool(a) tool(b)! user"},
		{"AMissingResultAtTheEndIsAnswered", []llm.Message{call("a")}, "assistant(a) tool(a)!"},
		{"AResultWhoseCallWasFoldedIsANote", []llm.Message{sum, res("a"), call("b"), res("b")},
			"system assistant[a] assistant(b) tool(b)"},
		{"AResultAnsweredTwiceIsANote", []llm.Message{call("a"), res("a"), res("a")}, "assistant(a) tool(a) assistant[a]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, m := range pairCalls(tc.in) {
				s := string(m.Role)
				switch {
				case len(m.ToolCalls) > 0:
					var ids []string
					for _, c := range m.ToolCalls {
						ids = append(ids, c.ID)
					}
					s += "(" + strings.Join(ids, ",") + ")"
				case m.Role == llm.RoleTool:
					s += "(" + m.ToolCallID + ")"
					if m.Content == noResult {
						s += "!"
					}
				case strings.HasPrefix(m.Content, "[the result of my earlier tool call "):
					id, _, _ := strings.Cut(strings.TrimPrefix(m.Content, "[the result of my earlier tool call "), ",")
					s += "[" + id + "]"
				}
				got = append(got, s)
			}
			if g := strings.Join(got, " "); g != tc.want {
				t.Errorf("got  %s\nwant %s", g, tc.want)
			}
		})
	}
}
