package rpc_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/wire"
)

func TestPayloadValidate(t *testing.T) {
	t.Parallel()
	neg := int64(-1)
	hb := heartbeatReq(t, 4, 3, 50)
	hbGap := heartbeatReq(t, 4, 3, 50)
	hbGap.Patches = append(hbGap.Patches[:1], hbGap.Patches[2:]...)
	hbGap.NewRev--
	hbEnd := heartbeatReq(t, 0, 1, 10)
	hbEnd.HashNew[0] ^= 1
	tail := heartbeatReq(t, 10, 2, 10)
	for _, c := range []struct {
		name    string
		p       rpc.Payload
		wantErr string // "" for valid
	}{
		{"HelloValid", rpc.InitHelloRequest{AgentID: "a", SessionID: "6f1c2b0e-3b8e-4c1e-9d36-0d7a2b1f9e11", ImageVersion: "v", ToolManifestHash: "t", SkillManifestHash: "s"}, ""},
		{"HelloUppercaseSession", rpc.InitHelloRequest{AgentID: "a", SessionID: "6F1C2B0E-3B8E-4C1E-9D36-0D7A2B1F9E11", ImageVersion: "v", ToolManifestHash: "t", SkillManifestHash: "s"}, "$.session_id"},
		{"HelloBadAgent", rpc.InitHelloRequest{AgentID: "Alice!", SessionID: "6f1c2b0e-3b8e-4c1e-9d36-0d7a2b1f9e11", ImageVersion: "v", ToolManifestHash: "t", SkillManifestHash: "s"}, "$.agent_id"},
		{"HelloResponseFreshWithTail", rpc.InitHelloResponse{Status: rpc.HelloFresh, TailEvents: tail.Patches}, "fresh session"},
		{"HelloResponseResumed", rpc.InitHelloResponse{Status: rpc.HelloResumed, TailEvents: tail.Patches, AckedRev: 12, AckedHash: tail.HashNew}, ""},
		{"HelloResponseTailShort", rpc.InitHelloResponse{Status: rpc.HelloResumed, TailEvents: tail.Patches, AckedRev: 13, AckedHash: tail.HashNew}, "acked_rev 13"},
		{"HelloResponseTailReachesBackBeforeSnapshot", rpc.InitHelloResponse{Status: rpc.HelloResumed, TailEvents: tail.Patches,
			Snapshot: &rpc.Snapshot{Rev: 11, Hash: tail.Patches[0].Hash, State: json.RawMessage(`{}`)}, AckedRev: 12, AckedHash: tail.HashNew}, ""},
		{"HelloResponseTailBeforeSnapshotOtherHash", rpc.InitHelloResponse{Status: rpc.HelloResumed, TailEvents: tail.Patches,
			Snapshot: &rpc.Snapshot{Rev: 11, Hash: rpc.Hash{9}, State: json.RawMessage(`{}`)}, AckedRev: 12, AckedHash: tail.HashNew}, "the snapshot's event"},
		{"HelloResponseTailAfterSnapshotGap", rpc.InitHelloResponse{Status: rpc.HelloResumed, TailEvents: tail.Patches,
			Snapshot: &rpc.Snapshot{Rev: 9, Hash: rpc.Hash{9}, State: json.RawMessage(`{}`)}, AckedRev: 12, AckedHash: tail.HashNew}, "want 10"},
		{"HelloResponseSnapshotOnly", rpc.InitHelloResponse{Status: rpc.HelloResumed, Snapshot: &rpc.Snapshot{Rev: 5, Hash: rpc.Hash{1}, State: json.RawMessage(`{}`)}, AckedRev: 5, AckedHash: rpc.Hash{1}}, ""},
		{"HelloResponseSnapshotNotObject", rpc.InitHelloResponse{Status: rpc.HelloResumed, Snapshot: &rpc.Snapshot{Rev: 5, State: json.RawMessage(`[]`)}, AckedRev: 5}, "$.snapshot.state"},
		{"SecretsValid", rpc.GetSecretsRequest{Resources: []string{"a", "b.c"}}, ""},
		{"SecretsEmpty", rpc.GetSecretsRequest{}, "$.resources: required"},
		{"SecretsDuplicate", rpc.GetSecretsRequest{Resources: []string{"a", "a"}}, "$.resources[1]: duplicate"},
		{"HeartbeatValid", hb, ""},
		{"HeartbeatEmptyValid", rpc.HeartbeatRequest{BaseRev: 7, NewRev: 7, Timestamp: time.Now()}, ""},
		{"HeartbeatGap", hbGap, "$.patches"},
		{"HeartbeatWrongEnd", hbEnd, "$.hash_new"},
		{"HeartbeatNoTimestamp", rpc.HeartbeatRequest{}, "$.timestamp"},
		{"HeartbeatBackwards", rpc.HeartbeatRequest{BaseRev: 5, NewRev: 4, Timestamp: time.Now()}, "$.new_rev"},
		{"ApprovalValid", rpc.ApprovalRequest{RequestType: "tool:choir.exec", Summary: "ok?", Payload: json.RawMessage(`{}`)}, ""},
		{"ApprovalPayloadNotObject", rpc.ApprovalRequest{RequestType: "tool:x", Summary: "ok?", Payload: json.RawMessage(`"x"`)}, "$.payload"},
		{"ApprovalResponseBadStatus", rpc.ApprovalResponse{ApprovalID: "a1", Status: "maybe"}, "$.status"},
		{"StatusValid", rpc.ReportStatusRequest{Lane: "core:fix-tests", State: "CORE_REASONING", Skill: "tdd", Step: "red"}, ""},
		{"StatusNegativeBudget", rpc.ReportStatusRequest{Lane: "edge", State: "IDLE", BudgetRemaining: wire.Budget{ToolCalls: &neg}}, "$.budget_remaining.tool_calls"},
		{"TerminateNoReason", rpc.TerminateSelfRequest{}, "$.reason"},
		{"AckFalse", rpc.Ack{}, "$.ack"},
		{"ConfigNegative", rpc.FetchDynamicConfigRequest{CurrentConfigVersion: -1}, "negative"},
		{"ConfigResponseNotObject", rpc.FetchDynamicConfigResponse{ConfigVersion: 1, Config: json.RawMessage(`[1]`)}, "$.config"},
		{"ToolValid", rpc.ExecuteHostToolRequest{ToolName: "choir.memory.query", CallID: "c-1", Input: json.RawMessage(`{"q":"x"}`)}, ""},
		{"ToolBadName", rpc.ExecuteHostToolRequest{ToolName: "choir..x", CallID: "c", Input: json.RawMessage(`{}`)}, "$.tool_name"},
		{"ToolNoInput", rpc.ExecuteHostToolRequest{ToolName: "x", CallID: "c"}, "$.input: required"},
		{"ToolResponseNoOutput", rpc.ExecuteHostToolResponse{CallID: "c", Status: rpc.ToolError}, "$.output"},
		{"OutboundText", rpc.SendOutboundRequest{MessageID: "m", Kind: rpc.OutboundText, Text: "hi"}, ""},
		{"OutboundTextWithFile", rpc.SendOutboundRequest{MessageID: "m", Kind: rpc.OutboundText, Text: "hi", FilePath: "a"}, "$.file_path"},
		{"OutboundVoiceNoFile", rpc.SendOutboundRequest{MessageID: "m", Kind: rpc.OutboundVoice}, "$.file_path: required"},
		{"OutboundEscapes", rpc.SendOutboundRequest{MessageID: "m", Kind: rpc.OutboundPhoto, FilePath: "../x.png"}, "inside"},
		{"OutboundAbsolute", rpc.SendOutboundRequest{MessageID: "m", Kind: rpc.OutboundPhoto, FilePath: "/etc/passwd"}, "relative"},
		{"OutboundUnclean", rpc.SendOutboundRequest{MessageID: "m", Kind: rpc.OutboundVideo, FilePath: "a/./b.mp4"}, "clean"},
		{"OutboundUnknownKind", rpc.SendOutboundRequest{MessageID: "m", Kind: "sticker", Text: "x"}, "$.kind"},
		{"OutboundResponseValid", rpc.SendOutboundResponse{MessageID: "m", OutboxID: 3, Status: rpc.OutboundSent}, ""},
		{"PushTwoBodies", rpc.Push{Kind: rpc.PushCancel, Cancel: &rpc.Cancel{Scope: rpc.CancelAll}, Shutdown: &rpc.Shutdown{Reason: "x"}}, "exactly"},
		{"PushKindMismatch", rpc.Push{Kind: rpc.PushShutdown, Cancel: &rpc.Cancel{Scope: rpc.CancelAll}}, "exactly"},
		{"PushCancelCoreNeedsJob", rpc.Push{Kind: rpc.PushCancel, Cancel: &rpc.Cancel{Scope: rpc.CancelCore}}, "job_name"},
		{"PushCancelEdgeNoJob", rpc.Push{Kind: rpc.PushCancel, Cancel: &rpc.Cancel{Scope: rpc.CancelEdge, JobName: "x"}}, "job_name"},
		{"PushApprovalPendingIsNotResolved", rpc.Push{Kind: rpc.PushApprovalResolved, ApprovalResolved: &rpc.ApprovalResolved{ApprovalID: "a", Status: rpc.ApprovalPending, ResolvedBy: "x", ResolvedAt: time.Now()}}, "status"},
		{"PushUserMessageEmpty", rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: 1, Gateway: "g", ReceivedAt: time.Now()}}, "text: required"},
		{"ErrorBodyNoCode", wire.ErrorBody{Error: "x"}, "$.code"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			err := c.p.Validate()
			if c.wantErr == "" {
				if err != nil {
					t.Errorf("valid payload refused: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("got %v, want an error containing %q", err, c.wantErr)
			}
		})
	}
	for _, p := range samplePushes() {
		if err := p.Validate(); err != nil {
			t.Errorf("sample %s: %v", p.Kind, err)
		}
	}
}

func TestLeaseToken(t *testing.T) {
	t.Parallel()
	tok, hash := rpc.NewLeaseToken()
	other, _ := rpc.NewLeaseToken()
	if len(tok) != 43 || !rpc.ValidLeaseTokenFormat(tok) || tok == other {
		t.Errorf("token %q", tok)
	}
	if len(hash) != 32 || !rpc.LeaseTokenMatches(tok, hash) || rpc.LeaseTokenMatches(other, hash) {
		t.Error("hash does not identify the token")
	}
	for _, bad := range []string{"", tok[:42], tok + "A", strings.Repeat("!", 43), strings.Repeat("A", 42) + "B"} {
		if rpc.ValidLeaseTokenFormat(bad) {
			t.Errorf("%q accepted", bad)
		}
	}
}

func TestEnvelopeLogsNoToken(t *testing.T) {
	t.Parallel()
	tok, _ := rpc.NewLeaseToken()
	env := rpc.Envelope{RequestID: "r", SessionID: "s", LeaseToken: tok, Verb: rpc.VerbHeartbeat}
	if strings.Contains(env.String(), tok) || strings.Contains(env.LogValue().String(), tok) {
		t.Error("the lease token is printed")
	}
}
