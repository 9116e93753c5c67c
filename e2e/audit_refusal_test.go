package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/rpc"
)

// TestRefusedToolCallIsAudited has the model try to read a file outside
// the workspace and checks that the arbiter's refusal reaches
// choir_audit.tool_calls, with its reason, for an auditor to see.
func TestRefusedToolCallIsAudited(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{ID: "escape-1", Name: "choir.fs.read", Arguments: `{"path":"../../../etc/passwd"}`}),
		llmtest.Text("I may not read that file."),
		summaryStep(),
	)
	d, home := choird(t, srv)
	sessionID := startAgent(t, d, home)
	if _, err := d.Push(sessionID, rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: 1,
		Gateway: "console", ChatID: "operator", UserID: "operator", Text: "show me /etc/passwd", ReceivedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	var tool, outcome, reason string
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// The replicated log, to show what the agent did instead.
		rows, err := d.Pool().Query(context.Background(),
			"SELECT rev, event_type, payload::text FROM choir_control.session_events WHERE session_id = $1 ORDER BY rev", sessionID)
		if err != nil {
			return
		}
		for rows.Next() {
			var rev int64
			var typ, payload string
			rows.Scan(&rev, &typ, &payload)
			t.Logf("%d %s %s", rev, typ, payload)
		}
		rows.Close()
	})
	waitFor(t, "the refused call in choir_audit.tool_calls", func() bool {
		d.Pool().QueryRow(ctx, `SELECT tool, outcome, coalesce(error, '') FROM choir_audit.tool_calls
		                         WHERE session_id = $1 AND call_id LIKE '%escape-1'`, sessionID).Scan(&tool, &outcome, &reason)
		return outcome != ""
	})
	if tool != "choir.fs.read" || outcome != "rejected" || !strings.HasPrefix(reason, "path_escape: ") {
		t.Errorf("audited refusal: tool %q, outcome %q, error %q; want choir.fs.read, rejected, path_escape: ...", tool, outcome, reason)
	}
}
