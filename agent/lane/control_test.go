package lane_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/rpc"
)

func (b *bundle) events(t testing.TB) []rpc.Event {
	t.Helper()
	head, _ := b.log.Head()
	evs, err := b.log.Range(1, head)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := commitlog.VerifyChain(0, rpc.Genesis, evs); err != nil {
		t.Fatal(err)
	}
	return evs
}

func (b *bundle) ofType(t testing.TB, typ rpc.EventType) []rpc.Event {
	t.Helper()
	var out []rpc.Event
	for _, e := range b.events(t) {
		if e.Type == typ {
			out = append(out, e)
		}
	}
	return out
}

func waitUntil(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (b *bundle) waitEvent(t testing.TB, typ rpc.EventType, n int) []rpc.Event {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d %s events", n, typ), func() bool { return len(b.ofType(t, typ)) >= n })
	return b.ofType(t, typ)
}

func payload(t testing.TB, e rpc.Event) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(e.Payload, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func hasMessage(r *llmtest.Request, role, content string) bool {
	return slices.ContainsFunc(r.Messages, func(m llmtest.Message) bool { return m.Role == role && strings.Contains(m.Content, content) })
}

func TestEdgeInboxExactlyOnce(t *testing.T) {
	t.Parallel()

	t.Run("RedeliveredRowIsDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{}, llmtest.Text("hi Ada"))
		if err := b.edge.Deliver(lane.UserMessage{Text: "hello", InboxID: 41, MessageID: "41"}); err != nil {
			t.Fatal(err)
		}
		b.out.next(t)
		err := b.edge.Deliver(lane.UserMessage{Text: "hello", InboxID: 41})
		if !errors.Is(err, lane.ErrDuplicateInbox) {
			t.Fatalf("second delivery: %v, want ErrDuplicateInbox", err)
		}
		if err := b.edge.Inject(lane.Injection{InboxID: 41, Text: "x"}); !errors.Is(err, lane.ErrDuplicateInbox) {
			t.Fatalf("injection of a taken row: %v", err)
		}
		msgs := b.ofType(t, rpc.EventUserMsg)
		if len(msgs) != 1 {
			t.Fatalf("%d user messages committed", len(msgs))
		}
		if p := payload(t, msgs[0]); p["inbox_id"] != float64(41) || p["message_id"] != "41" || p["text"] != "hello" {
			t.Errorf("user_msg payload = %s", msgs[0].Payload)
		}
		if snap := b.edge.Snapshot(); !slices.Equal(snap.InboxIDs, []int64{41}) {
			t.Errorf("snapshot inbox ids = %v", snap.InboxIDs)
		}
		b.srv.Done()
	})

	t.Run("RestoredSessionRemembersRowsOfSnapshotAndTail", func(t *testing.T) {
		t.Parallel()
		// The tail choird returns holds the rows taken after the snapshot;
		// the snapshot carries those before it.
		srv := llmtest.NewServer(t, llmtest.Text("new one answered"))
		reg, _ := builtin.Build(builtin.Config{})
		src, app, _ := commitlog.New(0, rpc.Genesis)
		app.Append(rpc.EventUserMsg, "edge", json.RawMessage(`{"text":"old","inbox_id":9}`))
		answered, _ := app.Append(rpc.EventModelOutput, "edge", json.RawMessage(`{"text":"old answered"}`))
		app.Append(rpc.EventInjectedInstruction, "edge", json.RawMessage(`{"source":"user","text":"tabs","inbox_id":10}`))
		tail, _ := src.Range(1, 3)
		log, app2, err := commitlog.NewWithHistory(3, tail[2].Hash, tail)
		if err != nil {
			t.Fatal(err)
		}
		arb := arbiter.New(arbiter.Config{Appender: app2, Tools: reg})
		out := newSink()
		edge := lane.NewEdge(lane.EdgeConfig{Arbiter: arb, Log: log, Tools: reg, LLM: &llm.Client{}, Model: srv.Model, Out: out})
		if err := edge.Restore(lane.EdgeSnapshot{InboxIDs: []int64{3}}); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{}, 2)
		go func() { arb.Run(ctx); done <- struct{}{} }()
		go func() { edge.Run(ctx); done <- struct{}{} }()
		defer func() { cancel(); <-done; <-done }()
		for _, id := range []int64{3, 9, 10} {
			if err := edge.Deliver(lane.UserMessage{Text: "again", InboxID: id}); !errors.Is(err, lane.ErrDuplicateInbox) {
				t.Errorf("row %d taken before the restart was accepted again: %v", id, err)
			}
		}
		// The last answer of the old run goes out again under its ID, for
		// choird's outbox to drop if it was sent before.
		if got := out.next(t); got != "old answered" || out.sentIDs()[0] != lane.MessageID("reply", answered.Hash) {
			t.Errorf("resent answer = %q under %v", got, out.sentIDs())
		}
		if err := edge.Deliver(lane.UserMessage{Text: "new", InboxID: 11}); err != nil {
			t.Fatal(err)
		}
		if got := out.next(t); got != "new one answered" {
			t.Errorf("answer = %q", got)
		}
	})
}

func TestEdgeInjection(t *testing.T) {
	t.Parallel()

	t.Run("MidTurnAtTheNextSafePoint", func(t *testing.T) {
		t.Parallel()
		var b *bundle
		b = setup(t, lane.Budgets{},
			llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.write", Arguments: `{"path":"a.txt","content":"x"}`}).
				Expect(func(t testing.TB, r *llmtest.Request) {
					// Injected while the model is thinking.
					if err := b.edge.Inject(lane.Injection{InboxID: 5, Text: "use tabs, not spaces"}); err != nil {
						t.Error(err)
					}
				}),
			llmtest.Text("Done, with tabs.").Expect(func(t testing.TB, r *llmtest.Request) {
				last := r.Last()
				if last.Role != "user" || last.Content != "Injected instruction: use tabs, not spaces" {
					t.Errorf("last message = %+v, want the injection after the tool result", last)
				}
				if r.Messages[len(r.Messages)-2].Role != "tool" {
					t.Errorf("the injection does not follow the tool result")
				}
			}))
		b.edge.Deliver(lane.UserMessage{Text: "write a.txt", InboxID: 4})
		if got := b.out.next(t); got != "Done, with tabs." {
			t.Fatalf("answer = %q", got)
		}
		evs := b.events(t)
		var order []string
		for _, e := range evs {
			order = append(order, string(e.Type))
		}
		i := slices.Index(order, "injected_instruction")
		if i < 0 || order[i-1] != "tool_result_committed" || order[i+1] != "llm_call_committed" {
			t.Fatalf("events = %v", order)
		}
		if p := payload(t, evs[i]); p["inbox_id"] != float64(5) || p["text"] != "use tabs, not spaces" || p["source"] != "user" {
			t.Errorf("injected_instruction payload = %s", evs[i].Payload)
		}
		b.srv.Done()
	})

	t.Run("WhenIdleCommittedAtOnceAndSeenNextTurn", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{}, llmtest.Text("Noted.").Expect(func(t testing.TB, r *llmtest.Request) {
			if !hasMessage(r, "user", "Injected instruction: my name is Ada") {
				t.Errorf("the idle injection is not in the next turn's prompt")
			}
		}))
		if err := b.edge.Inject(lane.Injection{InboxID: 8, Text: "my name is Ada"}); err != nil {
			t.Fatal(err)
		}
		// No model call: it is committed and waits for the next turn.
		b.waitEvent(t, rpc.EventInjectedInstruction, 1)
		if n := len(b.srv.Requests()); n != 0 {
			t.Fatalf("an injection at IDLE made %d model calls", n)
		}
		b.edge.Deliver(lane.UserMessage{Text: "who am I?"})
		b.out.next(t)
		b.srv.Done()
	})
}

func TestEdgeApprovals(t *testing.T) {
	t.Parallel()

	t.Run("ProposalPendsAndItsOutcomeReachesTheNextPrompt", func(t *testing.T) {
		t.Parallel()
		var b *bundle
		var approvalID string
		b = setup(t, lane.Budgets{},
			llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.propose.tool", Arguments: `{"change":"add",
"name":"choir.repo.status","description":"git status","parameters":{"type":"object"},"behavior":"runs git status",
"runtime":{"side_effect":"read","trust":"own"},"rationale":"asked daily"}`}),
			llmtest.Text("I asked for approval.").Expect(func(t testing.TB, r *llmtest.Request) {
				var res struct {
					Output struct {
						ApprovalID string `json:"approval_id"`
						Status     string `json:"status"`
					} `json:"output"`
				}
				json.Unmarshal([]byte(lastToolResult(t, r)), &res)
				if res.Output.Status != "pending" || res.Output.ApprovalID == "" {
					t.Errorf("tool answer = %s", lastToolResult(t, r))
				}
				approvalID = res.Output.ApprovalID
			}),
			llmtest.Text("It was approved.").Expect(func(t testing.TB, r *llmtest.Request) {
				want := "Approval " + approvalID + ": your choir.propose.tool request (add tool choir.repo.status: asked daily) was approved by telegram:dm-1."
				if !hasMessage(r, "system", want) {
					t.Errorf("outcome not in the prompt; want %q in %q", want, r.System())
				}
			}))
		b.edge.Deliver(lane.UserMessage{Text: "I want a git status tool"})
		if got := b.out.next(t); got != "I asked for approval." {
			t.Fatalf("answer = %q", got)
		}
		calls := len(b.srv.Requests())
		b.edge.ResolveApproval(lane.ApprovalResolution{ApprovalID: approvalID, Status: "approved",
			ResolvedBy: "telegram:dm-1", ResolvedAt: time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)})
		evs := b.waitEvent(t, rpc.EventInjectedInstruction, 1)
		p := payload(t, evs[0])
		if p["source"] != "approval" || p["approval_id"] != approvalID || p["status"] != "approved" ||
			p["resolved_by"] != "telegram:dm-1" || p["tool"] != "choir.propose.tool" || p["call_id"] == "" {
			t.Errorf("approval event = %s", evs[0].Payload)
		}
		if n := len(b.srv.Requests()); n != calls {
			t.Errorf("the outcome made %d model calls by itself", n-calls)
		}
		b.edge.Deliver(lane.UserMessage{Text: "and?"})
		b.out.next(t)
		b.srv.Done()
	})

	t.Run("OutcomeDuringATurnJoinsItAtTheSafePoint", func(t *testing.T) {
		t.Parallel()
		var b *bundle
		b = setup(t, lane.Budgets{},
			llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.read", Arguments: `{"path":"."}`}).
				Expect(func(t testing.TB, r *llmtest.Request) {
					b.edge.ResolveApproval(lane.ApprovalResolution{ApprovalID: "appr-77", Status: "rejected",
						ResolvedBy: "timeout", ResolvedAt: time.Now()})
				}),
			llmtest.Text("ok").Expect(func(t testing.TB, r *llmtest.Request) {
				if m := r.Last(); m.Role != "system" || !strings.Contains(m.Content, "Approval appr-77: your request was rejected by timeout.") {
					t.Errorf("last message = %+v", m)
				}
			}))
		b.edge.Deliver(lane.UserMessage{Text: "list files"})
		b.out.next(t)
		b.srv.Done()
	})
}

func TestEdgeCancel(t *testing.T) {
	t.Parallel()

	t.Run("AbandonsTheModelCallInFlight", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{}, llmtest.Hang(), llmtest.Text("next"))
		b.edge.Deliver(lane.UserMessage{Text: "think hard"})
		waitUntil(t, "the model call", func() bool { return len(b.srv.Requests()) == 1 })
		if !b.edge.Cancel("edge", "user said stop") {
			t.Fatal("Cancel found no turn")
		}
		if got := b.out.next(t); !strings.HasPrefix(got, "Cancelled") {
			t.Fatalf("reply = %q", got)
		}
		evs := b.waitEvent(t, rpc.EventCancelled, 1)
		if p := payload(t, evs[0]); p["scope"] != "edge" || p["reason"] != "user said stop" || p["state"] != "EDGE_REASONING" {
			t.Errorf("cancelled payload = %s", evs[0].Payload)
		}
		if n := len(b.ofType(t, rpc.EventLLMCallCommitted)); n != 0 {
			t.Errorf("the abandoned call was committed (%d)", n)
		}
		if id := b.out.sentIDs()[0]; id != lane.MessageID("cancel", evs[0].Hash) {
			t.Errorf("reply id %s is not derived from the cancelled event", id)
		}
		// The lane is back at IDLE and answers the next message.
		b.edge.Deliver(lane.UserMessage{Text: "hi"})
		if got := b.out.next(t); got != "next" {
			t.Errorf("after cancel: %q", got)
		}
	})

	t.Run("ToolCallsOfACompletedStepDoNotRun", func(t *testing.T) {
		t.Parallel()
		var b *bundle
		b = setup(t, lane.Budgets{},
			llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.write", Arguments: `{"path":"never.txt","content":"x"}`}).
				Expect(func(t testing.TB, r *llmtest.Request) { b.edge.Stop("agent stop") }))
		b.edge.Deliver(lane.UserMessage{Text: "write it"})
		if got := b.out.next(t); !strings.Contains(got, "shutting down") {
			t.Fatalf("reply = %q", got)
		}
		select {
		case err := <-b.done:
			b.done <- err
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("lane still running after Stop")
		}
		if n := len(b.ofType(t, rpc.EventToolCallCommitted)); n != 0 {
			t.Errorf("%d tool calls ran after the stop", n)
		}
		if p := payload(t, b.ofType(t, rpc.EventCancelled)[0]); p["scope"] != "shutdown" {
			t.Errorf("cancelled payload = %v", p)
		}
		if b.edge.State() != lane.EdgeTerminated {
			t.Errorf("state = %s", b.edge.State())
		}
	})

	t.Run("NothingToCancelWhenIdle", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{}, llmtest.Text("fine"))
		if b.edge.Cancel("all", "") {
			t.Fatal("Cancel reported a turn at IDLE")
		}
		// A later turn is not cancelled by it.
		b.edge.Deliver(lane.UserMessage{Text: "hi"})
		if got := b.out.next(t); got != "fine" {
			t.Fatalf("answer = %q", got)
		}
	})

	t.Run("StopAtIdleLeavesQueuedMessages", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{})
		b.edge.Stop("agent stop")
		select {
		case err := <-b.done:
			b.done <- err
		case <-time.After(10 * time.Second):
			t.Fatal("lane still running after Stop")
		}
		b.edge.Deliver(lane.UserMessage{Text: "too late", InboxID: 3})
		time.Sleep(50 * time.Millisecond)
		if n := len(b.events(t)); n != 0 {
			t.Errorf("%d events after a stop at IDLE", n)
		}
	})
}

func TestEdgeCompactionRequest(t *testing.T) {
	t.Parallel()
	b := setup(t, lane.Budgets{}, llmtest.Text("Hello Ada."),
		llmtest.Text(`{"memory_delta": {"mode": "append", "summary_update": "The user is Ada."}}`).Expect(func(t testing.TB, r *llmtest.Request) {
			if len(r.Tools) != 0 || !strings.Contains(r.System(), "reference summary") {
				t.Errorf("not a compaction call: tools %v", r.ToolNames())
			}
		}))
	b.edge.Deliver(lane.UserMessage{Text: "my name is Ada"})
	b.out.next(t)
	b.edge.RequestCompaction()
	evs := b.waitEvent(t, rpc.EventMemoryWriteCommitted, 1)
	p := payload(t, evs[0])
	if sum, _ := p["summary"].(map[string]any); p["kind"] != "reference_summary_delta" || sum["summary"] != "The user is Ada." ||
		p["trigger"] != "manual" {
		t.Errorf("compaction event = %s", evs[0].Payload)
	}
	if got := b.out.next(t); !strings.HasPrefix(got, "Compacted 2 earlier messages") {
		t.Errorf("notice = %q", got)
	}
	waitUntil(t, "IDLE", func() bool { return b.edge.State() == lane.EdgeIdle })
	b.srv.Done()
}

func TestEdgeStatus(t *testing.T) {
	t.Parallel()
	b := setup(t, lane.Budgets{MaxToolCallsPerSession: 5, TotalSessionTokens: 100000},
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.skill.start", Arguments: `{"name":"tool-builder"}`}),
		llmtest.Text("started"))
	st := b.edge.Status()
	if st.Lane != "edge" || st.State != "EDGE_IDLE" || *st.BudgetRemaining.ToolCalls != 5 || *st.BudgetRemaining.Tokens != 100000 {
		t.Fatalf("status at start = %+v", st)
	}
	before := b.statusCalls.Load()
	b.edge.Deliver(lane.UserMessage{Text: "build a tool"})
	b.out.next(t)
	waitUntil(t, "IDLE", func() bool { return b.edge.State() == lane.EdgeIdle })
	st = b.edge.Status()
	if err := st.Validate(); err != nil {
		t.Fatal(err)
	}
	if st.Skill != "tool-builder" || st.Step == "" || *st.BudgetRemaining.ToolCalls != 4 || *st.BudgetRemaining.Tokens >= 100000 {
		t.Errorf("status after a turn = %+v", st)
	}
	// CONTEXT_READY, REASONING, WAITING_TOOL, the skill start, REASONING,
	// FINALIZING, IDLE.
	if n := b.statusCalls.Load() - before; n < 7 {
		t.Errorf("%d status changes signalled, want at least 7", n)
	}
}

func TestEdgeSessionSummary(t *testing.T) {
	t.Parallel()

	t.Run("CommittedAsSessionSummary", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{}, llmtest.Text("Hello Ada."),
			llmtest.Text("Ada said hello.").Expect(func(t testing.TB, r *llmtest.Request) {
				if len(r.Tools) != 0 || !strings.Contains(r.System(), "session is ending") || !hasMessage(r, "user", "hi, I am Ada") {
					t.Errorf("summary request: system %q", r.System())
				}
			}))
		b.edge.Deliver(lane.UserMessage{Text: "hi, I am Ada"})
		b.out.next(t)
		ev, err := b.edge.SessionSummary(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p := payload(t, ev)
		if ev.Type != rpc.EventSessionSummary || p["summary"] != "Ada said hello." || p["through_rev"] != float64(ev.Rev-2) {
			t.Errorf("summary event = %+v %s", ev, ev.Payload)
		}
		b.srv.Done()
	})

	t.Run("NoConversationNoCall", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{})
		if _, err := b.edge.SessionSummary(context.Background()); !errors.Is(err, lane.ErrNothingToSummarise) {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("BoundedByItsContext", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{}, llmtest.Text("Hello."), llmtest.Hang())
		b.edge.Deliver(lane.UserMessage{Text: "hi"})
		b.out.next(t)
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if _, err := b.edge.SessionSummary(ctx); err == nil {
			t.Fatal("a hung summary call succeeded")
		}
		if n := len(b.ofType(t, rpc.EventSessionSummary)); n != 0 {
			t.Errorf("%d summaries committed", n)
		}
	})
}

func TestEdgeReplyIDs(t *testing.T) {
	t.Parallel()
	b := setup(t, lane.Budgets{}, llmtest.Text("one"), llmtest.ServerError(500, "down"))
	b.edge.Deliver(lane.UserMessage{Text: "a"})
	b.out.next(t)
	b.edge.Deliver(lane.UserMessage{Text: "b"})
	b.out.next(t)
	outs := b.ofType(t, rpc.EventModelOutput)
	ids := b.out.sentIDs()
	if len(outs) != 2 || len(ids) != 2 || ids[0] != lane.MessageID("reply", outs[0].Hash) || ids[1] != lane.MessageID("notice", outs[1].Hash) {
		t.Fatalf("ids = %v; want those of the model's answer and of the lane's notice, both committed", ids)
	}
	if p := payload(t, outs[1]); p["source"] != "lane" || !strings.Contains(p["text"].(string), "HTTP 500") {
		t.Errorf("the lane's notice is committed as %s", outs[1].Payload)
	}
	for _, id := range ids {
		if !rpc.ValidID(id) {
			t.Errorf("%q is not a valid message ID", id)
		}
	}
}

func TestEdgeResumesTheInterruptedTurn(t *testing.T) {
	t.Parallel()
	// The log of the crashed run: a message, a model step that called a
	// tool, and its result; the answer never came.
	srv := llmtest.NewServer(t, llmtest.Text("It is time for tea.").Expect(func(t testing.TB, r *llmtest.Request) {
		var sawUser, sawTool bool
		for _, m := range r.Messages {
			sawUser = sawUser || (m.Role == "user" && m.Content == "what time is it?")
			sawTool = sawTool || (m.Role == "assistant" && strings.Contains(m.Content, "[earlier tool call choir.fs.read: success]"))
		}
		if !sawUser || !sawTool {
			t.Errorf("resumed prompt lacks the message (%v) or the progress (%v)", sawUser, sawTool)
		}
	}))
	reg, _ := builtin.Build(builtin.Config{})
	src, app, _ := commitlog.New(0, rpc.Genesis)
	app.Append(rpc.EventUserMsg, "edge", json.RawMessage(`{"text":"what time is it?","inbox_id":21}`))
	app.Append(rpc.EventModelOutput, "edge", json.RawMessage(`{"text":"","tool_calls":["choir.fs.read"]}`))
	app.Append(rpc.EventToolResultCommitted, "edge", json.RawMessage(`{"call_id":"c1","tool":"choir.fs.read","status":"success"}`))
	tail, _ := src.Range(1, 3)
	log, app2, err := commitlog.NewWithHistory(3, tail[2].Hash, tail)
	if err != nil {
		t.Fatal(err)
	}
	arb := arbiter.New(arbiter.Config{Appender: app2, Tools: reg})
	out := newSink()
	edge := lane.NewEdge(lane.EdgeConfig{Arbiter: arb, Log: log, Tools: reg, LLM: &llm.Client{}, Model: srv.Model, Out: out})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{}, 2)
	go func() { arb.Run(ctx); done <- struct{}{} }()
	go func() { edge.Run(ctx); done <- struct{}{} }()
	defer func() { cancel(); <-done; <-done }()
	if got := out.next(t); got != "It is time for tea." {
		t.Fatalf("answer = %q", got)
	}
	head, _ := log.Head()
	evs, _ := log.Range(4, head)
	for _, e := range evs {
		if e.Type == rpc.EventUserMsg {
			t.Errorf("the message was committed again at %d", e.Rev)
		}
	}
	if err := edge.Deliver(lane.UserMessage{Text: "again", InboxID: 21}); !errors.Is(err, lane.ErrDuplicateInbox) {
		t.Errorf("redelivery of the resumed row: %v", err)
	}
	srv.Done()
}

// TestEdgeStopAfterTurn: the day's rollover stops the lane after the turn
// in progress, not inside it. A stop asked for mid-turn lets the turn run
// its tool and answer; the lane then ends at IDLE, and a message that
// arrives after it is not taken (it stays in choird's inbox).
func TestEdgeStopAfterTurn(t *testing.T) {
	t.Parallel()
	var b *bundle
	b = setup(t, lane.Budgets{},
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.write", Arguments: `{"path":"done.txt","content":"x"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) { b.edge.StopAfterTurn("the day's session rollover") }),
		llmtest.Text("Written."))
	b.edge.Deliver(lane.UserMessage{Text: "write it", InboxID: 1})
	if got := b.out.next(t); got != "Written." {
		t.Fatalf("reply = %q, want the turn's own answer", got)
	}
	select {
	case err := <-b.done:
		b.done <- err
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("lane still running after its turn")
	}
	if n := len(b.ofType(t, rpc.EventToolCallCommitted)); n != 1 {
		t.Errorf("%d tool calls committed, want the turn's one", n)
	}
	if n := len(b.ofType(t, rpc.EventCancelled)); n != 0 {
		t.Errorf("the turn was cancelled %d times", n)
	}
	before := len(b.events(t))
	b.edge.Deliver(lane.UserMessage{Text: "too late", InboxID: 2})
	time.Sleep(50 * time.Millisecond)
	if n := len(b.events(t)); n != before {
		t.Errorf("%d events after the lane stopped", n-before)
	}
}
