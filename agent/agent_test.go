package agent_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/agent"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/rpc"
)

// testBundle is a real choird on a fresh database with one agent running
// in process against it, its model the scripted server.
type testBundle struct {
	d         *choirdtest.Choird
	pool      *pgxpool.Pool
	sessionID string
	agentDone chan error
	stopAgent context.CancelFunc
	agentLogs *logbuf.Buffer
}

func setup(t *testing.T, srv *llmtest.Server) *testBundle {
	t.Helper()
	return setupWith(t, srv, nil)
}

// setupWith is setup with edit applied to choird's configuration.
func setupWith(t testing.TB, srv *llmtest.Server, edit func(*config.Config, config.Secrets)) *testBundle {
	t.Helper()
	d := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL(), FastHeartbeat: true, Edit: edit})
	sessionID, token := d.StartSession(t, "assistant")
	b := &testBundle{d: d, pool: d.Pool(), sessionID: sessionID, agentDone: make(chan error, 1), agentLogs: &logbuf.Buffer{}}
	actx, stop := context.WithCancel(context.Background())
	b.stopAgent = stop
	go func() {
		b.agentDone <- agent.Run(actx, agent.Options{Socket: d.Socket(), AgentID: "assistant",
			SessionID: sessionID, LeaseToken: token, Workspace: d.Workspace("main"), ChoirDir: t.TempDir(),
			Logger: slog.New(slog.NewJSONHandler(b.agentLogs, nil))})
	}()
	t.Cleanup(func() {
		stop()
		select {
		case <-b.agentDone:
		case <-time.After(time.Minute):
			t.Error("agent did not stop")
		}
	})
	d.WaitHello(t, sessionID, b.agentLogs)
	return b
}

func (b *testBundle) waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	choirdtest.WaitFor(t, what, b.agentLogs, cond)
}

func (b *testBundle) push(t testing.TB, p rpc.Push) {
	t.Helper()
	if _, err := b.d.Push(b.sessionID, p); err != nil {
		t.Fatal(err)
	}
}

func (b *testBundle) say(t testing.TB, inboxID int64, text string) {
	t.Helper()
	b.push(t, rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: inboxID, Gateway: "console",
		ChatID: "operator", UserID: "operator", Text: text, ReceivedAt: time.Now()}})
}

// outbox returns the texts queued for the user, by message ID.
func (b *testBundle) outbox(t testing.TB) map[string]string {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), "SELECT message_id, text FROM choir_control.outbox WHERE session_id = $1", b.sessionID)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for rows.Next() {
		var id, text string
		if err := rows.Scan(&id, &text); err != nil {
			t.Fatal(err)
		}
		out[id] = text
	}
	return out
}

// waitReply waits until the outbox holds a text containing want and
// returns its message ID.
func (b *testBundle) waitReply(t testing.TB, want string) string {
	t.Helper()
	var id string
	b.waitFor(t, "a reply containing "+want, func() bool {
		for k, v := range b.outbox(t) {
			if strings.Contains(v, want) {
				id = k
				return true
			}
		}
		return false
	})
	return id
}

type replicated struct {
	Rev     int64
	Type    string
	Payload map[string]any
	Hash    rpc.Hash
}

// events returns the replicated events of a type, in order.
func (b *testBundle) events(t *testing.T, typ rpc.EventType) []replicated {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT rev, event_type, payload, hash FROM choir_control.session_events
		WHERE session_id = $1 AND event_type = $2 ORDER BY rev`, b.sessionID, string(typ))
	if err != nil {
		t.Fatal(err)
	}
	var out []replicated
	for rows.Next() {
		var r replicated
		var p, h []byte
		if err := rows.Scan(&r.Rev, &r.Type, &p, &h); err != nil {
			t.Fatal(err)
		}
		json.Unmarshal(p, &r.Payload)
		r.Hash, _ = rpc.HashFromBytes(h)
		out = append(out, r)
	}
	return out
}

func (b *testBundle) waitEvents(t *testing.T, typ rpc.EventType, n int) []replicated {
	t.Helper()
	var evs []replicated
	b.waitFor(t, "replicated "+string(typ), func() bool { evs = b.events(t, typ); return len(evs) >= n })
	return evs
}

func (b *testBundle) edgeState(t *testing.T) string {
	t.Helper()
	var state *string
	b.pool.QueryRow(context.Background(), "SELECT lane_status->'edge'->>'state' FROM choir_control.sessions WHERE session_id = $1",
		b.sessionID).Scan(&state)
	if state == nil {
		return ""
	}
	return *state
}

const proposal = `{"change":"add","name":"choir.repo.status","description":"Show git status.","parameters":{"type":"object"},
"behavior":"Runs git status in the workspace and returns its output.","runtime":{"side_effect":"read","trust":"own"},"rationale":"The user asks daily."}`

// TestAgentGatewaySide drives one session through everything choird pushes:
// messages with inbox identity (a redelivered copy dropped), an injection,
// a proposal filed for approval and its outcome, a cancel, a compaction and
// a graceful stop with a session summary, checking what reaches Postgres.
func TestAgentGatewaySide(t *testing.T) {
	t.Parallel()
	var approvalID string
	srv := llmtest.NewServer(t,
		llmtest.Text("Hello!"),
		llmtest.Text("You want tabs.").Expect(func(t testing.TB, r *llmtest.Request) {
			found := false
			for _, m := range r.Messages {
				found = found || (m.Role == "user" && m.Content == "Injected instruction: use tabs")
			}
			if !found {
				t.Errorf("the injection is not in the prompt")
			}
		}),
		llmtest.ToolCalls(llmtest.Call{ID: "p1", Name: "choir.propose.tool", Arguments: proposal}),
		llmtest.Text("Filed for approval.").Expect(func(t testing.TB, r *llmtest.Request) {
			var res struct {
				Status string `json:"status"`
				Output struct {
					ApprovalID string `json:"approval_id"`
					Status     string `json:"status"`
				} `json:"output"`
			}
			json.Unmarshal([]byte(r.Last().Content), &res)
			if res.Status != "success" || res.Output.Status != "pending" || res.Output.ApprovalID == "" {
				t.Errorf("tool answer = %s", r.Last().Content)
			}
		}),
		llmtest.Text("It was approved.").Expect(func(t testing.TB, r *llmtest.Request) {
			if !strings.Contains(r.System(), "was approved by telegram:dm-1") {
				t.Errorf("the approval outcome is not in the prompt: %q", r.System())
			}
		}),
		llmtest.Hang(),
		llmtest.Text(`{"memory_delta": {"mode": "append", "summary_update": "The user said hello and wants tabs."}}`), // compaction
		llmtest.Text("Session: greetings, tabs, a tool proposal approved."),
	)
	b := setup(t, srv)
	ctx := context.Background()

	t.Run("UserMessageCarriesInboxIDAndReplyIDFollowsTheEvent", func(t *testing.T) {
		// Reported before anything happens, so choird knows it may push.
		b.waitFor(t, "EDGE_IDLE reported at start", func() bool { return b.edgeState(t) == "EDGE_IDLE" })
		b.say(t, 11, "hi")
		id := b.waitReply(t, "Hello!")
		users := b.waitEvents(t, rpc.EventUserMsg, 1)
		if users[0].Payload["inbox_id"] != float64(11) || users[0].Payload["message_id"] != "11" || users[0].Payload["text"] != "hi" {
			t.Errorf("user_msg payload = %v", users[0].Payload)
		}
		outs := b.waitEvents(t, rpc.EventModelOutput, 1)
		if id != lane.MessageID("reply", outs[0].Hash) {
			t.Errorf("reply message id %s, want it derived from model_output %s", id, outs[0].Hash)
		}
		b.waitFor(t, "EDGE_IDLE reported", func() bool { return b.edgeState(t) == "EDGE_IDLE" })
	})

	t.Run("RedeliveredMessageIsDroppedAndInjectionCommittedAtIdle", func(t *testing.T) {
		b.say(t, 11, "hi")
		b.push(t, rpc.Push{Kind: rpc.PushInjection, Injection: &rpc.Injection{InboxID: 13, Text: "use tabs", ReceivedAt: time.Now()}})
		inj := b.waitEvents(t, rpc.EventInjectedInstruction, 1)
		if inj[0].Payload["inbox_id"] != float64(13) || inj[0].Payload["text"] != "use tabs" || inj[0].Payload["source"] != "user" {
			t.Errorf("injected_instruction payload = %v", inj[0].Payload)
		}
		b.say(t, 12, "what do I want?")
		b.waitReply(t, "You want tabs.")
		var with11 int
		for _, e := range b.waitEvents(t, rpc.EventUserMsg, 2) {
			if e.Payload["inbox_id"] == float64(11) {
				with11++
			}
		}
		if with11 != 1 {
			t.Errorf("inbox row 11 committed %d times", with11)
		}
	})

	t.Run("ProposalIsFiledAndItsOutcomeReachesTheModel", func(t *testing.T) {
		b.say(t, 14, "I need a git status tool")
		b.waitReply(t, "Filed for approval.")
		var reqType, summary, requestID, status string
		var payload []byte
		if err := b.pool.QueryRow(ctx, `SELECT approval_id::text, request_type, summary, request_id, status, payload
			FROM choir_control.pending_approvals WHERE session_id = $1`, b.sessionID).
			Scan(&approvalID, &reqType, &summary, &requestID, &status, &payload); err != nil {
			t.Fatal(err)
		}
		if reqType != "choir.propose.tool" || summary != "add tool choir.repo.status: The user asks daily." ||
			!strings.HasPrefix(requestID, "approval:ck-") || status != "pending" {
			// The request ID is the call's idempotency key (issue 31): the
			// same proposal filed again after a restart finds this row.
			t.Errorf("approval row: type %s, summary %q, request %s, status %s", reqType, summary, requestID, status)
		}
		var p map[string]any
		json.Unmarshal(payload, &p)
		if p["name"] != "choir.repo.status" || p["rationale"] != "The user asks daily." {
			t.Errorf("approval payload = %s", payload)
		}
		b.push(t, rpc.Push{Kind: rpc.PushApprovalResolved, ApprovalResolved: &rpc.ApprovalResolved{ApprovalID: approvalID,
			Status: rpc.ApprovalApproved, ResolvedBy: "telegram:dm-1", ResolvedAt: time.Now()}})
		evs := b.waitEvents(t, rpc.EventInjectedInstruction, 2)
		ap := evs[1].Payload
		if ap["source"] != "approval" || ap["approval_id"] != approvalID || ap["status"] != "approved" || ap["tool"] != "choir.propose.tool" {
			t.Errorf("approval event payload = %v", ap)
		}
		b.say(t, 15, "was it approved?")
		b.waitReply(t, "It was approved.")
	})

	t.Run("CancelStopsTheTurn", func(t *testing.T) {
		before := len(srv.Requests())
		b.say(t, 16, "think forever")
		b.waitFor(t, "EDGE_REASONING reported", func() bool { return b.edgeState(t) == "EDGE_REASONING" })
		// Cancel only once the model server holds the call: a cancel that
		// came first would leave the hanging step to the next call.
		b.waitFor(t, "the hanging model call", func() bool { return len(srv.Requests()) > before })
		b.push(t, rpc.Push{Kind: rpc.PushCancel, Cancel: &rpc.Cancel{Scope: rpc.CancelEdge, Reason: "/cancel"}})
		b.waitReply(t, "Cancelled")
		ev := b.waitEvents(t, rpc.EventCancelled, 1)
		if ev[0].Payload["scope"] != "edge" || ev[0].Payload["reason"] != "/cancel" {
			t.Errorf("cancelled payload = %v", ev[0].Payload)
		}
		b.waitFor(t, "EDGE_IDLE reported", func() bool { return b.edgeState(t) == "EDGE_IDLE" })
		// A core job's cancel is a no-op: there are none.
		b.push(t, rpc.Push{Kind: rpc.PushCancel, Cancel: &rpc.Cancel{Scope: rpc.CancelCore, JobName: "refactor"}})
	})

	t.Run("CompactPushCompactsTheWindow", func(t *testing.T) {
		b.push(t, rpc.Push{Kind: rpc.PushCompact, Compact: &rpc.Compact{Reason: "/compact"}})
		ev := b.waitEvents(t, rpc.EventMemoryWriteCommitted, 1)
		sum, _ := ev[0].Payload["summary"].(map[string]any)
		if ev[0].Payload["kind"] != "reference_summary_delta" || sum["summary"] != "The user said hello and wants tabs." {
			t.Errorf("compaction payload = %v", ev[0].Payload)
		}
	})

	t.Run("StatusReportsAreCoalesced", func(t *testing.T) {
		b.waitFor(t, "EDGE_IDLE reported", func() bool { return b.edgeState(t) == "EDGE_IDLE" })
		// Status reports are coalesced: never more than one per 200 ms
		// (the bound holds however slow the machine); the test saw IDLE,
		// REASONING and IDLE again reported, so there are at least three.
		var reports int
		var span time.Duration
		b.pool.QueryRow(ctx, `SELECT count(*), coalesce(max(created_at) - min(created_at), '0')
			FROM choir_control.rpc_replays WHERE session_id = $1 AND verb = 'REPORT_STATUS'`, b.sessionID).Scan(&reports, &span)
		t.Logf("%d status reports over %s", reports, span)
		if reports < 3 || reports > int(span/(200*time.Millisecond))+1 {
			t.Errorf("%d status reports over %s", reports, span)
		}
	})

	t.Run("GracefulStopWritesTheSummaryBeforeTheFinalHeartbeat", func(t *testing.T) {
		if _, err := b.d.AgentStop(ctx, control.Scope{Admin: true, Actor: "test"}, "assistant"); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-b.agentDone:
			b.agentDone <- err
			if err != nil {
				t.Fatalf("agent: %v", err)
			}
		case <-time.After(time.Minute):
			t.Fatal("agent did not stop")
		}
		sum := b.events(t, rpc.EventSessionSummary)
		if len(sum) != 1 || sum[0].Payload["summary"] != "Session: greetings, tabs, a tool proposal approved." {
			t.Fatalf("session summaries = %v", sum)
		}
		var status, reason string
		var acked, last int64
		b.pool.QueryRow(ctx, "SELECT status, acked_rev, end_reason FROM choir_control.sessions WHERE session_id = $1",
			b.sessionID).Scan(&status, &acked, &reason)
		b.pool.QueryRow(ctx, "SELECT max(rev) FROM choir_control.session_events WHERE session_id = $1", b.sessionID).Scan(&last)
		// The summary is the last event, and the final heartbeat carried it.
		if status != "ended" || acked != last || sum[0].Rev != last || !strings.Contains(reason, "terminated by the agent") {
			t.Errorf("after stop: status %s (%s), acked %d, last event %d, summary at %d", status, reason, acked, last, sum[0].Rev)
		}
		var breaks int
		b.pool.QueryRow(ctx, "SELECT count(*) FROM choir_audit.chain_breaks").Scan(&breaks)
		if breaks != 0 {
			t.Errorf("%d chain breaks", breaks)
		}
		srv.Done()
	})
}
