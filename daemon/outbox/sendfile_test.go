package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/wire"
	"github.com/choirhq/choir/sql/seam"
)

// TestSendFileStaysInTheWorkspace plants, in the session's workspace, a
// link into the other configured workspace and a FIFO, and asks choird to
// send each through choir.send.file and SEND_OUTBOUND: both are refused,
// the other workspace's file is untouched, and a plain file is queued by
// its workspace's name and a path relative to it, then sent and removed.
func TestSendFileStaysInTheWorkspace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{})
	_, client, hello := d.HelloSession(t, "assistant")
	if hello.ResourceBindings.Workspace != "main" {
		t.Fatalf("session bound to workspace %q", hello.ResourceBindings.Workspace)
	}
	mainSend := filepath.Join(d.Snapshot().Config.Workspaces["main"].Path, ".choirtmp", "send")
	otherSend := filepath.Join(d.Snapshot().Config.Workspaces["other"].Path, ".choirtmp", "send")
	for _, dir := range []string{mainSend, otherSend} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	secret := filepath.Join(otherSend, "secret.txt")
	if err := os.WriteFile(secret, []byte("the other agent's file"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(d.Snapshot().Config.Workspaces["other"].Path, filepath.Join(mainSend, "sub")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(mainSend, "pipe.pdf"), 0o644); err != nil {
		t.Fatal(err)
	}

	refused := map[string]string{
		"sub/.choirtmp/send/secret.txt": "LinkIntoTheOtherWorkspace",
		"pipe.pdf":                      "FIFO",
	}
	for p, name := range refused {
		t.Run(name, func(t *testing.T) {
			in, _ := json.Marshal(map[string]string{"path": p})
			resp, err := client.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: agentapi.SendFileTool,
				CallID: "send-" + name, Input: in})
			if err != nil || resp.Status != rpc.ToolError {
				t.Errorf("choir.send.file %s: %s %s %v", p, resp.Status, resp.Output, err)
			}
			_, err = client.SendOutbound(ctx, rpc.SendOutboundRequest{MessageID: "out-" + name,
				Kind: rpc.OutboundDocument, FilePath: p})
			if !errors.Is(err, wire.ErrBadRequest) {
				t.Errorf("SEND_OUTBOUND %s: %v, want a bad request", p, err)
			}
		})
	}
	var queued int
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM choir_control.outbox WHERE file_path <> ''`).Scan(&queued); err != nil {
		t.Fatal(err)
	}
	if queued != 0 {
		t.Errorf("%d files queued", queued)
	}

	t.Run("PlainFileIsQueuedRelativeToItsWorkspace", func(t *testing.T) {
		report := filepath.Join(mainSend, "report.txt")
		if err := os.WriteFile(report, []byte("quarterly"), 0o644); err != nil {
			t.Fatal(err)
		}
		resp, err := client.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: agentapi.SendFileTool, CallID: "send-ok",
			Input: json.RawMessage(`{"path": "report.txt"}`)})
		if err != nil || resp.Status != rpc.ToolSuccess {
			t.Fatalf("choir.send.file: %s %s %v", resp.Status, resp.Output, err)
		}
		var out struct {
			OutboxID int64 `json:"outbox_id"`
		}
		if err := json.Unmarshal(resp.Output, &out); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			row, err := seam.Queries(d.Pool()).OutboxGetByID(ctx, out.OutboxID)
			if err != nil {
				t.Fatal(err)
			}
			if row.Workspace != "main" || row.FilePath != ".choirtmp/send/report.txt" {
				t.Fatalf("row names %q in workspace %q", row.FilePath, row.Workspace)
			}
			if row.Status == "sent" {
				break
			}
			if row.Status == "failed" || time.Now().After(deadline) {
				t.Fatalf("row is %s (%q)", row.Status, row.LastError)
			}
			time.Sleep(10 * time.Millisecond)
		}
		// The file is removed after the row's commit.
		for _, err := os.Stat(report); err == nil; _, err = os.Stat(report) {
			if time.Now().After(deadline) {
				t.Fatal("report.txt is still there after delivery")
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	if got, err := os.ReadFile(secret); err != nil || !strings.HasPrefix(string(got), "the other agent's") {
		t.Errorf("the other workspace's file: %q %v", got, err)
	}
}
