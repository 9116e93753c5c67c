package workmem_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/agent/arbiter"
	"github.com/choirhq/choir/agent/commitlog"
	"github.com/choirhq/choir/agent/llm"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/workmem"
	"github.com/choirhq/choir/rpc"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEstimateMatchesTheWire checks the estimator against what goes out:
// llmtest reports four bytes of the request's messages and tools per
// token, and the estimate of the same prompt is within 2% of it.
func TestEstimateMatchesTheWire(t *testing.T) {
	t.Parallel()
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	var tools []llm.ToolSpec
	for _, v := range reg.LLMViews(tool.Filter{Lane: tool.LaneEdge}) {
		tools = append(tools, llm.ToolSpec{Name: v.Name, Description: v.Description, Parameters: v.Parameters})
	}
	msgs := []llm.Message{llm.SystemMessage("You are the edge lane.\nBe brief."), llm.UserMessage("the door code is 4417 — «ok»?"),
		llm.AssistantMessage("", llm.ToolCall{ID: "c1", Name: "choir.fs.read", Arguments: json.RawMessage(`{"path": "a.txt"}`)}),
		llm.ToolResultMessage("c1", `{"status":"success","output":"hello \"world\"\n"}`), llm.AssistantMessage("Done.")}
	var wire int64
	srv := llmtest.NewServer(t, llmtest.Text("ok").Expect(func(t testing.TB, r *llmtest.Request) {
		wire = (int64(len(r.Fields["messages"])+len(r.Fields["tools"])) + 3) / 4
	}))
	if _, err := (&llm.Client{}).Complete(t.Context(), llm.Request{Model: srv.Model(), Messages: msgs, Tools: tools}); err != nil {
		t.Fatal(err)
	}
	est := workmem.EstimateTokens(msgs...) + workmem.EstimateTools(tools)
	if d := est - wire; d*50 > wire || -d*50 > wire {
		t.Errorf("estimate %d tokens, wire %d: more than 2%% apart", est, wire)
	}
}

// coreBundle is a core job's working memory over a log the edge writes
// to as well: the Memory is the lane's, whatever the lane.
type coreBundle struct {
	mem *workmem.Memory
	log *commitlog.Log
	arb *arbiter.Arbiter
	srv *llmtest.Server
	// notices gets what the user would be told.
	notices chan workmem.Notice
}

const coreLane = "core:refactor"

func setupCore(t *testing.T, window int64, steps ...llmtest.Step) *coreBundle {
	t.Helper()
	srv := llmtest.NewServer(t, steps...)
	reg, err := builtin.Build(builtin.Config{})
	if err != nil {
		t.Fatal(err)
	}
	log, app, err := commitlog.New(0, rpc.Genesis)
	if err != nil {
		t.Fatal(err)
	}
	arb := arbiter.New(arbiter.Config{Appender: app, Tools: reg, Env: tool.Env{Workspace: t.TempDir()}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { arb.Run(ctx); close(done) }()
	b := &coreBundle{log: log, arb: arb, srv: srv, notices: make(chan workmem.Notice, 8)}
	b.mem = workmem.New(workmem.Config{Lane: coreLane, Role: "core job refactor", Log: log, Commit: arb, LLM: &llm.Client{},
		Model: func() llm.ModelSettings {
			m := srv.Model()
			m.ContextWindow = window
			return m
		},
		RenderFunc: func(ev rpc.Event) []llm.Message {
			var p struct {
				Text string `json:"text"`
			}
			json.Unmarshal(ev.Payload, &p)
			if ev.Type != rpc.EventModelOutput || p.Text == "" {
				return nil
			}
			return []llm.Message{llm.AssistantMessage(p.Text)}
		},
		NoticeFunc: func(_ context.Context, n workmem.Notice) { b.notices <- n }})
	t.Cleanup(func() { b.mem.Close(); cancel(); <-done })
	return b
}

func (b *coreBundle) commit(t *testing.T, lane, text string) rpc.Event {
	t.Helper()
	ev, err := b.arb.Commit(t.Context(), rpc.EventModelOutput, lane, map[string]string{"text": text})
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func TestCoreLaneMemory(t *testing.T) {
	t.Parallel()
	b := setupCore(t, 2000, llmtest.Text(`{"memory_delta": {"mode": "append", "summary_update": "Step 1 renamed the package.",
		"add_fact": {"key": "package", "value": "workmem"}}}`).Expect(func(t testing.TB, r *llmtest.Request) {
		events := r.Last().Content
		if !strings.Contains(r.System(), "core job refactor") || !strings.Contains(events, "assistant: step 1: renamed the package") ||
			strings.Contains(events, "edge says") || strings.Contains(events, "step 9") {
			t.Errorf("compaction request: system %q, events %q", r.System(), events)
		}
	}))
	b.commit(t, coreLane, "step 1: renamed the package to workmem "+strings.Repeat("with care ", 80))
	b.commit(t, "edge", "edge says hello "+strings.Repeat("la ", 400))
	b.commit(t, coreLane, "step 2: moved the tests "+strings.Repeat("and more ", 60))
	last := b.commit(t, coreLane, "step 9: the current step")

	// The core's never-compacted parts (its system prompt, SOUL-CORE.md)
	// go first; its CoreJobStart follows the window, the caller's part.
	head := []llm.Message{llm.SystemMessage("You are a core job."), llm.SystemMessage("SOUL-CORE.md:\nBe thorough.")}
	msgs, _ := b.mem.Layout(head, last.Rev)
	if len(msgs) != 5 || strings.Contains(msgs[2].Content, "edge says") {
		t.Fatalf("layout = %+v", msgs)
	}
	// 2,000 tokens of window, 1,600 of budget: 1,300 fixed leaves 300,
	// which the core's two long steps pass (about 210 and 145 tokens);
	// the edge's longer one does not count. Folding the first brings them
	// under half of it.
	b.mem.Check(t.Context(), 1300, last.Rev-1)
	// At most one compaction runs: the script has no second step.
	b.mem.Check(t.Context(), 1300, last.Rev-1)
	var n workmem.Notice
	select {
	case n = <-b.notices:
	case <-time.After(30 * time.Second):
		t.Fatal("no compaction within 30 s")
	}
	if n.Event.Lane != coreLane || n.Trigger != workmem.TriggerAutomatic || n.FromRev != 1 || n.Folded != 1 {
		t.Errorf("notice = %+v", n)
	}
	sum, from := b.mem.State()
	if from != 2 || sum.Facts[0].Value != "workmem" {
		t.Errorf("state = %+v from %d", sum, from)
	}
	msgs, _ = b.mem.Layout(head, last.Rev)
	if len(msgs) != 5 || !strings.Contains(msgs[2].Content, "- package: workmem") || !strings.Contains(msgs[3].Content, "step 2") {
		t.Errorf("layout after compaction = %+v", msgs)
	}
	// A restart over the log restores the core's summary, not the edge's.
	again := workmem.New(workmem.Config{Lane: coreLane, Log: b.log})
	if s, f := again.State(); f != 2 || s.Summary != "Step 1 renamed the package." {
		t.Errorf("restored = %+v from %d", s, f)
	}
	if s, f := workmem.New(workmem.Config{Lane: "edge", Log: b.log}).State(); !s.IsZero() || f != 0 {
		t.Errorf("the edge adopted the core's summary: %+v from %d", s, f)
	}
}
