package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/ctl"
)

// TestChat talks to an agent with choirctl chat: the message goes through
// the inbox like a DM's, the agent calls a tool and replies, and the reply
// comes back from the outbox; the inbox row is marked delivered once the
// agent's log holds the message.
func TestChat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.write", Arguments: `{"path":"chat.txt","content":"from chat\n"}`}),
		llmtest.Text("Saved to chat.txt."),
		summaryStep(),
	)
	d, home := choird(t, srv)
	startAgent(t, d, home)

	var out, errb bytes.Buffer
	code := ctl.Run(ctx, []string{"--home", home, "chat", "assistant", "-m", "save 'from chat' to chat.txt", "--quiet", "500ms"}, &out, &errb)
	if code != 0 {
		t.Fatalf("choirctl chat exit %d: %s", code, errb.String())
	}
	if got := strings.TrimSpace(out.String()); got != "assistant: Saved to chat.txt." {
		t.Errorf("chat printed %q", got)
	}
	if b, err := os.ReadFile(filepath.Join(home, "workspaces", "main", "chat.txt")); err != nil || string(b) != "from chat\n" {
		t.Errorf("chat.txt = %q, %v", b, err)
	}
	var delivered bool
	waitFor(t, "the inbox row marked delivered", func() bool {
		d.Pool().QueryRow(ctx, `SELECT delivered_at IS NOT NULL FROM choir_control.inbox WHERE gateway = 'choirctl'`).Scan(&delivered)
		return delivered
	})

	// Another agent's conversation is refused for an unknown agent.
	out.Reset()
	errb.Reset()
	if code := ctl.Run(ctx, []string{"--home", home, "chat", "nobody", "-m", "hi"}, &out, &errb); code == 0 ||
		!strings.Contains(errb.String(), "nobody") {
		t.Errorf("chat with an unknown agent: exit %d, %q", code, errb.String())
	}
}

// TestSendFile has the agent write a file to .choirtmp/send and send it
// with choir.send.file: choird queues it as a document in the outbox,
// delivers it (the console channel only marks it sent) and deletes it; a
// file outside .choirtmp/send is refused to the model with the reason.
func TestSendFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.write", Arguments: `{"path":".choirtmp/send/report.txt","content":"quarterly\n"}`}),
		llmtest.ToolCalls(llmtest.Call{ID: "2", Name: "choir.send.file", Arguments: `{"path":"report.txt","caption":"the report"}`}),
		llmtest.ToolCalls(llmtest.Call{ID: "3", Name: "choir.send.file", Arguments: `{"path":"../../etc/passwd"}`}),
		llmtest.Text("Sent."),
		summaryStep(),
	)
	d, home := choird(t, srv)
	startAgent(t, d, home)

	var out, errb bytes.Buffer
	if code := ctl.Run(ctx, []string{"--home", home, "chat", "assistant", "-m", "send me the report", "--quiet", "1s", "--json"},
		&out, &errb); code != 0 {
		t.Fatalf("choirctl chat exit %d: %s", code, errb.String())
	}
	for _, want := range []string{`"kind": "document"`, `"text": "the report"`, `"text": "Sent."`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("chat output lacks %s:\n%s", want, out.String())
		}
	}
	file := filepath.Join(home, "workspaces", "main", ".choirtmp", "send", "report.txt")
	var status string
	waitFor(t, "the file delivered", func() bool {
		d.Pool().QueryRow(ctx, `SELECT status FROM choir_control.outbox WHERE kind = 'document'`).Scan(&status)
		return status == "sent"
	})
	waitFor(t, "the delivered file removed", func() bool {
		_, err := os.Stat(file)
		return os.IsNotExist(err)
	})
	if got := srv.Requests(); len(got) < 4 || !strings.Contains(lastToolContent(t, got[3]), "not a path inside") {
		t.Errorf("escaping path: the model was told %q", lastToolContent(t, got[3]))
	}
}
