package core_test

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/lane/core"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/rpc"
)

// TestCoreSpawnRunReport is one job from spawn to report: the edge curates
// a briefing, the job runs on the core model with SOUL-CORE.md and never
// sees the user's words, writes a file through the arbiter under its own
// lock owner, reports progress, answers, and the user gets the report.
func TestCoreSpawnRunReport(t *testing.T) {
	t.Parallel()
	b := setupCores(t, coreOpts{})
	const userText = "ugh, hi!! could u pls jot my shopping list somewhere, thx lol"
	b.edgeSrv.Add(
		llmtest.ToolCalls(spawnCall("s1", "shopping-list", "Write the file shopping.txt with the lines milk and eggs.",
			`"context_bundle":{"facts":["the user buys milk and eggs"]}`)),
		llmtest.Text("I started a job for your list."),
	)
	coreRequests := func(t testing.TB, r *llmtest.Request) {
		for _, m := range r.Messages {
			if strings.Contains(m.Content, "shopping list somewhere") || strings.Contains(m.Content, "The user is Ada.") {
				t.Errorf("the core saw the user's message or USER.md: %q", m.Content)
			}
		}
		if !strings.Contains(r.System(), "Be thorough and exact.") || !strings.Contains(r.System(), "shopping-list") {
			t.Errorf("core system prompt = %q", r.System())
		}
		if jobOf(r) != "shopping-list" {
			t.Errorf("no CoreJobStart in the core's prompt: %+v", r.Messages)
		}
		if names := r.ToolNames(); !slices.Contains(names, "choir.core.report") || slices.Contains(names, "choir.core.spawn") {
			t.Errorf("core tools = %v", names)
		}
	}
	b.coreSrv.Add(
		llmtest.ToolCalls(
			llmtest.Call{ID: "a", Name: "choir.core.report", Arguments: `{"kind":"plan","text":"write the file, then check it"}`},
			llmtest.Call{ID: "b", Name: "choir.fs.write", Arguments: `{"path":"shopping.txt","content":"milk\neggs\n"}`}).
			Expect(coreRequests),
		llmtest.Text("shopping.txt holds milk and eggs.").Expect(coreRequests).Expect(func(t testing.TB, r *llmtest.Request) {
			if c := r.Last(); c.Role != "tool" || !strings.Contains(c.Content, `"success"`) {
				t.Errorf("write result = %+v", c)
			}
		}),
	)
	if err := b.edge.Deliver(lane.UserMessage{Text: userText}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, "I started a job")
	i := b.waitMessage(t, `Core job "shopping-list" completed`)
	texts, _ := b.messages()
	if !strings.Contains(texts[i], "shopping.txt holds milk and eggs.") || !strings.Contains(texts[i], "2 steps, 1 tool calls") {
		t.Errorf("report = %q", texts[i])
	}
	if got, err := os.ReadFile(filepath.Join(b.ws, "shopping.txt")); err != nil || string(got) != "milk\neggs\n" {
		t.Errorf("shopping.txt = %q, %v", got, err)
	}
	st := b.waitStopped(t, "shopping-list")
	if st.Outcome != "completed" || string(st.FinalResult) != `"shopping.txt holds milk and eggs."` || st.Used.Steps != 2 {
		t.Errorf("core_stopped = %+v", st)
	}
	b.checkReports(t)
	var lanes []string
	for _, ev := range b.events(t) {
		if ev.Lane == "core:shopping-list" {
			lanes = append(lanes, string(ev.Type))
		}
	}
	want := []string{"core_started", "llm_call_committed", "model_output", "model_output", "tool_call_committed",
		"tool_result_committed", "llm_call_committed", "model_output", "core_stopped"}
	if !slices.Equal(lanes, want) {
		t.Errorf("core lane events = %v, want %v", lanes, want)
	}
	if b.edge.CoresRunning() {
		t.Error("a job still runs after its report")
	}
	var status *rpc.ReportStatusRequest
	for _, s := range b.edge.Statuses() {
		if s.Lane == "core:shopping-list" {
			status = &s
		}
		if err := s.Validate(); err != nil {
			t.Errorf("status %+v: %v", s, err)
		}
	}
	if status == nil || status.State != string(core.Completed) || status.Steps != 2 ||
		status.Progress != "final_result: shopping.txt holds milk and eggs." {
		t.Errorf("job status = %+v", status)
	}
}

// TestCoreNoticesAndList covers what a job says before its report: a
// rate-limited model call and a need_info reach the user through the edge,
// and the edge lists the running job with its state and last report.
func TestCoreNoticesAndList(t *testing.T) {
	t.Parallel()
	b := setupCores(t, coreOpts{})
	release := make(chan struct{})
	b.edgeSrv.Add(
		llmtest.ToolCalls(spawnCall("s1", "trip", "Plan the trip.")), llmtest.Text("Started."),
		llmtest.ToolCalls(llmtest.Call{ID: "l", Name: "choir.core.list", Arguments: `{}`}),
		llmtest.Text("trip is running.").Expect(func(t testing.TB, r *llmtest.Request) {
			if c := lastToolResult(t, r); !strings.Contains(c, `"job_name":"trip"`) || !strings.Contains(c, `"count":1`) ||
				!strings.Contains(c, "need_info: Which city?") {
				t.Errorf("list = %s", c)
			}
		}),
	)
	b.coreSrv.Add(
		llmtest.RateLimited("0"),
		llmtest.ToolCalls(llmtest.Call{ID: "n", Name: "choir.core.report", Arguments: `{"kind":"need_info","text":"Which city?"}`}),
		llmtest.Text("Planned for Paris.").Expect(func(testing.TB, *llmtest.Request) { <-release }),
	)
	if err := b.edge.Deliver(lane.UserMessage{Text: "plan my trip"}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, `Core job "trip": the model provider is rate-limiting it`)
	b.waitMessage(t, `Core job "trip" needs information: Which city?`)
	if err := b.edge.Deliver(lane.UserMessage{Text: "what is running?"}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, "trip is running.")
	close(release)
	b.waitMessage(t, `Core job "trip" completed`)
	b.checkReports(t)
	for _, s := range b.edge.Statuses() {
		if s.Lane == "core:trip" && s.Progress != "final_result: Planned for Paris." {
			t.Errorf("final status progress = %q", s.Progress)
		}
	}
}
