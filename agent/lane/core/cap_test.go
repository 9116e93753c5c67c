package core_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/meter"
	"github.com/choirhq/choir/config"
)

// TestCoreJobStoppedByTokenCapMidJob gives a core job a per-job token cap
// that runs out after a few steps: the DM is told once at 80%, the job
// ends with its report naming the cap and how to raise it, with its last
// partial result, and the scripted model server (which bills no more than
// max_tokens, as a provider does) was charged no token past the cap.
func TestCoreJobStoppedByTokenCapMidJob(t *testing.T) {
	t.Parallel()
	const jobCap = 60000
	var b *coreBench
	m := meter.New(meter.Config{AgentID: "ada", NotifyFunc: func(text string) {
		if err := b.edge.Notify(context.Background(), "usage", text); err != nil {
			t.Errorf("notify: %v", err)
		}
	}})
	m.SetCaps(config.Budgets{Caps: config.Caps{PerJobTokens: jobCap}})
	b = setupCores(t, coreOpts{gate: m})
	b.edgeSrv.Add(llmtest.ToolCalls(spawnCall("s1", "j", "Read everything.")), llmtest.Text("Started."))
	var script []llmtest.Step
	script = append(script, llmtest.ToolCalls(llmtest.Call{Name: "choir.core.report",
		Arguments: `{"kind":"partial_result","text":"read the first files"}`}))
	b.coreSrv.Add(script...)
	// Then long answers for as long as the job calls: each step's
	// completion is billed up to what max_tokens allows.
	b.coreSrv.SetResponder(func(_ context.Context, r *llmtest.Request) llmtest.Step {
		return llmtest.ToolCalls(llmtest.Call{Name: "choir.fs.read", Arguments: `{"path":"."}`}).
			WithText(fmt.Sprintf("step %d: %s", r.Index, strings.Repeat("thinking ", 8000)))
	})
	if err := b.edge.Deliver(lane.UserMessage{Text: "read everything"}); err != nil {
		t.Fatal(err)
	}
	i := b.waitMessage(t, `Core job "j"`)
	texts, _ := b.messages()
	for _, want := range []string{"was stopped: budget exceeded", "per_job_tokens", "agents.ada.budgets.per_job_tokens",
		"choirctl usage cap set ada per_job_tokens <value>", "Last partial result:\nread the first files"} {
		if !strings.Contains(texts[i], want) {
			t.Errorf("report %q does not contain %q", texts[i], want)
		}
	}
	if st := b.waitStopped(t, "j"); st.Outcome != "terminated" {
		t.Errorf("outcome = %+v, want terminated", st)
	}
	b.waitMessage(t, "of its core job cap per_job_tokens")
	texts, _ = b.messages()
	warned := 0
	for _, s := range texts {
		if strings.Contains(s, "% of its core job cap") {
			warned++
		}
	}
	if warned != 1 {
		t.Errorf("%d 80%% notices, want 1: %q", warned, texts)
	}
	served := b.coreSrv.Usage()
	t.Logf("the server billed %d prompt and %d completion tokens in %d calls", served.PromptTokens, served.CompletionTokens, len(b.coreSrv.Requests()))
	if total := served.PromptTokens + served.CompletionTokens; total > jobCap {
		t.Errorf("the model server billed %d tokens, past the cap of %d", total, jobCap)
	}
	if total := served.PromptTokens + served.CompletionTokens; total < jobCap*8/10 {
		t.Errorf("the model server billed %d tokens, want the job stopped near its cap of %d", total, jobCap)
	}
	// Near the cap the call goes out with max_tokens lowered to the room
	// left, so that the provider itself cannot bill past it.
	reqs := b.coreSrv.Requests()
	if raw, ok := reqs[len(reqs)-1].Fields["max_tokens"]; !ok || string(raw) == "16384" {
		t.Errorf("the last call's max_tokens = %s, want it lowered to the room left", raw)
	}
	if n := len(reqs); n < 3 || n > 30 {
		t.Errorf("%d core calls, want the job stopped mid-way", n)
	}
	_, _, _, job := m.Spent(b.waitStopped(t, "j").JobID)
	if job.Tokens != served.PromptTokens+served.CompletionTokens {
		t.Errorf("the meter counted %d tokens for the job, the server billed %d", job.Tokens, served.PromptTokens+served.CompletionTokens)
	}
	b.checkReports(t)
}
