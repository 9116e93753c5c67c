package agent

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/logbuf"
)

// TestToolSearchThroughChoird: the discovery tools' semantic search goes
// to choird through EXECUTE_HOST_TOOL; the first search of an image finds
// no index, sends the corpus, and finds the tool by a paraphrase of its
// description.
func TestToolSearchThroughChoird(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	d := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL()})
	logs := &logbuf.Buffer{}
	s, _ := openAgent(t, d, logs)
	ctx := context.Background()
	for range 2 { // the second search finds the index the first built
		names, err := s.toolSearch(ctx, "show the lines of a text file", 5)
		if err != nil || !slices.Contains(names, "choir.fs.read") {
			t.Fatalf("tool search = %v, %v; want choir.fs.read", names, err)
		}
	}
}

// TestMCPServerFailingToStartStopsTheAgent: a declared MCP server that
// cannot start fails the session's start, naming the server.
func TestMCPServerFailingToStartStopsTheAgent(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	d := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL()})
	dir := t.TempDir()
	manifest := `{"servers": {"files": {"command": "` + filepath.Join(dir, "missing-server") + `"}}}`
	if err := os.WriteFile(filepath.Join(dir, "mcp.json"), []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	id, token := d.StartSession(t, "assistant")
	s, err := openSession(context.Background(), Options{Socket: d.Socket(), AgentID: "assistant", SessionID: id,
		LeaseToken: token, Workspace: d.Workspace("main"), ChoirDir: dir})
	if err == nil {
		s.close()
		t.Fatal("the agent started without its MCP server")
	}
	if !strings.Contains(err.Error(), `MCP server "files"`) {
		t.Fatalf("err = %v, want the server named", err)
	}
}

// TestMCPServerUnavailableTellsTheUserOnce: when a server stops for good,
// the user gets one message saying so, straight from the agent, however
// often the notice comes; the model is told as well.
func TestMCPServerUnavailableTellsTheUserOnce(t *testing.T) {
	t.Parallel()
	b := setupSession(t, llmtest.NewServer(t))
	b.s.mcpUnavailable("files", errors.New("exit status 2"))
	b.s.mcpUnavailable("files", errors.New("exit status 2"))
	pool := b.d.Pool()
	var texts []string
	b.waitFor(t, "the notice in the outbox", func() bool {
		texts = nil
		rows, err := pool.Query(context.Background(), `SELECT text FROM choir_control.outbox WHERE session_id = $1`, b.sessionID)
		if err != nil {
			return false
		}
		defer rows.Close()
		for rows.Next() {
			var s string
			rows.Scan(&s)
			texts = append(texts, s)
		}
		return len(texts) > 0
	})
	// Both notices carry the same message ID, which the outbox keeps once.
	var n int
	pool.QueryRow(context.Background(), `SELECT count(*) FROM choir_control.outbox WHERE session_id = $1`, b.sessionID).Scan(&n)
	if n != 1 || !strings.Contains(texts[0], "MCP server files are unavailable") || !strings.Contains(texts[0], "exit status 2") {
		t.Fatalf("outbox = %d rows, first %q; want one notice naming the server and why", n, texts[0])
	}
}
