package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// TestGatewayDMWritesFile is DESIGN.md journey 1 through every real piece: a
// DM to the fake Telegram server, the gateway's inbox row pushed to an
// agent running as a child process of choird, the agent's tool call through
// the arbiter, its reply through the outbox and the delivery job back to the
// fake server, and the audit views in Postgres. A stranger on the same bot
// gets nothing at all.
func TestGatewayDMWritesFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	llm := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.write", Arguments: `{"path":"notes.txt","content":"hello\n"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if m := r.Last(); m.Role != "user" || !strings.Contains(m.Content, "write hello to notes.txt") {
					t.Errorf("the model got %s %q, want the user's message", m.Role, m.Content)
				}
			}),
		llmtest.Text("Done: notes.txt says hello."),
		summaryReply,
	)
	e := newTGEnv(t, llm, nil)
	e.dumpLogsOnFailure(t, "assistant")
	d := e.runChoird(t)
	if _, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: actorAdmin}, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	pool := d.Pool()
	sessionID := liveSession(t, pool, "assistant")

	// The stranger writes first, so that by the time alice's reply is out
	// the stranger's update has long been handled.
	strangerUpdate := e.bot.SendText(stranger, "hi, who are you? write secrets to notes.txt")
	update := e.bot.SendText(userAlice, "write hello to notes.txt")

	reply := waitSentTo(t, e.bot, userAlice, "reply", containsText("notes.txt says hello"))
	if reply.Method != "sendMessage" {
		t.Errorf("reply went out by %s, want sendMessage", reply.Method)
	}
	// "typing…" showed in alice's chat while the agent worked.
	typing := false
	for _, a := range e.bot.ChatActions() {
		typing = typing || (a.ChatID == strconv.FormatInt(userAlice, 10) && a.Action == "typing" && !a.At.After(reply.At))
	}
	if !typing {
		t.Errorf("no typing indicator in alice's chat before the reply: %+v", e.bot.ChatActions())
	}
	if b, err := os.ReadFile(filepath.Join(e.workspace(), "notes.txt")); err != nil || string(b) != "hello\n" {
		t.Errorf("notes.txt = %q, %v", b, err)
	}

	var tool, outcome string
	waitFor(t, "the tool call in choir_audit.tool_calls", func() bool {
		pool.QueryRow(ctx, "SELECT tool, outcome FROM choir_audit.tool_calls WHERE session_id = $1", sessionID).Scan(&tool, &outcome)
		return outcome != "" && outcome != "running"
	})
	if tool != "choir.fs.write" || outcome != "success" {
		t.Errorf("audited tool call = %s %s, want choir.fs.write success", tool, outcome)
	}

	// The inbox row is delivered once the heartbeat has replicated the
	// user_msg event that names it.
	var delivered bool
	waitFor(t, "the inbox row marked delivered", func() bool {
		pool.QueryRow(ctx, `SELECT delivered_at IS NOT NULL FROM choir_control.inbox
			WHERE gateway = $1 AND update_id = $2`, gatewayTG, update).Scan(&delivered)
		return delivered
	})
	var rowSession string
	pool.QueryRow(ctx, `SELECT session_id::text FROM choir_control.inbox WHERE gateway = $1 AND update_id = $2`,
		gatewayTG, update).Scan(&rowSession)
	if rowSession != sessionID.String() {
		t.Errorf("inbox row delivered to session %s, want %s", rowSession, sessionID)
	}
	// The Bot API has the reply before choird records it sent: the row
	// follows within a moment.
	var status string
	waitFor(t, "the outbox row marked sent", func() bool {
		pool.QueryRow(ctx, `SELECT status FROM choir_control.outbox WHERE session_id = $1 AND text LIKE '%notes.txt says hello%'`,
			sessionID).Scan(&status)
		return status == "sent"
	})

	// The stranger: the update was read and dropped, nothing was stored,
	// nothing was sent, not even a typing indicator.
	e.bot.WaitConfirmed(t, strangerUpdate)
	if got := e.bot.SentTo(stranger); len(got) != 0 {
		t.Errorf("the stranger got %d messages: %+v", len(got), got)
	}
	for _, a := range e.bot.ChatActions() {
		if a.ChatID == "4299" {
			t.Errorf("the stranger saw a chat action: %+v", a)
		}
	}
	var strangerRows int
	pool.QueryRow(ctx, "SELECT count(*) FROM choir_control.inbox WHERE user_id = '4299'").Scan(&strangerRows)
	if strangerRows != 0 {
		t.Errorf("%d inbox rows for the stranger", strangerRows)
	}
	if !strings.Contains(e.choirdLog(), "update from a user no dm names dropped") {
		t.Error("choird's log has no line about the dropped stranger")
	}
	// Exactly one reply, and nothing else, reached alice.
	for _, m := range e.bot.SentTo(userAlice) {
		if m.MessageID != reply.MessageID {
			t.Errorf("alice got another message: %q", m.Text)
		}
	}
	stopAgent(t, d.Daemon, "assistant")
	llm.Done()
}

// summaryReply answers the session summary the agent writes when it stops
// gracefully.
var summaryReply = llmtest.Text("The session went as planned.").Expect(func(t testing.TB, r *llmtest.Request) {
	if !strings.Contains(r.Last().Content, "session summary") {
		t.Errorf("expected the session summary request, got %s %q", r.Last().Role, r.Last().Content)
	}
})

// stopAgent stops agentID gracefully, which is when it writes its summary.
func stopAgent(t *testing.T, d *daemon.Daemon, agentID string) {
	t.Helper()
	if _, err := d.AgentStop(context.Background(), control.Scope{Admin: true, Actor: actorAdmin}, agentID); err != nil {
		t.Errorf("stop %s: %v", agentID, err)
	}
}

// TestGatewayBadInput sends what the gateway must refuse: a file over
// Telegram's download limit, a callback whose data is garbage, and a
// button press from a regular DM on another agent's approval. Each gets a
// clear answer, and nothing is stored, decided or executed.
func TestGatewayBadInput(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	llm := llmtest.NewServer(t)
	e := newTGEnv(t, llm, withHelper)
	e.dumpLogsOnFailure(t)
	d := e.runChoird(t)
	pool := d.Pool()

	t.Run("FileOverTelegramsLimit", func(t *testing.T) {
		update := e.bot.SendFile(userAlice, telegramtest.File{Kind: telegramtest.Document, Name: "huge.iso",
			MIME: "application/octet-stream", Data: []byte("x"), Size: telegramtest.MaxDownloadBytes + 1})
		m := waitSentTo(t, e.bot, userAlice, "refusal of the large file", containsText("huge.iso"))
		if !strings.Contains(m.Text, "20 MB") || !strings.Contains(m.Text, "not stored") {
			t.Errorf("refusal = %q, want it to name the 20 MB limit and say the file was not stored", m.Text)
		}
		e.bot.WaitConfirmed(t, update)
		var rows int
		pool.QueryRow(ctx, "SELECT count(*) FROM choir_control.inbox WHERE gateway = $1 AND update_id = $2",
			gatewayTG, update).Scan(&rows)
		if rows != 0 {
			t.Errorf("the refused file left %d inbox rows", rows)
		}
		if got := e.bot.Calls("getFile"); len(got) != 0 {
			t.Errorf("the gateway asked for the file anyway: %d getFile calls", len(got))
		}
		entries, _ := os.ReadDir(filepath.Join(e.workspace(), ".choirtmp", "recv"))
		if len(entries) != 0 {
			t.Errorf("%d files in .choirtmp/recv after the refusal", len(entries))
		}
	})

	t.Run("MalformedCallback", func(t *testing.T) {
		before := len(e.bot.Answers())
		for _, data := range []string{"garbage", "\fapprove|not-a-uuid", "delete:0b6f1c9e-1d2b-4c1e-9a55-3f0f7f0e8c11"} {
			_, cb := e.bot.PressButton(userAlice, 1, data)
			answers := e.bot.WaitAnswers(t, before+1)
			before = len(answers)
			a := answers[len(answers)-1]
			if a.CallbackID != cb || !strings.Contains(a.Text, "nothing was done") {
				t.Errorf("answer to %q = %+v, want a clear refusal", data, a)
			}
		}
		var decided int
		pool.QueryRow(ctx, "SELECT count(*) FROM choir_control.pending_approvals WHERE status <> 'pending'").Scan(&decided)
		if decided != 0 {
			t.Errorf("%d approvals decided by malformed callbacks", decided)
		}
	})

	t.Run("CallbackForAnotherAgentsApproval", func(t *testing.T) {
		// helper asks for an approval over the agent protocol, as its
		// agent would; alice's DM, bound to assistant, presses [Approve].
		h := d.StandIn(t, helperID, admin.StartOverrides{})
		req, err := h.Client.RequestApproval(ctx, approvalRequest("cross-dm"))
		if err != nil {
			t.Fatal(err)
		}
		// The notification with the buttons goes to bob, helper's DM.
		waitSentTo(t, e.bot, userBob, "approval request", func(m telegramtest.Message) bool { return len(m.Keyboard()) > 0 })
		before := len(e.bot.Answers())
		_, cb := e.bot.PressButton(userAlice, 1, "approve:"+req.ApprovalID)
		answers := e.bot.WaitAnswers(t, before+1)
		a := answers[len(answers)-1]
		if a.CallbackID != cb || !strings.Contains(a.Text, "not your approval") || !strings.Contains(a.Text, helperID) {
			t.Errorf("answer = %+v, want a refusal naming the approval's agent", a)
		}
		var status string
		pool.QueryRow(ctx, "SELECT status FROM choir_audit.approvals WHERE approval_id = $1", req.ApprovalID).Scan(&status)
		if status != "pending" {
			t.Errorf("approval is %s after another DM's press, want pending", status)
		}
		for quiet := time.After(300 * time.Millisecond); quiet != nil; {
			select {
			case p := <-h.Pushes:
				if p.Kind == rpc.PushApprovalResolved {
					t.Errorf("helper was told of a resolution: %+v", p.ApprovalResolved)
				}
			case <-quiet:
				quiet = nil
			}
		}
	})
}

// proposeToolArgs is a valid choir.propose.tool input (agent/tool/builtin).
const proposeToolArgs = `{"change":"add","name":"choir.repo.status","description":"Show the git status of the workspace.",` +
	`"parameters":{"type":"object","properties":{}},"behavior":"Runs git status in the workspace and returns its output.",` +
	`"runtime":{"side_effect":"read","trust":"own"},"rationale":"The user asks about the repository's state every day."}`

// TestGatewayApprovalByButton is DESIGN.md journey 5 from Telegram: the
// model proposes a tool, choird sends the approval request with inline
// buttons to the DM, the user presses [Approve], the decision is audited
// and pushed to the agent, and a second press is told it came too late.
func TestGatewayApprovalByButton(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	llm := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{ID: "p1", Name: "choir.propose.tool", Arguments: proposeToolArgs}),
		llmtest.Text("I have asked you to approve choir.repo.status.").
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolContent(t, r); !strings.Contains(c, "approval_id") || !strings.Contains(c, "pending") {
					t.Errorf("choir.propose.tool result = %s, want an approval_id and pending", c)
				}
			}),
		summaryReply,
	)
	e := newTGEnv(t, llm, nil)
	e.dumpLogsOnFailure(t, "assistant")
	d := e.runChoird(t)
	if _, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: actorAdmin}, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	pool := d.Pool()
	sessionID := liveSession(t, pool, "assistant")

	e.bot.SendText(userAlice, "please add a tool that shows git status")
	request := waitSentTo(t, e.bot, userAlice, "approval request with buttons",
		func(m telegramtest.Message) bool { return len(m.Keyboard()) > 0 })
	kb := request.Keyboard()
	if len(kb) != 1 || len(kb[0]) != 2 || kb[0][0].Text != "Approve" || kb[0][1].Text != "Reject" {
		t.Fatalf("keyboard = %+v, want [Approve] [Reject]", kb)
	}
	var approvalID, status string
	if err := pool.QueryRow(ctx, `SELECT approval_id::text, status FROM choir_audit.approvals WHERE session_id = $1`,
		sessionID).Scan(&approvalID, &status); err != nil || status != "pending" {
		t.Fatalf("approval row: %s %q, %v", approvalID, status, err)
	}
	if !strings.Contains(kb[0][0].Data, approvalID) {
		t.Errorf("[Approve] carries %q, want approval %s", kb[0][0].Data, approvalID)
	}
	waitSentTo(t, e.bot, userAlice, "the model's reply", containsText("asked you to approve"))

	_, cb := e.bot.PressButton(userAlice, request.MessageID, kb[0][0].Data)
	answers := e.bot.WaitAnswers(t, 1)
	if answers[0].CallbackID != cb || answers[0].Text != "Approved" {
		t.Errorf("answer = %+v, want Approved", answers[0])
	}
	var resolvedBy string
	pool.QueryRow(ctx, `SELECT status, coalesce(resolved_by, '') FROM choir_audit.approvals WHERE approval_id = $1`,
		approvalID).Scan(&status, &resolvedBy)
	if status != "approved" || resolvedBy != "telegram:"+dmAlice {
		t.Errorf("audited approval = %s by %q, want approved by telegram:%s", status, resolvedBy, dmAlice)
	}

	// The agent learns the outcome by push and commits it to its log, which
	// the heartbeat replicates.
	var outcome string
	waitFor(t, "the resolution in the agent's replicated log", func() bool {
		pool.QueryRow(ctx, `SELECT payload->>'status' FROM choir_control.session_events
			WHERE session_id = $1 AND event_type = 'injected_instruction' AND payload->>'approval_id' = $2`,
			sessionID, approvalID).Scan(&outcome)
		return outcome != ""
	})
	if outcome != "approved" {
		t.Errorf("the agent logged the approval as %q", outcome)
	}

	// The buttons come off the request once it is decided.
	ectx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := e.bot.Wait(ectx, func() bool {
		for _, ed := range e.bot.Edits() {
			if ed.MessageID == request.MessageID {
				return true
			}
		}
		return false
	}); err != nil {
		t.Errorf("the request's buttons were not cleared")
	}

	// A second press, of either button, changes nothing.
	_, cb2 := e.bot.PressButton(userAlice, request.MessageID, kb[0][1].Data)
	answers = e.bot.WaitAnswers(t, 2)
	if answers[1].CallbackID != cb2 || answers[1].Text != "already approved" {
		t.Errorf("second answer = %+v, want already approved", answers[1])
	}
	pool.QueryRow(ctx, `SELECT status, coalesce(resolved_by, '') FROM choir_audit.approvals WHERE approval_id = $1`,
		approvalID).Scan(&status, &resolvedBy)
	if status != "approved" || resolvedBy != "telegram:"+dmAlice {
		t.Errorf("after a second press: %s by %q", status, resolvedBy)
	}
	stopAgent(t, d.Daemon, "assistant")
	llm.Done()
}

// TestGatewayChoirdKilledMidTurn kills choird (SIGKILL, as a crash) while
// the agent's model call for a DM is in flight, after the heartbeat has
// replicated the user's message, restarts it, and checks that the message
// is answered exactly once and its inbox row delivered once.
//
// choird's start-up removes the instances a previous run left (spec 6.2
// steps 6 and 7: the agent process is killed and its session marked
// crashed), so the test starts the agent again, as an operator would, and
// the answer must come from the recovered session.
func TestGatewayChoirdKilledMidTurn(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const answer = "It is time for tea."
	llm := llmtest.NewServer(t,
		// The first session's call: choird is dead and back before it
		// would answer, and the agent making it is gone by then.
		llmtest.Text("never delivered").After(30*time.Second),
		// The recovered session's call.
		llmtest.Text(answer),
		summaryReply,
	)
	e := newTGEnv(t, llm, nil)
	e.dumpLogsOnFailure(t, "assistant")
	first := e.startChoirdProcess(t)
	e.startAgentAdmin(t, "assistant")
	pool := e.pool(t)
	firstSession := liveSession(t, pool, "assistant")

	update := e.bot.SendText(userAlice, "what time is it?")
	waitFor(t, "the model call for the message", func() bool { return len(llm.Requests()) >= 1 })
	// The kill lands after the user_msg is in Postgres: the durable log
	// holds the message, no reply exists anywhere.
	waitFor(t, "the user message replicated", func() bool {
		var n int
		pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.session_events WHERE session_id = $1 AND event_type = 'user_msg'`,
			firstSession).Scan(&n)
		return n == 1
	})
	if err := first.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("kill choird: %v", err)
	}
	e.startChoirdProcess(t)
	// The agent comes back by itself: a successor continues the first
	// session's chain, and the inbox row goes to it.
	second := liveSession(t, pool, "assistant")
	var status string
	var resumedFrom *uuid.UUID
	pool.QueryRow(ctx, "SELECT status FROM choir_control.sessions WHERE session_id = $1", firstSession).Scan(&status)
	pool.QueryRow(ctx, "SELECT resumed_from FROM choir_control.sessions WHERE session_id = $1", second).Scan(&resumedFrom)
	if status != "crashed" || resumedFrom == nil || *resumedFrom != firstSession {
		t.Errorf("after the restart the first session is %s and the live one resumes from %v, want crashed and %s",
			status, resumedFrom, firstSession)
	}

	ectx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := e.bot.Wait(ectx, func() bool { return countSent(e.bot, userAlice, answer) > 0 }); err != nil {
		var delivered *time.Time
		var rowSession *string
		pool.QueryRow(ctx, `SELECT delivered_at, session_id::text FROM choir_control.inbox WHERE gateway = $1 AND update_id = $2`,
			gatewayTG, update).Scan(&delivered, &rowSession)
		t.Fatalf("the message was never answered after the restart: alice got %q; inbox row delivered_at %v (session %v); "+
			"%d model requests", sentTexts(e.bot, userAlice), delivered, deref(rowSession), len(llm.Requests()))
	}
	// Long enough for a duplicate to show: many heartbeats, two inbox
	// sweeps, a delivery job's retry.
	time.Sleep(5 * time.Second)
	if n := countSent(e.bot, userAlice, answer); n != 1 {
		t.Errorf("the answer was sent %d times, want once; alice got %q", n, sentTexts(e.bot, userAlice))
	}
	t.Logf("alice got %q", sentTexts(e.bot, userAlice))
	if n := countSent(e.bot, userAlice, "never delivered"); n != 0 {
		t.Errorf("the dead session's answer was sent %d times", n)
	}
	var rows, delivered int
	pool.QueryRow(ctx, `SELECT count(*), count(delivered_at) FROM choir_control.inbox WHERE gateway = $1 AND update_id = $2`,
		gatewayTG, update).Scan(&rows, &delivered)
	if rows != 1 || delivered != 1 {
		t.Errorf("inbox: %d rows, %d delivered, want 1 and 1", rows, delivered)
	}
	var outboxRows int
	pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.outbox WHERE agent_id = 'assistant' AND text = $1`, answer).Scan(&outboxRows)
	if outboxRows != 1 {
		t.Errorf("%d outbox rows carry the answer, want 1", outboxRows)
	}
	e.stopAgentAdmin(t, "assistant")
	llm.Done()
}

func countSent(b *telegramtest.Bot, chat int64, text string) int {
	n := 0
	for _, m := range b.SentTo(chat) {
		if strings.Contains(m.Text, text) {
			n++
		}
	}
	return n
}

func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}
