package agent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/internal/choirdtest"
)

// TestToolSearchThroughChoird: the discovery tools' semantic search goes
// to choird through EXECUTE_HOST_TOOL; the first search of an image finds
// no index, sends the corpus, and finds the tool by a paraphrase of its
// description.
func TestToolSearchThroughChoird(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	d := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL()})
	logs := &choirdtest.SyncBuffer{}
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
