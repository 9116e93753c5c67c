package core_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/rpc"
)

// TestApprovedCallWaitsForCoreJobs: an approval that comes while a core
// job runs (the edge may then run only read-only tools) is neither run nor
// taken; once the job ends, the call runs, once, and the edge tells the
// user.
func TestApprovedCallWaitsForCoreJobs(t *testing.T) {
	t.Parallel()
	b := setupCores(t, coreOpts{gatedTools: true})
	b.edgeSrv.Add(
		llmtest.ToolCalls(spawnCall("s1", "build", "Run the build.")),
		llmtest.Text("Build started."),
		llmtest.Text("Still building."),
		llmtest.Text("Pinged.").Expect(func(t testing.TB, r *llmtest.Request) {
			if !hasMessage(r, "system", "Choir ran the approved test.ping call") || !hasMessage(r, "system", `"status":"success"`) {
				t.Errorf("the approved call's result is not in the prompt: %+v", r.Messages)
			}
		}),
	)
	b.coreSrv.Add(
		llmtest.ToolCalls(llmtest.Call{ID: "x", Name: "choir.exec",
			Arguments: `{"command":"while [ ! -f release ]; do sleep 0.02; done; echo built"}`}),
		llmtest.Text("built"),
	)
	if err := b.edge.Deliver(lane.UserMessage{Text: "build it"}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, "Build started.")
	waitFor(t, "the job's exec", func() bool { return len(b.find(t, rpc.EventToolCallCommitted, "core:build")) == 1 })

	b.edge.ResolveApproval(lane.ApprovalResolution{ApprovalID: "appr-1", Status: "approved", ResolvedBy: "telegram:dm-1",
		ResolvedAt: time.Now(), RequestType: "test.ping", Payload: json.RawMessage(`{"path":"pinged.txt"}`)})
	// A turn after the outcome: the lane has been IDLE with it since.
	if err := b.edge.Deliver(lane.UserMessage{Text: "status?"}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, "Still building.")
	if !b.edge.CoresRunning() {
		t.Fatal("the job ended before the edge answered: the test shows nothing")
	}
	if n := len(b.find(t, rpc.EventInjectedInstruction, "edge")); n != 0 {
		t.Fatalf("the outcome was taken while a core job ran (%d events)", n)
	}
	if _, err := os.Stat(filepath.Join(b.ws, "pinged.txt")); !os.IsNotExist(err) {
		t.Fatalf("the approved call ran while a core job ran: %v", err)
	}

	if err := os.WriteFile(filepath.Join(b.ws, "release"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, "Pinged.")
	if _, err := os.Stat(filepath.Join(b.ws, "pinged.txt")); err != nil {
		t.Errorf("the approved call did not run once the job ended: %v", err)
	}
	if n := len(b.find(t, rpc.EventInjectedInstruction, "edge")); n != 1 {
		t.Errorf("%d approval events, want one", n)
	}
	b.waitStopped(t, "build")
}

// hasMessage reports whether r holds a message of role containing content.
func hasMessage(r *llmtest.Request, role, content string) bool {
	return slices.ContainsFunc(r.Messages, func(m llmtest.Message) bool {
		return m.Role == role && strings.Contains(m.Content, content)
	})
}
