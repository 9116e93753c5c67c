package lane_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/skill"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// sink is the user's side of the conversation.
type sink struct {
	mu   sync.Mutex
	msgs []string
	ids  []string
	revs []int64
	got  chan string
}

func newSink() *sink { return &sink{got: make(chan string, 64)} }

func (s *sink) Send(_ context.Context, m lane.OutboundMessage) error {
	s.mu.Lock()
	s.msgs = append(s.msgs, m.Text)
	s.ids = append(s.ids, m.ID)
	s.revs = append(s.revs, m.Rev)
	s.mu.Unlock()
	s.got <- m.Text
	return nil
}

func (s *sink) sentIDs() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.ids)
}

func (s *sink) next(t *testing.T) string {
	t.Helper()
	select {
	case m := <-s.got:
		return m
	case <-time.After(30 * time.Second):
		t.Fatal("no message to the user within 30 s")
		return ""
	}
}

type bundle struct {
	edge *lane.Edge
	log  *commitlog.Log
	ws   string
	out  *sink
	srv  *llmtest.Server
	done chan error
	// statusCalls counts StatusFunc calls.
	statusCalls atomic.Int64
}

// approver files approvals as choird would, one per request ID.
type approver struct {
	mu sync.Mutex
	n  int
	by map[string]string
}

func (a *approver) RequestApproval(_ context.Context, requestID string, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error) {
	if err := req.Validate(); err != nil {
		return rpc.ApprovalResponse{}, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	id, ok := a.by[requestID]
	if !ok {
		a.n++
		id = fmt.Sprintf("appr-%d", a.n)
		a.by[requestID] = id
	}
	return rpc.ApprovalResponse{ApprovalID: id, Status: rpc.ApprovalPending}, nil
}

func setup(t *testing.T, budgets lane.Budgets, steps ...llmtest.Step) *bundle {
	t.Helper()
	srv := llmtest.NewServer(t, steps...)
	ws := t.TempDir()
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	skills, err := skill.Load(skill.Config{KnownTool: reg.Has})
	if err != nil {
		t.Fatal(err)
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Env: tool.Env{Workspace: ws},
		Approvals: &approver{by: map[string]string{}}})
	out := newSink()
	b := &bundle{log: log, ws: ws, out: out, srv: srv, done: make(chan error, 1)}
	b.edge = lane.NewEdge(lane.EdgeConfig{Arbiter: arb, Log: log, Tools: reg, Skills: skills, LLM: &llm.Client{},
		Model: srv.Model, Out: out, Budgets: budgets, RateLimitDelay: 10 * time.Millisecond,
		StatusFunc: func() { b.statusCalls.Add(1) },
		Identity:   lane.Identity{Instructions: "You are the edge lane.", User: "The user is Ada.", Soul: "Be brief."}})
	edge := b.edge
	ctx, cancel := context.WithCancel(context.Background())
	arbDone := make(chan struct{})
	go func() { arb.Run(ctx); close(arbDone) }()
	go func() { b.done <- edge.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-b.done; <-arbDone })
	return b
}

func (b *bundle) eventTypes(t *testing.T) []string {
	t.Helper()
	head, _ := b.log.Head()
	evs, err := b.log.Range(1, head)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := commitlog.VerifyChain(0, rpc.Genesis, evs); err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range evs {
		out = append(out, string(e.Type))
	}
	return out
}

func lastToolResult(t testing.TB, r *llmtest.Request) string {
	t.Helper()
	m := r.Last()
	if m.Role != "tool" {
		t.Fatalf("last message is %s, want a tool result", m.Role)
	}
	return m.Content
}

func TestEdgeToolConversation(t *testing.T) {
	t.Parallel()
	b := setup(t, lane.Budgets{},
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.write",
			Arguments: `{"path":"notes/hello.txt","content":"hello world\nsecond line\n"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if !strings.Contains(r.System(), "You are the edge lane.") {
					t.Errorf("system prompt = %q", r.System())
				}
				var sawUser, sawSoul bool
				for _, m := range r.Messages {
					sawUser = sawUser || strings.Contains(m.Content, "The user is Ada.")
					sawSoul = sawSoul || strings.Contains(m.Content, "Be brief.")
				}
				if !sawUser || !sawSoul {
					t.Errorf("USER.md or SOUL.md missing from the prompt")
				}
				if r.Last().Role != "user" || r.Last().Content != "please write a note" {
					t.Errorf("current message = %+v", r.Last())
				}
				if _, ok := r.Tool("choir__fs__write"); !ok {
					t.Errorf("tools = %v", r.ToolNames())
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "2", Name: "choir.fs.read", Arguments: `{"path":"notes/hello.txt"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); !strings.Contains(c, `"status":"success"`) {
					t.Errorf("write result = %s", c)
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "3", Name: "choir.fs.search", Arguments: `{"pattern":"second","path":"notes"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); !strings.Contains(c, "hello world") {
					t.Errorf("read result = %s", c)
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "4", Name: "choir.exec", Arguments: `{"command":"wc -l < notes/hello.txt"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); !strings.Contains(c, "second line") {
					t.Errorf("search result = %s", c)
				}
			}),
		llmtest.Text("The note has 2 lines.").
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); !strings.Contains(c, "2") {
					t.Errorf("exec result = %s", c)
				}
			}),
	)
	if err := b.edge.Deliver(lane.UserMessage{Text: "please write a note"}); err != nil {
		t.Fatal(err)
	}
	if got := b.out.next(t); got != "The note has 2 lines." {
		t.Fatalf("answer = %q", got)
	}
	data, err := os.ReadFile(filepath.Join(b.ws, "notes", "hello.txt"))
	if err != nil || string(data) != "hello world\nsecond line\n" {
		t.Fatalf("file = %q, %v", data, err)
	}
	types := b.eventTypes(t)
	if n := strings.Count(strings.Join(types, ","), "tool_result_committed"); n != 4 {
		t.Errorf("%d tool results committed, want 4: %v", n, types)
	}
	if types[0] != "user_msg" || !slices.Contains(types, "llm_call_committed") {
		t.Errorf("events = %v", types)
	}
	b.srv.Done()
}

func TestEdgeSkillWalk(t *testing.T) {
	t.Parallel()
	b := setup(t, lane.Budgets{},
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.skill.start", Arguments: `{"name":"tool-builder"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if !strings.Contains(r.System(), "tool-builder") {
					t.Errorf("skills not summarised in the system prompt")
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "2", Name: "choir.fs.write", Arguments: `{"path":"x","content":"y"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				names := r.ToolNames()
				if slices.Contains(names, "choir.fs.write") || !slices.Contains(names, "choir.skill.transition") {
					t.Errorf("understand state offers %v", names)
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "3", Name: "choir.skill.transition", Arguments: `{"event":"complete"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); !strings.Contains(c, "rejected") || !strings.Contains(c, "choir.fs.read") {
					t.Errorf("forbidden tool answer = %s", c)
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "4", Name: "choir.skill.transition", Arguments: `{"event":"skip-to-the-end"}`}),
		llmtest.ToolCalls(llmtest.Call{ID: "5", Name: "choir.skill.transition", Arguments: `{"event":"complete"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); !strings.Contains(c, "rejected") || !strings.Contains(c, "complete") {
					t.Errorf("invalid transition answer = %s", c)
				}
			}),
		llmtest.ToolCalls(llmtest.Call{ID: "5b", Name: "choir.skill.transition", Arguments: `{"event":"complete"}`}),
		llmtest.ToolCalls(llmtest.Call{ID: "6", Name: "choir.skill.transition", Arguments: `{"event":"complete"}`}).
			Expect(func(t testing.TB, r *llmtest.Request) {
				if !slices.Contains(r.ToolNames(), "choir.propose.tool") {
					t.Errorf("propose state offers %v", r.ToolNames())
				}
			}),
		llmtest.Text("The proposal is ready.").
			Expect(func(t testing.TB, r *llmtest.Request) {
				if c := lastToolResult(t, r); !strings.Contains(c, `"state":"done"`) {
					t.Errorf("final transition = %s", c)
				}
			}),
	)
	b.edge.Deliver(lane.UserMessage{Text: "design a tool for me"})
	if got := b.out.next(t); got != "The proposal is ready." {
		t.Fatalf("answer = %q", got)
	}
	types := b.eventTypes(t)
	if n := strings.Count(strings.Join(types, ","), "skill_transition_committed"); n != 5 {
		t.Errorf("%d skill transitions, want start + 4: %v", n, types)
	}
	// The forbidden tool and the invalid transition are both in the log.
	if n := strings.Count(strings.Join(types, ","), "tool_call_requested"); n != 2 {
		t.Errorf("%d refused proposals logged, want 2: %v", n, types)
	}
	if _, err := os.Stat(filepath.Join(b.ws, "x")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the forbidden write ran: %v", err)
	}
	b.srv.Done()
}

func TestEdgeFailures(t *testing.T) {
	t.Parallel()

	t.Run("MalformedResponseTellsTheUserAndReturnsToIdle", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{}, llmtest.Malformed(`{"choices": "nope"`), llmtest.Text("second answer"))
		b.edge.Deliver(lane.UserMessage{Text: "hi"})
		if got := b.out.next(t); !strings.Contains(got, "could not use") {
			t.Fatalf("error message = %q", got)
		}
		b.edge.Deliver(lane.UserMessage{Text: "again"})
		if got := b.out.next(t); got != "second answer" {
			t.Fatalf("after the error: %q", got)
		}
	})

	t.Run("RateLimitNotifiesThenRetriesOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{}, llmtest.RateLimited("0"), llmtest.Text("made it"))
		b.edge.Deliver(lane.UserMessage{Text: "hi"})
		if got := b.out.next(t); !strings.Contains(got, "rate-limiting") {
			t.Fatalf("notice = %q", got)
		}
		if got := b.out.next(t); got != "made it" {
			t.Fatalf("answer = %q", got)
		}
	})

	t.Run("ServerErrorIsSurfacedWithoutRetry", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{}, llmtest.ServerError(502, "upstream down"))
		b.edge.Deliver(lane.UserMessage{Text: "hi"})
		if got := b.out.next(t); !strings.Contains(got, "HTTP 502") {
			t.Fatalf("error message = %q", got)
		}
		b.srv.Done()
	})

	t.Run("MessagesQueuedWhileBusyAreAnsweredOneByOne", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{},
			llmtest.Text("first").After(100*time.Millisecond),
			llmtest.Text("second").Expect(func(t testing.TB, r *llmtest.Request) {
				if r.Last().Content != "two" {
					t.Errorf("second cycle answers %q", r.Last().Content)
				}
			}))
		b.edge.Deliver(lane.UserMessage{Text: "one"})
		b.edge.Deliver(lane.UserMessage{Text: "two"})
		if a, c := b.out.next(t), b.out.next(t); a != "first" || c != "second" {
			t.Fatalf("answers = %q, %q", a, c)
		}
	})

	t.Run("ToolCallBudgetEndsTheLane", func(t *testing.T) {
		t.Parallel()
		b := setup(t, lane.Budgets{MaxToolCallsPerSession: 1},
			llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.fs.read", Arguments: `{"path":"."}`},
				llmtest.Call{ID: "2", Name: "choir.fs.read", Arguments: `{"path":"."}`}))
		b.edge.Deliver(lane.UserMessage{Text: "read twice"})
		if got := b.out.next(t); !strings.Contains(got, "tool-call budget") {
			t.Fatalf("message = %q", got)
		}
		select {
		case err := <-b.done:
			if !errors.Is(err, lane.ErrBudgetExceeded) {
				t.Fatalf("run ended with %v", err)
			}
			b.done <- err // for cleanup
		case <-time.After(10 * time.Second):
			t.Fatal("lane still running after its budget ran out")
		}
		if b.edge.State() != lane.EdgeTerminated {
			t.Errorf("state = %s", b.edge.State())
		}
	})
}

func TestEdgeSnapshotRestore(t *testing.T) {
	t.Parallel()
	b := setup(t, lane.Budgets{MaxToolCallsPerSession: 10},
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.skill.start", Arguments: `{"name":"skill-builder"}`}),
		llmtest.ToolCalls(llmtest.Call{ID: "2", Name: "choir.skill.transition", Arguments: `{"event":"complete"}`}),
		llmtest.Text("started"))
	b.edge.Deliver(lane.UserMessage{Text: "design a skill"})
	b.out.next(t)
	snap := b.edge.Snapshot()
	if snap.ToolCallsUsed != 2 || snap.Skill == nil || snap.Skill.State != "design" {
		t.Fatalf("snapshot = %+v", snap)
	}

	// A new lane, as after a restart, resumes the run and the budgets.
	b2 := setup(t, lane.Budgets{MaxToolCallsPerSession: 10},
		llmtest.Text("resumed").Expect(func(t testing.TB, r *llmtest.Request) {
			if !strings.Contains(r.System(), "Active skill skill-builder, state design") {
				t.Errorf("system prompt does not carry the restored skill: %q", r.System())
			}
		}))
	if err := b2.edge.Restore(snap); err != nil {
		t.Fatal(err)
	}
	if calls, _ := b2.edge.Budget(); calls != 8 {
		t.Errorf("tool calls left after restore = %d, want 8", calls)
	}
	b2.edge.Deliver(lane.UserMessage{Text: "go on"})
	if got := b2.out.next(t); got != "resumed" {
		t.Fatalf("answer = %q", got)
	}
}

func TestEdgeCompaction(t *testing.T) {
	t.Parallel()
	b := setup(t, lane.Budgets{},
		llmtest.Text("Hello Ada."),
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.memory.compact", Arguments: `{}`}),
		// The working memory's compaction call.
		llmtest.Text(`{"memory_delta": {"mode": "append", "summary_update": "The user is called Ada.",
			"add_fact": {"key": "name", "value": "Ada"}}}`).Expect(func(t testing.TB, r *llmtest.Request) {
			if len(r.Tools) != 0 || !strings.Contains(r.System(), "reference summary") ||
				!strings.Contains(r.Last().Content, "user: my name is Ada") {
				t.Errorf("compaction call: tools %v, system %q, events %q", r.ToolNames(), r.System(), r.Last().Content)
			}
		}),
		llmtest.Text("Compacted.").Expect(func(t testing.TB, r *llmtest.Request) {
			if c := lastToolResult(t, r); !strings.Contains(c, `"success"`) {
				t.Errorf("compact result = %s", c)
			}
		}),
		llmtest.Text("You are Ada.").Expect(func(t testing.TB, r *llmtest.Request) {
			var sawSummary, sawOld bool
			for _, m := range r.Messages {
				sawSummary = sawSummary || (strings.Contains(m.Content, "The user is called Ada.") && strings.Contains(m.Content, "- name: Ada"))
				sawOld = sawOld || (m.Role == "user" && m.Content == "my name is Ada")
			}
			if !sawSummary || sawOld {
				t.Errorf("after compaction: summary in prompt %v, compacted message still in window %v", sawSummary, sawOld)
			}
		}),
	)
	b.edge.Deliver(lane.UserMessage{Text: "my name is Ada"})
	b.out.next(t)
	b.edge.Deliver(lane.UserMessage{Text: "please compact"})
	if got := b.out.next(t); got != "Compacted 2 earlier messages into my reference summary (rev 1–3)." {
		t.Errorf("notice = %q", got)
	}
	if got := b.out.next(t); got != "Compacted." {
		t.Errorf("answer = %q", got)
	}
	b.edge.Deliver(lane.UserMessage{Text: "who am I?"})
	b.out.next(t)
	if snap := b.edge.Snapshot(); snap.ReferenceSummary.Summary != "The user is called Ada." || snap.WindowFrom != 4 {
		t.Errorf("snapshot = %+v", snap)
	}
	b.srv.Done()
}

// TestEdgeOutboundNamesItsEvent checks what the agent's outbound relies on
// to flush before it sends: every message names the revision of the
// committed event its ID derives from, and the lane reports itself
// unsettled from the commit of a user message until its answer is handed
// over, so that no working-memory snapshot is taken past an unanswered
// message.
func TestEdgeOutboundNamesItsEvent(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	b := setup(t, lane.Budgets{},
		llmtest.Text("first answer").Expect(func(t testing.TB, r *llmtest.Request) { <-release }),
		llmtest.Text("second answer"),
	)
	waitSettled := func(want bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for b.edge.Settled() != want {
			if time.Now().After(deadline) {
				t.Fatalf("Settled() stayed %v", !want)
			}
			time.Sleep(time.Millisecond)
		}
	}
	waitSettled(true) // resume found nothing to finish
	if err := b.edge.Deliver(lane.UserMessage{Text: "one", InboxID: 1}); err != nil {
		t.Fatal(err)
	}
	waitSettled(false) // the user message is committed, the model call holds
	close(release)
	if got := b.out.next(t); got != "first answer" {
		t.Fatalf("answer = %q", got)
	}
	if err := b.edge.Deliver(lane.UserMessage{Text: "two", InboxID: 2}); err != nil {
		t.Fatal(err)
	}
	if got := b.out.next(t); got != "second answer" {
		t.Fatalf("answer = %q", got)
	}
	waitSettled(true)

	head, _ := b.log.Head()
	evs, err := b.log.Range(1, head)
	if err != nil {
		t.Fatal(err)
	}
	b.out.mu.Lock()
	ids, revs := slices.Clone(b.out.ids), slices.Clone(b.out.revs)
	b.out.mu.Unlock()
	for i, id := range ids {
		rev := revs[i]
		if rev < 1 || rev > head {
			t.Fatalf("message %s names revision %d, outside the log 1..%d", id, rev, head)
		}
		ev := evs[rev-1]
		if want := lane.MessageID("reply", ev.Hash); id != want || ev.Type != rpc.EventModelOutput {
			t.Errorf("message %s names revision %d, a %s event whose reply ID is %s", id, rev, ev.Type, want)
		}
	}
}
