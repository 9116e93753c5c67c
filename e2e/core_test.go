package e2e

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
)

// TestCoreJobSurvivesAgentCrash kills the agent process while a core job's
// model call is in flight, after the job has written a file, and starts the
// agent again: the job resumes from the replicated log (its window holds
// the step it took before the crash), its steps keep counting, the user is
// told it was interrupted and resumes, and then gets its report.
func TestCoreJobSurvivesAgentCrash(t *testing.T) {
	t.Parallel()
	model := llmtest.NewServer(t)
	e := newTGEnv(t, model, nil)
	e.dumpLogsOnFailure(t, "assistant")
	hit := make(chan struct{})
	var hitOnce sync.Once
	var resumedPrompt atomic.Pointer[llmtest.Request]
	model.SetResponder(func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		switch {
		case jobName(r) == "report":
			if assistantSteps(r) == 0 {
				return llmtest.ToolCalls(llmtest.Call{Name: "choir.fs.write", Arguments: `{"path":"part1.txt","content":"first part\n"}`})
			}
			if !strings.Contains(string(r.Body), "The agent restarted") {
				hitOnce.Do(func() { close(hit) })
				<-ctx.Done() // the crash ends this call
				return llmtest.Text("never delivered")
			}
			resumedPrompt.Store(r)
			return llmtest.Text("The report is written: part1.txt holds the first part.")
		case offered(r, "choir.core.spawn") && r.Last().Role == "user" && strings.Contains(r.Last().Content, "write the report"):
			return llmtest.ToolCalls(llmtest.Call{Name: "choir.core.spawn",
				Arguments: `{"job_name":"report","task_spec":"Write part1.txt with the first part, then finish."}`})
		case offered(r, "choir.core.spawn") && r.Last().Role == "tool":
			return llmtest.Text("Started the report job.")
		}
		return llmtest.Text("The session went as planned.") // summaries and anything else
	})
	e.runChoird(t)
	e.startAgentAdmin(t, "assistant")
	pool := e.pool(t)
	first := liveSession(t, pool, "assistant")

	e.bot.SendText(userAlice, "hey, write the report please")
	waitSentTo(t, e.bot, userAlice, "the edge's answer", containsText("Started the report job."))
	select {
	case <-hit:
	case <-time.After(60 * time.Second):
		t.Fatal("the job's second model call never came")
	}
	// The job's first step is on the host before the crash.
	waitUntil(t, "the job's tool result replicated", func() bool {
		var n int
		pool.QueryRow(context.Background(), `SELECT count(*) FROM choir_control.session_events
			WHERE session_id = $1 AND lane = 'core:report' AND event_type = 'tool_result_committed'`, first).Scan(&n)
		return n == 1
	})
	killAgents(t, e.Dir)
	waitUntil(t, "the killed session to end", func() bool {
		var live bool
		pool.QueryRow(context.Background(), `SELECT status IN ('starting', 'active', 'stopping')
			FROM choir_control.sessions WHERE session_id = $1`, first).Scan(&live)
		return !live
	})
	e.startAgentAdmin(t, "assistant")

	waitSentTo(t, e.bot, userAlice, "the resume notice",
		containsText(`Core job "report" was interrupted by a restart and resumes (1 steps done so far).`))
	report := waitSentTo(t, e.bot, userAlice, "the job's report", containsText(`Core job "report" completed (2 steps, 1 tool calls`))
	if !strings.Contains(report.Text, "part1.txt holds the first part") {
		t.Errorf("report = %q", report.Text)
	}
	if r := resumedPrompt.Load(); r == nil || !strings.Contains(string(r.Body), `part1.txt`) || assistantSteps(r) != 1 {
		t.Errorf("the resumed job's prompt does not hold its first step: %+v", r)
	}
	if b, err := os.ReadFile(filepath.Join(e.workspace(), "part1.txt")); err != nil || string(b) != "first part\n" {
		t.Errorf("part1.txt = %q, %v", b, err)
	}
}

// jobName is the core job a request is for, "" for the edge's requests.
func jobName(r *llmtest.Request) string {
	for _, m := range r.Messages {
		if strings.HasPrefix(m.Content, "Your task, from the edge lane (CoreJobStart):") {
			if _, rest, ok := strings.Cut(m.Content, `"job_name": "`); ok {
				name, _, _ := strings.Cut(rest, `"`)
				return name
			}
		}
	}
	return ""
}

func assistantSteps(r *llmtest.Request) int {
	n := 0
	for _, m := range r.Messages {
		if m.Role == "assistant" {
			n++
		}
	}
	return n
}

func offered(r *llmtest.Request, tool string) bool {
	for _, n := range r.ToolNames() {
		if n == tool {
			return true
		}
	}
	return false
}
