package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/agent"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/rpc"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// choird starts choird on a fresh database, its model pointing at srv.
func choird(t *testing.T, srv *llmtest.Server) (*daemon.Daemon, string) {
	t.Helper()
	pc, err := pgx.ParseConfig(dbtest.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cfg, secrets := config.Local(home, config.Postgres{Host: pc.Host, Port: int(pc.Port), Database: pc.Database})
	m := cfg.Models["local"]
	m.Endpoint = srv.BaseURL()
	cfg.Models["local"] = m
	cfg.HeartbeatIntervalMS = 100
	cfg.CrashDetectionThresholdMS = 5000
	if err := config.WriteFiles(home, cfg, secrets, false); err != nil {
		t.Fatal(err)
	}
	for _, ws := range cfg.Workspaces {
		os.MkdirAll(ws.Path, 0o755)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *daemon.Daemon, 1)
	done := make(chan error, 1)
	logs := &syncBuffer{}
	go func() {
		done <- daemon.Run(ctx, daemon.Options{Home: home, Stderr: logs, Ready: func(d *daemon.Daemon) { ready <- d }})
	}()
	select {
	case d := <-ready:
		t.Cleanup(func() { cancel(); <-done })
		return d, home
	case err := <-done:
		cancel()
		t.Fatalf("choird: %v\n%s", err, logs.String())
	case <-time.After(time.Minute):
		cancel()
		t.Fatal("choird not ready")
	}
	return nil, ""
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
	)
	d, home := choird(t, srv)
	sessionID, token, err := d.StartSession(ctx, "assistant", daemon.StartOverrides{}, "process")
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
	var chunkJobs int
	pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'memory_chunk_session' AND args->>'session_id' = $1`,
		sessionID).Scan(&chunkJobs)
	if chunkJobs != 1 {
		t.Errorf("%d chunking jobs enqueued with the session's end, want 1", chunkJobs)
	}
	srv.Done()
}
