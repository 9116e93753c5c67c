package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/rpc"
)

// TestBilledFailureIsLogged: the model provider bills a call and answers
// it with a completion the agent cannot use. The agent's meter counts the
// usage reported, and the session logs it (llm_call_committed of purpose
// billed_failure), so that choir_audit.usage, choirctl usage and the next
// session's baseline count it too.
func TestBilledFailureIsLogged(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t,
		llmtest.Malformed(`{"model": "m", "usage": {"prompt_tokens": 7000, "completion_tokens": 900}, `+
			`"choices": [{"message": {"tool_calls": [{"id": "1", "type": "weird", "function": {"name": "x"}}]}}]}`),
		summaryStep(),
	)
	d, home := choird(t, srv)
	sessionID := startAgent(t, d, home)
	if _, err := d.Push(sessionID, rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: 7,
		Gateway: "console", ChatID: "operator", UserID: "operator", Text: "hello", ReceivedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	var tokens int64
	waitFor(t, "the billed failure in choir_audit.usage", func() bool {
		d.Pool().QueryRow(context.Background(), `SELECT coalesce(sum(units), 0) FROM choir_audit.usage
			WHERE session_id = $1 AND kind = 'llm' AND purpose = 'billed_failure'`, sessionID).Scan(&tokens)
		return tokens > 0
	})
	if tokens != 7900 {
		t.Errorf("billed failure logged with %d tokens, want the 7900 the provider reported", tokens)
	}
}
