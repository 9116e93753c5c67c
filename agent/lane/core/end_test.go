package core_test

import (
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/lane/core"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/rpc"
)

// TestCoreReportOnEveryEndPath ends a job every way a job can end and
// checks that each time the user gets the job's report, committed on the
// edge lane and sent under the ID derived from its core_stopped event:
// the mandatory report of spec 7.1. Budgets exceeded are among the ends,
// each named in the report the user sees.
func TestCoreReportOnEveryEndPath(t *testing.T) {
	t.Parallel()
	read := llmtest.ToolCalls(llmtest.Call{Name: "choir.fs.read", Arguments: `{"path":"."}`})
	for _, tc := range []struct {
		name    string
		budgets core.Budgets
		spawn   []string // extra spawn fields
		edge    []llmtest.Step
		core    []llmtest.Step
		// holdCore holds the core's first model call until the edge has
		// said "Started.".
		holdCore bool
		// act runs once the edge said "Started."
		act     func(t *testing.T, b *coreBench)
		outcome string
		want    string
	}{
		{name: "Completed", core: []llmtest.Step{llmtest.Text("all done")},
			outcome: "completed", want: "Result:\nall done"},
		{name: "CancelledByTheEdge", core: []llmtest.Step{llmtest.Hang()},
			edge: []llmtest.Step{llmtest.ToolCalls(llmtest.Call{Name: "choir.core.cancel", Arguments: `{"job_name":"j"}`}),
				llmtest.Text("Cancelled.")},
			act: func(t *testing.T, b *coreBench) {
				b.edge.Deliver(lane.UserMessage{Text: "stop that job"})
				// The report may reach the user within the edge's turn,
				// before its answer: the turn ends before the test does.
				b.waitMessage(t, "Cancelled.")
			},
			outcome: "terminated", want: `"j" was cancelled: cancelled by the edge lane`},
		{name: "CancelledByPushMidModelCall", core: []llmtest.Step{llmtest.Hang()},
			act: func(t *testing.T, b *coreBench) {
				waitFor(t, "the core's model call", func() bool { return len(b.coreSrv.Requests()) == 1 })
				b.jobs.Cancel("j", "/cancel j")
			},
			outcome: "terminated", want: `"j" was cancelled: /cancel j`},
		{name: "StepBudget", budgets: core.Budgets{PerJobMaxSteps: 2}, core: []llmtest.Step{read, read},
			outcome: "terminated", want: "budget exceeded, out of steps: the per_job_max_steps budget of 2 is used up"},
		{name: "ToolCallBudget", budgets: core.Budgets{PerJobMaxToolCalls: 1},
			core: []llmtest.Step{llmtest.ToolCalls(llmtest.Call{Name: "choir.fs.read", Arguments: `{"path":"."}`},
				llmtest.Call{Name: "choir.fs.read", Arguments: `{"path":"."}`})},
			outcome: "terminated", want: "the per_job_max_tool_calls budget of 1 is used up"},
		{name: "WallTimeBudget", spawn: []string{`"tool_constraints":{"time_budget_ms":300}`}, core: []llmtest.Step{llmtest.Hang()},
			outcome: "terminated", want: "out of time: the per_job_wall_time_ms budget of 300 is used up"},
		{name: "SessionTokens", budgets: core.Budgets{TotalSessionTokens: 1000}, holdCore: true,
			core:    []llmtest.Step{read.WithUsage(2000, 1)},
			outcome: "terminated", want: "the total_session_tokens budget of 1000 is used up"},
		{name: "SessionToolCalls", budgets: core.Budgets{MaxToolCallsPerSession: 1},
			core: []llmtest.Step{llmtest.ToolCalls(llmtest.Call{Name: "choir.fs.read", Arguments: `{"path":"."}`},
				llmtest.Call{Name: "choir.fs.read", Arguments: `{"path":"."}`})},
			outcome: "terminated", want: "the max_tool_calls_per_session budget of 1 is used up"},
		{name: "ModelError", core: []llmtest.Step{llmtest.ServerError(500, "boom")},
			outcome: "terminated", want: `"j" failed: The model provider failed (HTTP 500)`},
		{name: "InvalidResultTwice", spawn: []string{`"output_schema":{"type":"object","required":["n"]}`},
			core:    []llmtest.Step{llmtest.Text("no json here"), llmtest.Text(`{"m":1}`)},
			outcome: "terminated", want: "the final result does not satisfy the output schema"},
		{name: "ResultFixedAfterOneNotice", spawn: []string{`"output_schema":"{\"type\":\"object\",\"required\":[\"n\"]}"`},
			core: []llmtest.Step{llmtest.Text("no json here"), llmtest.Text("```json\n{\"n\": 7}\n```").
				Expect(func(t testing.TB, r *llmtest.Request) {
					if !strings.Contains(r.Last().Content, "does not satisfy the output_schema") {
						t.Errorf("the model was not told: %+v", r.Last())
					}
				})},
			outcome: "completed", want: "Result:\n{\n  \"n\": 7\n}"},
		{name: "EdgeStops", core: []llmtest.Step{llmtest.Hang()},
			act: func(t *testing.T, b *coreBench) {
				waitFor(t, "the core's model call", func() bool { return len(b.coreSrv.Requests()) == 1 })
				b.edge.Stop("shutdown")
				<-b.runDone
			},
			outcome: "terminated", want: `"j" was stopped because the session is stopping`},
		{name: "EdgeBudgetEnds", budgets: core.Budgets{TotalSessionTokens: 1000}, core: []llmtest.Step{llmtest.Hang()},
			edge: []llmtest.Step{llmtest.Text("too costly").WithUsage(5000, 1)},
			act: func(t *testing.T, b *coreBench) {
				waitFor(t, "the core's model call", func() bool { return len(b.coreSrv.Requests()) == 1 })
				b.edge.Deliver(lane.UserMessage{Text: "one more thing"})
				<-b.runDone
			},
			outcome: "terminated", want: `"j" was stopped because the session's budget is used up`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			b := setupCores(t, coreOpts{budgets: tc.budgets})
			b.edgeSrv.Add(llmtest.ToolCalls(spawnCall("s1", "j", "Do the job.", tc.spawn...)).WithUsage(1, 1),
				llmtest.Text("Started.").WithUsage(1, 1))
			b.edgeSrv.Add(tc.edge...)
			gate := make(chan struct{})
			if tc.holdCore {
				tc.core[0] = tc.core[0].Expect(func(testing.TB, *llmtest.Request) { <-gate })
			}
			b.coreSrv.Add(tc.core...)
			if err := b.edge.Deliver(lane.UserMessage{Text: "do the job"}); err != nil {
				t.Fatal(err)
			}
			b.waitMessage(t, "Started.")
			close(gate)
			if tc.act != nil {
				tc.act(t, b)
			}
			i := b.waitMessage(t, `Core job "j"`)
			texts, _ := b.messages()
			if !strings.Contains(texts[i], tc.want) {
				t.Errorf("report = %q, want it to contain %q", texts[i], tc.want)
			}
			if st := b.waitStopped(t, "j"); st.Outcome != tc.outcome {
				t.Errorf("outcome = %+v, want %s", st, tc.outcome)
			}
			b.checkReports(t)
		})
	}
}

// TestCoreSpawnRefusals checks the spawn's refusals: a budget of live jobs
// (the user is told, whatever the edge's model says), a name in use, and
// an invalid briefing with every problem named.
func TestCoreSpawnRefusals(t *testing.T) {
	t.Parallel()
	b := setupCores(t, coreOpts{budgets: core.Budgets{MaxCoreJobs: 1}})
	b.edgeSrv.Add(
		llmtest.ToolCalls(spawnCall("s1", "a", "Do a."), spawnCall("s2", "a", "Do a again."), spawnCall("s3", "b", "Do b."),
			llmtest.Call{ID: "s4", Name: "choir.core.spawn",
				Arguments: `{"job_name":"core:bad","task_spec":"  ","tool_constraints":{"allowed_tools":["choir.nope"]},"output_schema":{"type":12}}`}),
		llmtest.Text("One started.").Expect(func(t testing.TB, r *llmtest.Request) {
			var results []string
			for _, m := range r.Messages {
				if m.Role == "tool" {
					results = append(results, m.Content)
				}
			}
			if len(results) != 4 || !strings.Contains(results[0], `"success"`) ||
				!strings.Contains(results[1], "name_taken") || !strings.Contains(results[2], "budget_exceeded") ||
				!strings.Contains(results[2], "max_core_jobs") {
				t.Errorf("spawn results = %q", results)
			}
			if len(results) == 4 {
				for _, want := range []string{"job_name", "task_spec", "choir.nope", "output_schema"} {
					if !strings.Contains(results[3], want) {
						t.Errorf("invalid spawn answer %s does not name %s", results[3], want)
					}
				}
			}
		}),
	)
	b.coreSrv.Add(llmtest.Text("a done").After(200 * time.Millisecond))
	if err := b.edge.Deliver(lane.UserMessage{Text: "do a and b"}); err != nil {
		t.Fatal(err)
	}
	b.waitMessage(t, `Core job "b" was not started: 1 core jobs are running, the most this session allows (max_core_jobs)`)
	b.waitMessage(t, `Core job "a" completed`)
	if n := len(b.find(t, rpc.EventCoreStarted, "")); n != 1 {
		t.Errorf("%d jobs started, want 1", n)
	}
	if n := len(b.find(t, rpc.EventToolCallRequested, "edge")); n != 3 {
		t.Errorf("%d refused spawns logged, want 3", n)
	}
	b.checkReports(t)
}
