package agentapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/choirhq/choir/ctl"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
	"github.com/choirhq/choir/sql/seam"
)

func TestAgentProtocolAgainstChoird(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{})
	home, logs := d.Home, d.Logs
	s, err := session.CreateSession(ctx, d.Pool(), d.Snapshot().Config, "assistant", admin.StartOverrides{}, d.ConfigVersion(), "process")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.Options{Socket: d.Socket(),
		SessionID: s.Session.ID.String(), LeaseToken: s.LeaseToken})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	q := seam.Queries(d.Pool())

	hello, err := cl.InitHello(ctx, choirdtest.HelloRequest(s))
	if err != nil {
		t.Fatalf("INIT_HELLO: %v", err)
	}
	if hello.Status != rpc.HelloFresh || hello.ConfigVersion != d.ConfigVersion() || hello.ResourceBindings.Workspace != "main" {
		t.Errorf("hello = %+v", hello)
	}
	if row, _ := q.SessionGetByID(ctx, s.Session.ID); row.HelloAt == nil || row.ImageVersion != "img-1" {
		t.Errorf("INIT_HELLO left no mark on the session row")
	}

	t.Run("GetSecretsReturnsOnlyBoundSecrets", func(t *testing.T) {
		// Every secret the session is bound to (the model's key, the git
		// identity's token) is added by the gateway: none is listed.
		if len(hello.ResourceBindings.Secrets) != 0 {
			t.Errorf("the hello lists secrets %v, want none", hello.ResourceBindings.Secrets)
		}
		_, err := cl.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"git-token"}})
		if !errors.Is(err, wire.ErrPermissionDenied) || !strings.Contains(err.Error(), "added by choird's egress gateway") {
			t.Fatalf("the git token: %v, want a refusal naming the egress gateway", err)
		}
		_, err = cl.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"postgres-admin"}})
		if !errors.Is(err, wire.ErrPermissionDenied) {
			t.Fatalf("unbound secret: %v", err)
		}
		// The model's key is added by choird's egress gateway: it never
		// enters the agent, and the refusal says so.
		_, err = cl.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"model-key"}})
		if !errors.Is(err, wire.ErrPermissionDenied) || !strings.Contains(err.Error(), "added by choird's egress gateway") {
			t.Fatalf("the model's key: %v, want a refusal naming the egress gateway", err)
		}
		if strings.Contains(logs.String(), choirdtest.Canary) {
			t.Error("a secret value reached choird's log")
		}
	})

	var acked rpc.Hash // the hash of rev 3, once acknowledged
	t.Run("HeartbeatReplicatesAndAcks", func(t *testing.T) {
		evs := choirdtest.ChainEvents(t, 1, 3, rpc.Genesis)
		resp, err := cl.Heartbeat(ctx, choirdtest.Patch(evs, 0, rpc.Genesis))
		if err != nil || resp.AckRev != 3 || resp.ConfigVersionLatest != d.ConfigVersion() {
			t.Fatalf("HEARTBEAT: %+v %v", resp, err)
		}
		acked = evs[2].Hash
		_, err = cl.Heartbeat(ctx, choirdtest.Patch(choirdtest.ChainEvents(t, 5, 5, rpc.Hash{9}), 4, rpc.Hash{9}))
		if !errors.Is(err, wire.ErrConflict) || !strings.Contains(err.Error(), "resend from rev 4") {
			t.Fatalf("gap: %v", err)
		}
	})

	t.Run("ApprovalReplayReturnsTheFirstRow", func(t *testing.T) {
		rctx := client.WithRequestID(ctx, "approval-req-1")
		req := rpc.ApprovalRequest{RequestType: "tool:choir.exec", Summary: "run rm -rf build", Payload: json.RawMessage(`{"command":"rm -rf build"}`)}
		first, err := cl.RequestApproval(rctx, req)
		if err != nil || first.Status != rpc.ApprovalPending {
			t.Fatalf("REQUEST_APPROVAL: %+v %v", first, err)
		}
		again, err := cl.RequestApproval(rctx, req)
		if err != nil || again.ApprovalID != first.ApprovalID {
			t.Fatalf("replay: %+v %v", again, err)
		}
		var n int
		d.Pool().QueryRow(ctx, "SELECT count(*) FROM choir_audit.approvals WHERE status = 'pending'").Scan(&n)
		if n != 1 {
			t.Errorf("%d pending approvals, want 1", n)
		}
	})

	t.Run("ReportStatusIsRecorded", func(t *testing.T) {
		if _, err := cl.ReportStatus(ctx, rpc.ReportStatusRequest{Lane: "edge", State: "EDGE_IDLE"}); err != nil {
			t.Fatal(err)
		}
		row, _ := q.SessionGetByID(ctx, s.Session.ID)
		if !strings.Contains(string(row.LaneStatus), "EDGE_IDLE") {
			t.Errorf("lane_status = %s", row.LaneStatus)
		}
	})

	t.Run("FetchDynamicConfigCarriesNoSecretValues", func(t *testing.T) {
		resp, err := cl.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: 0})
		if err != nil || resp.ConfigVersion != d.ConfigVersion() || len(resp.Config) == 0 {
			t.Fatalf("FETCH_DYNAMIC_CONFIG: %+v %v", resp, err)
		}
		if strings.Contains(string(resp.Config), "sk-canary") || !strings.Contains(string(resp.Config), `"models"`) {
			t.Errorf("config = %s", resp.Config)
		}
		same, err := cl.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: d.ConfigVersion()})
		if err != nil || len(same.Config) != 0 {
			t.Errorf("up-to-date fetch = %+v %v", same, err)
		}
	})

	t.Run("MemoryToolsRunAndRefuseAnotherAgentsMemory", func(t *testing.T) {
		resp, err := cl.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.memory.upsert", CallID: "m1",
			Input: json.RawMessage(`{"op":"insert","key":"k","text":"the sky is blue"}`)})
		if err != nil || resp.Status != rpc.ToolSuccess {
			t.Fatalf("own upsert: %+v %v", resp, err)
		}
		resp, err = cl.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.memory.upsert", CallID: "m2",
			Input: json.RawMessage(`{"op":"insert","text":"planted","target_agent":"helper"}`)})
		if err != nil || resp.Status != rpc.ToolError || !strings.Contains(strings.ToLower(string(resp.Output)), "permission") {
			t.Fatalf("write to another agent: %+v %s %v", resp, resp.Output, err)
		}
		// A write that names a version the document is no longer at comes
		// back as the tool's error, naming both versions.
		resp, err = cl.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.memory.upsert", CallID: "m2v",
			Input: json.RawMessage(`{"op":"update","key":"k","text":"the sky is green","expect_version":0}`)})
		if err != nil || resp.Status != rpc.ToolError ||
			!strings.Contains(string(resp.Output), "already exists (version 1), but a new document was expected") {
			t.Fatalf("stale upsert: %+v %s %v", resp, resp.Output, err)
		}
		var n int
		d.Pool().QueryRow(ctx, "SELECT count(*) FROM choir_assistant.knowledge_versions").Scan(&n)
		if n != 1 {
			t.Errorf("%d versions after a refused write, want 1", n)
		}
		d.Pool().QueryRow(ctx, "SELECT count(*) FROM choir_helper.knowledge_documents").Scan(&n)
		if n != 0 {
			t.Errorf("another agent's knowledge has %d rows", n)
		}
		resp, err = cl.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.memory.query", CallID: "m3",
			Input: json.RawMessage(`{"store":"knowledge","mode":"text","query":"sky","target_agent":"assistant"}`)})
		if err != nil || resp.Status != rpc.ToolSuccess || !strings.Contains(string(resp.Output), "the sky is blue") {
			t.Fatalf("query: %+v %s %v", resp, resp.Output, err)
		}
		resp, err = cl.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.memory.query", CallID: "m4",
			Input: json.RawMessage(`{"store":"everything","mode":"text","query":"sky"}`)})
		if err != nil || resp.Status != rpc.ToolError || !strings.Contains(string(resp.Output), "store") {
			t.Fatalf("unknown store: %+v %s %v", resp, resp.Output, err)
		}
	})

	t.Run("UnknownHostToolIsNotFound", func(t *testing.T) {
		_, err := cl.ExecuteHostTool(ctx, rpc.ExecuteHostToolRequest{ToolName: "choir.nothing", CallID: "c1", Input: json.RawMessage(`{}`)})
		if !errors.Is(err, wire.ErrNotFound) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("SendOutboundIsIdempotentByMessageID", func(t *testing.T) {
		req := rpc.SendOutboundRequest{MessageID: "m-1", Kind: rpc.OutboundKind("text"), Text: "hello"}
		first, err := cl.SendOutbound(ctx, req)
		if err != nil || first.Duplicate {
			t.Fatalf("SEND_OUTBOUND: %+v %v", first, err)
		}
		again, err := cl.SendOutbound(client.WithRequestID(ctx, "another-request"), req)
		if err != nil || !again.Duplicate || again.OutboxID != first.OutboxID {
			t.Fatalf("same message again: %+v %v", again, err)
		}
	})

	t.Run("ChoirctlStatusShowsTheAgent", func(t *testing.T) {
		var out, errb bytes.Buffer
		if code := ctl.Run(ctx, []string{"--home", home, "status"}, &out, &errb); code != 0 {
			t.Fatalf("status: %d %s", code, errb.String())
		}
		for _, want := range []string{"postgres: reachable", "assistant", "active", "helper", "stopped", "OFFLINE built-in lexical embedder"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("status output lacks %q:\n%s", want, out.String())
			}
		}
	})

	t.Run("TerminateSelfRevokesTheToken", func(t *testing.T) {
		if _, err := cl.TerminateSelf(ctx, rpc.TerminateSelfRequest{Reason: "done"}); err != nil {
			t.Fatal(err)
		}
		_, err := cl.ReportStatus(ctx, rpc.ReportStatusRequest{Lane: "edge", State: "EDGE_IDLE"})
		if !errors.Is(err, wire.ErrUnauthenticated) {
			t.Fatalf("call after terminate: %v", err)
		}
		// A heartbeat is authenticated from memory (the token is right),
		// and fenced by its own statement: the session is no longer live.
		if _, err := cl.Heartbeat(ctx, choirdtest.Patch(choirdtest.ChainEvents(t, 4, 4, acked), 3, acked)); !errors.Is(err, wire.ErrUnauthenticated) {
			t.Fatalf("heartbeat after terminate: %v", err)
		}
		other, _ := rpc.NewLeaseToken()
		impostor, err := client.New(client.Options{Socket: d.Socket(),
			SessionID: s.Session.ID.String(), LeaseToken: other})
		if err != nil {
			t.Fatal(err)
		}
		defer impostor.Close()
		if _, err := impostor.Heartbeat(ctx, choirdtest.Patch(choirdtest.ChainEvents(t, 4, 4, acked), 3, acked)); !errors.Is(err, wire.ErrUnauthenticated) {
			t.Fatalf("heartbeat with a wrong token: %v", err)
		}
		var events int
		var ackedRev int64
		d.Pool().QueryRow(ctx, "SELECT acked_rev, (SELECT count(*) FROM choir_control.session_events WHERE session_id = $1) FROM choir_control.sessions WHERE session_id = $1",
			s.Session.ID).Scan(&ackedRev, &events)
		if ackedRev != 3 || events != 3 {
			t.Errorf("refused heartbeats wrote: acked_rev %d, %d events", ackedRev, events)
		}
		var leases int
		d.Pool().QueryRow(ctx, "SELECT count(*) FROM choir_audit.leases").Scan(&leases)
		if leases != 0 {
			t.Errorf("%d leases still held", leases)
		}
	})
}

func TestChoirctlStatusWhenChoirdIsNotRunning(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	var out, errb bytes.Buffer
	code := ctl.Run(context.Background(), []string{"--home", home, "status"}, &out, &errb)
	msg := strings.TrimSpace(errb.String())
	if code == 0 || strings.Contains(msg, "\n") || !strings.Contains(msg, "choird is not running") || !strings.Contains(msg, home) {
		t.Fatalf("exit %d, stderr %q", code, msg)
	}
}

func TestSecondChoirdOnTheSameHomeRefusesNamingTheHolder(t *testing.T) {
	t.Parallel()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{})
	err := daemon.Run(context.Background(), daemon.Options{Home: d.Home, Stderr: &logbuf.Buffer{}})
	if err == nil || !strings.Contains(err.Error(), "choird.sock") {
		t.Fatalf("second choird: %v", err)
	}
}
