package e2e

import (
	"context"
	"github.com/choirhq/choir/rpc/admin"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
)

// choird starts choird on a fresh database, its model pointing at srv.
func choird(t *testing.T, srv *llmtest.Server) (*daemon.Daemon, string) {
	t.Helper()
	return choirdWith(t, srv, nil)
}

// choirdWith is choird with edit applied to the configuration and the
// secrets before they are written.
func choirdWith(t *testing.T, srv *llmtest.Server, edit func(*config.Config, config.Secrets)) (*daemon.Daemon, string) {
	t.Helper()
	c := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL(), FastHeartbeat: true, Edit: edit})
	return c.Daemon, c.Home
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	choirdtest.WaitFor(t, what, nil, cond)
}

// TestAgentConversation runs the whole chain in process: a user message
// pushed by choird, the edge lane calling the scripted model, a tool call
// through the arbiter, the reply in the outbox, the log replicated to
// Postgres and visible in the audit views, and a graceful stop.
func TestAgentConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.write", Arguments: `{"path":"todo.txt","content":"buy milk\n"}`}),
		llmtest.Text("Written to todo.txt."),
		summaryStep(),
	)
	d, home := choird(t, srv)
	sessionID, token, err := d.StartSession(ctx, "assistant", admin.StartOverrides{}, session.RuntimeInProcess)
	if err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(home, "workspaces", "main")
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() {
		agentDone <- agent.Run(agentCtx, agent.Options{Socket: daemon.AgentSocketPath(home), AgentID: "assistant",
			SessionID: sessionID, LeaseToken: token, Workspace: ws, ChoirDir: t.TempDir()})
	}()

	pool := d.Pool()
	var hello bool
	waitFor(t, "the agent's hello", func() bool {
		pool.QueryRow(ctx, "SELECT hello_at IS NOT NULL FROM choir_control.sessions WHERE session_id = $1", sessionID).Scan(&hello)
		return hello
	})
	// The push stream may attach a moment after the hello; pushes wait
	// for it in choird's buffer either way.
	if _, err := d.Push(sessionID, rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: 1,
		Gateway: "console", ChatID: "operator", UserID: "operator", Text: "note: buy milk", ReceivedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}

	var reply string
	waitFor(t, "the reply in the outbox", func() bool {
		pool.QueryRow(ctx, "SELECT text FROM choir_control.outbox WHERE session_id = $1", sessionID).Scan(&reply)
		return reply != ""
	})
	if reply != "Written to todo.txt." {
		t.Errorf("reply = %q", reply)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "todo.txt")); err != nil || string(b) != "buy milk\n" {
		t.Errorf("todo.txt = %q, %v", b, err)
	}
	var tool, outcome string
	waitFor(t, "the tool call in the audit view", func() bool {
		pool.QueryRow(ctx, "SELECT tool, outcome FROM choir_audit.tool_calls WHERE session_id = $1", sessionID).Scan(&tool, &outcome)
		return outcome == "success"
	})
	if tool != "choir.fs.write" {
		t.Errorf("audited tool = %q", tool)
	}

	stopAgent()
	if err := <-agentDone; err != nil {
		t.Fatalf("agent: %v", err)
	}
	var status string
	var acked, stored int64
	pool.QueryRow(ctx, "SELECT status, acked_rev FROM choir_control.sessions WHERE session_id = $1", sessionID).Scan(&status, &acked)
	pool.QueryRow(ctx, "SELECT count(*) FROM choir_control.session_events WHERE session_id = $1", sessionID).Scan(&stored)
	if status != "ended" || acked == 0 || stored != acked {
		t.Errorf("after stop: status %s, acked %d, stored %d", status, acked, stored)
	}
	var breaks int
	pool.QueryRow(ctx, "SELECT count(*) FROM choir_audit.chain_breaks").Scan(&breaks)
	if breaks != 0 {
		t.Errorf("%d chain breaks in the replicated log", breaks)
	}
	var chunkJobs int
	pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'memory_chunk_session' AND args->>'session_id' = $1`,
		sessionID).Scan(&chunkJobs)
	if chunkJobs != 1 {
		t.Errorf("%d chunking jobs enqueued with the session's end, want 1", chunkJobs)
	}
	srv.Done()
}

// startAgent runs an agent for a fresh session of "assistant" until the
// test ends.
func startAgent(t *testing.T, d *daemon.Daemon, home string) string {
	t.Helper()
	return startAgentWith(t, d, home, agent.Options{ChoirDir: t.TempDir()})
}

// startAgentWith is startAgent with o's choir directory and logger (the
// session's own fields are filled in).
func startAgentWith(t *testing.T, d *daemon.Daemon, home string, o agent.Options) string {
	t.Helper()
	sessionID, token, err := d.StartSession(context.Background(), "assistant", admin.StartOverrides{}, session.RuntimeInProcess)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		o.Socket, o.AgentID, o.SessionID, o.LeaseToken = daemon.AgentSocketPath(home), "assistant", sessionID, token
		o.Workspace = filepath.Join(home, "workspaces", "main")
		done <- agent.Run(ctx, o)
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	})
	var hello bool
	waitFor(t, "the agent's hello", func() bool {
		d.Pool().QueryRow(context.Background(), "SELECT hello_at IS NOT NULL FROM choir_control.sessions WHERE session_id = $1",
			sessionID).Scan(&hello)
		return hello
	})
	return sessionID
}

func lastToolContent(t testing.TB, r *llmtest.Request) string {
	t.Helper()
	if m := r.Last(); m.Role == "tool" {
		return m.Content
	}
	t.Fatalf("last message is not a tool result: %+v", r.Last())
	return ""
}

// TestAgentMemory drives the memory tools end to end: a knowledge upsert
// and query through EXECUTE_HOST_TOOL into the agent's own schema, and a
// working-memory query answered by the agent's log.
func TestAgentMemory(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.memory.upsert",
			Arguments: `{"op":"insert","key":"user.pet","text":"The user's dog is called Biscuit."}`}),
		llmtest.ToolCalls(llmtest.Call{ID: "2", Name: "choir.memory.query",
			Arguments: `{"store":"knowledge","mode":"text","query":"dog"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolContent(t, r); !strings.Contains(c, `"success"`) || !strings.Contains(c, "inserted") {
					t.Errorf("upsert result = %s", c)
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "3", Name: "choir.memory.query",
			Arguments: `{"store":"working","mode":"keyword","query":"biscuit"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolContent(t, r); !strings.Contains(c, "Biscuit") {
					t.Errorf("knowledge query result = %s", c)
				}
			}),
		llmtest.Text("Noted: Biscuit.").
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolContent(t, r); !strings.Contains(c, `"count":`) || strings.Contains(c, `"count":0`) {
					t.Errorf("working query result = %s", c)
				}
			}),
		summaryStep(),
	)
	d, home := choird(t, srv)
	sessionID := startAgent(t, d, home)
	if _, err := d.Push(sessionID, rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: 7,
		Gateway: "console", ChatID: "operator", UserID: "operator", Text: "remember my dog is Biscuit", ReceivedAt: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	var reply string
	waitFor(t, "the reply", func() bool {
		d.Pool().QueryRow(context.Background(), "SELECT text FROM choir_control.outbox WHERE session_id = $1", sessionID).Scan(&reply)
		return reply != ""
	})
	var text string
	if err := d.Pool().QueryRow(context.Background(), "SELECT text FROM choir_assistant.knowledge_documents WHERE key = 'user.pet'").Scan(&text); err != nil || !strings.Contains(text, "Biscuit") {
		t.Fatalf("knowledge row = %q, %v", text, err)
	}
	// srv checks at cleanup, after the agent's stop has asked for the
	// session summary.
}

// summaryStep answers the session summary an agent writes at its graceful
// stop (spec 17.2).
func summaryStep() llmtest.Step {
	return llmtest.Text("The user and the agent talked; nothing is pending.")
}
