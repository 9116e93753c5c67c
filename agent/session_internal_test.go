package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/rpc"
)

// sessionBundle is a session opened, restored and started against a real
// choird on a fresh database, its model the scripted server, with no push
// stream: the test hands pushes to dispatch itself.
type sessionBundle struct {
	d         *choirdtest.Choird
	s         *session
	sessionID string
	runCtx    context.Context
	logs      *logbuf.Buffer
	// stopped is set once a test stopped the session itself.
	stopped *bool
}

// smartKey is the secret of the second configured model, "smart", which
// choird's egress gateway adds; toolKey is one of the agent's
// mcp_secrets that no MCP server of its config names (an external
// tool's), which choird still hands over.
const (
	smartKey = "sk-smart"
	toolKey  = "tool-key-value"
)

func setupSession(t *testing.T, srv *llmtest.Server) *sessionBundle {
	t.Helper()
	d := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL(), FastHeartbeat: true,
		Edit: func(cfg *config.Config, secrets config.Secrets) {
			cfg.Models["smart"] = config.Model{Provider: "openai-compatible", Model: "big-2", Endpoint: srv.BaseURL(), Secret: "smart-key"}
			secrets["smart-key"], secrets["tool-key"] = smartKey, toolKey
			a := cfg.Agents["assistant"]
			a.MCPSecrets = []string{"tool-key"}
			cfg.Agents["assistant"] = a
		}})
	sessionID, token := d.StartSession(t, "assistant")
	logs := &logbuf.Buffer{}
	s, err := openSession(context.Background(), Options{Socket: d.Socket(), AgentID: "assistant",
		SessionID: sessionID, LeaseToken: token, Workspace: d.Workspace("main"), ChoirDir: t.TempDir(),
		Logger: slog.New(slog.NewJSONHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.close)
	if err := s.restore(); err != nil {
		t.Fatal(err)
	}
	b := &sessionBundle{d: d, s: s, sessionID: sessionID, runCtx: s.start(context.Background()), logs: logs}
	stopped := false
	t.Cleanup(func() {
		if !stopped {
			b.s.stop(context.Background(), stopRequest{reason: "test over", grace: time.Millisecond})
		}
	})
	b.stopped = &stopped
	return b
}

func (b *sessionBundle) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	choirdtest.WaitFor(t, what, b.logs, cond)
}

// events returns the payloads of the session's committed events of a type,
// in order.
func (b *sessionBundle) events(t *testing.T, typ rpc.EventType) []map[string]any {
	t.Helper()
	head, _ := b.s.log.Head()
	evs, err := b.s.log.Range(b.s.log.Oldest(), head)
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for _, ev := range evs {
		if ev.Type == typ {
			var p map[string]any
			if err := json.Unmarshal(ev.Payload, &p); err != nil {
				t.Fatal(err)
			}
			out = append(out, p)
		}
	}
	return out
}

func (b *sessionBundle) waitEvents(t *testing.T, typ rpc.EventType, n int) []map[string]any {
	t.Helper()
	var evs []map[string]any
	b.waitFor(t, "committed "+string(typ), func() bool { evs = b.events(t, typ); return len(evs) >= n })
	return evs
}

func (b *sessionBundle) dispatch(p rpc.Push) { b.s.dispatch(b.runCtx, p) }

func (b *sessionBundle) say(inboxID int64, text string, attachments ...rpc.Attachment) {
	b.dispatch(rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: inboxID, Gateway: "console",
		ChatID: "operator", UserID: "operator", Text: text, Attachments: attachments, ReceivedAt: time.Now()}})
}

// TestSessionDispatch hands each kind of push straight to a session's
// dispatch, with no push stream in between, and checks what it does: in
// the edge lane's committed events, in the session's configuration and
// secrets, and in the stop it asks for.
func TestSessionDispatch(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t,
		llmtest.Text("Hello!"),
		llmtest.Hang(),
		llmtest.Text(`{"memory_delta": {"mode": "append", "summary_update": "The user said hello."}}`), // compaction
	)
	b := setupSession(t, srv)
	ctx := context.Background()

	t.Run("UserMessageReachesTheEdgeOnce", func(t *testing.T) {
		b.say(21, "hi", rpc.Attachment{Kind: "photo", FilePath: "cat.png", Size: 3})
		b.waitEvents(t, rpc.EventModelOutput, 1)
		b.waitFor(t, "the lane idle", func() bool { return b.s.edge.State() == lane.EdgeIdle })
		// A redelivered copy is dropped at once, before the lane sees it.
		b.say(21, "hi")
		users := b.events(t, rpc.EventUserMsg)
		if len(users) != 1 {
			t.Fatalf("%d user messages committed, want 1: %v", len(users), users)
		}
		u := users[0]
		if u["inbox_id"] != float64(21) || u["message_id"] != "21" || u["text"] != "hi" {
			t.Errorf("user_msg payload = %v", u)
		}
		if a, _ := u["attachments"].([]any); len(a) != 1 || a[0] != filepath.Join(".choirtmp", "recv", "cat.png") {
			t.Errorf("attachments = %v", u["attachments"])
		}
		if !strings.Contains(b.logs.String(), "redelivered user message dropped") {
			t.Errorf("the dropped copy is not logged")
		}
	})

	t.Run("InjectionIsCommittedAtIdle", func(t *testing.T) {
		b.dispatch(rpc.Push{Kind: rpc.PushInjection, Injection: &rpc.Injection{InboxID: 22, Text: "use tabs", ReceivedAt: time.Now()}})
		inj := b.waitEvents(t, rpc.EventInjectedInstruction, 1)
		if inj[0]["inbox_id"] != float64(22) || inj[0]["text"] != "use tabs" || inj[0]["source"] != "user" {
			t.Errorf("injected_instruction payload = %v", inj[0])
		}
	})

	t.Run("ApprovalOutcomeReachesTheEdge", func(t *testing.T) {
		b.dispatch(rpc.Push{Kind: rpc.PushApprovalResolved, ApprovalResolved: &rpc.ApprovalResolved{ApprovalID: "ap-1",
			Status: rpc.ApprovalRejected, ResolvedBy: "telegram:dm-1", ResolvedAt: time.Now()}})
		ev := b.waitEvents(t, rpc.EventInjectedInstruction, 2)[1]
		if ev["source"] != "approval" || ev["approval_id"] != "ap-1" || ev["status"] != "rejected" || ev["resolved_by"] != "telegram:dm-1" {
			t.Errorf("approval event payload = %v", ev)
		}
	})

	t.Run("CancelReachesTheRunningTurn", func(t *testing.T) {
		before := len(srv.Requests())
		b.say(23, "think forever")
		// Cancel only once the model server holds the call.
		b.waitFor(t, "the hanging model call", func() bool { return len(srv.Requests()) > before })
		// A core job's cancel leaves the edge's turn alone: there are none.
		b.dispatch(rpc.Push{Kind: rpc.PushCancel, Cancel: &rpc.Cancel{Scope: rpc.CancelCore, JobName: "refactor"}})
		if st := b.s.edge.State(); st != lane.EdgeReasoning {
			t.Errorf("after a core cancel the lane is %s", st)
		}
		b.dispatch(rpc.Push{Kind: rpc.PushCancel, Cancel: &rpc.Cancel{Scope: rpc.CancelEdge, Reason: "/cancel"}})
		ev := b.waitEvents(t, rpc.EventCancelled, 1)
		if ev[0]["scope"] != "edge" || ev[0]["reason"] != "/cancel" {
			t.Errorf("cancelled payload = %v", ev[0])
		}
		b.waitFor(t, "the lane idle", func() bool { return b.s.edge.State() == lane.EdgeIdle })
	})

	t.Run("CompactReachesTheEdge", func(t *testing.T) {
		b.dispatch(rpc.Push{Kind: rpc.PushCompact, Compact: &rpc.Compact{Reason: "/compact"}})
		ev := b.waitEvents(t, rpc.EventMemoryWriteCommitted, 1)
		sum, _ := ev[0]["summary"].(map[string]any)
		if ev[0]["kind"] != "reference_summary_delta" || sum["summary"] != "The user said hello." {
			t.Errorf("compaction payload = %v", ev[0])
		}
	})

	t.Run("ConfigChangedSwitchesTheModelButBringsNoKey", func(t *testing.T) {
		if got := b.s.model(); got.Name != "local" {
			t.Fatalf("model before = %s", got.Name)
		}
		// choird pushes the change too; this session has no push stream,
		// so only the dispatch below brings it in.
		if _, err := b.d.ModelSet(ctx, control.Scope{Admin: true, Actor: "test"}, "assistant", "smart"); err != nil {
			t.Fatal(err)
		}
		b.dispatch(rpc.Push{Kind: rpc.PushConfigChanged, ConfigChanged: &rpc.ConfigChanged{}})
		if d := b.s.dyn.Load(); d.LLM != "smart" || slices.Contains(d.Secrets, "smart-key") {
			t.Errorf("dynamic config after the push: llm %q, secrets %v", d.LLM, d.Secrets)
		}
		// The key is choird's egress gateway's to add: the agent never
		// holds it.
		if got := b.s.model(); got.Name != "smart" || got.Model != "big-2" || got.APIKey != "" {
			t.Errorf("model after = %s (%s), key %q", got.Name, got.Model, got.APIKey)
		}
		if _, ok := b.s.secrets.get("smart-key"); ok {
			t.Error("the smart model's key is held after the switch")
		}
	})

	t.Run("ConfigChangedRefreshesTheSecrets", func(t *testing.T) {
		// As after choirctl secret apply: the configuration is unchanged,
		// the secrets' values are not.
		b.s.secrets.swap(map[string]string{"tool-key": "stale"})
		b.dispatch(rpc.Push{Kind: rpc.PushConfigChanged, ConfigChanged: &rpc.ConfigChanged{}})
		if v, _ := b.s.secrets.get("tool-key"); v != toolKey {
			t.Errorf("tool-key after the push = %q", v)
		}
	})

	t.Run("ShutdownAsksToStopWithItsGrace", func(t *testing.T) {
		b.dispatch(rpc.Push{Kind: rpc.PushShutdown, Shutdown: &rpc.Shutdown{Reason: "agent stop", GraceMS: 1500}})
		// Only the first request counts.
		b.dispatch(rpc.Push{Kind: rpc.PushShutdown, Shutdown: &rpc.Shutdown{Reason: "again", GraceMS: 9000}})
		var req stopRequest
		select {
		case req = <-b.s.shutdown:
		default:
			t.Fatal("no stop requested")
		}
		if req.reason != "shutdown requested by choird: agent stop" || req.grace != 1500*time.Millisecond || req.revoked {
			t.Errorf("stop request = %+v", req)
		}
		*b.stopped = true
		if err := b.s.stop(ctx, req); err != nil {
			t.Fatalf("stop: %v", err)
		}
		var status, reason string
		b.d.Pool().QueryRow(ctx, "SELECT status, end_reason FROM choir_control.sessions WHERE session_id = $1",
			b.sessionID).Scan(&status, &reason)
		if status != "ended" || reason != "terminated by the agent: shutdown requested by choird: agent stop" {
			t.Errorf("after stop: status %s (%s)", status, reason)
		}
		srv.Done()
	})
}
