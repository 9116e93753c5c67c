package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/internal/choirdtest"
)

// TestCoreJobProgressInTheDM runs a real agent whose core job reports its
// progress over three steps: the DM gets one progress message for the job,
// edited in place as the job advances and showing it completed at the end,
// beside the edge's answer and the job's report; never a second progress
// message.
func TestCoreJobProgressInTheDM(t *testing.T) {
	t.Parallel()
	model := llmtest.NewServer(t)
	e := newTGEnv(t, model, nil)
	e.dumpLogsOnFailure(t, "assistant")
	release := make(chan struct{})
	model.SetResponder(func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		switch {
		case jobName(r) == "survey":
			switch assistantSteps(r) {
			case 0:
				return llmtest.ToolCalls(
					llmtest.Call{Name: "choir.core.report", Arguments: `{"kind":"plan","text":"read the notes, then summarise"}`},
					llmtest.Call{Name: "choir.fs.write", Arguments: `{"path":"notes.txt","content":"alpha\n"}`})
			case 1:
				// The job waits here until the test has seen its progress.
				select {
				case <-release:
				case <-ctx.Done():
				}
				return llmtest.ToolCalls(llmtest.Call{Name: "choir.core.report",
					Arguments: `{"kind":"progress","text":"notes read: 1 file"}`})
			}
			return llmtest.Text("Summary: the notes say alpha.")
		case offered(r, "choir.core.spawn") && r.Last().Role == "user":
			return llmtest.ToolCalls(llmtest.Call{Name: "choir.core.spawn",
				Arguments: `{"job_name":"survey","task_spec":"Write notes.txt, then summarise it."}`})
		case offered(r, "choir.core.spawn") && r.Last().Role == "tool":
			return llmtest.Text("Started the survey job.")
		}
		return llmtest.Text("The session went as planned.")
	})
	o := e.options(t)
	o.Daemon.ProgressInterval = 200 * time.Millisecond
	choirdtest.Start(t, o)
	e.startAgentAdmin(t, "assistant")

	e.bot.SendText(userAlice, "please survey my notes")
	waitSentTo(t, e.bot, userAlice, "the edge's answer", containsText("Started the survey job."))
	progress := waitSentTo(t, e.bot, userAlice, "the job's progress message", containsText("Core job survey:"))
	waitUntil(t, "the plan in the progress message", func() bool {
		text, _ := e.bot.MessageText(userAlice, progress.MessageID)
		return strings.Contains(text, "read the notes, then summarise")
	})
	close(release)
	waitSentTo(t, e.bot, userAlice, "the job's report", containsText(`Core job "survey" completed`))
	waitUntil(t, "the progress message to show the job completed", func() bool {
		text, _ := e.bot.MessageText(userAlice, progress.MessageID)
		return strings.Contains(text, "completed")
	})

	var messages, edits int
	for _, m := range e.bot.SentTo(userAlice) {
		if strings.Contains(m.Text, "Core job survey:") {
			messages++
		}
	}
	for _, ed := range e.bot.TextEdits() {
		if ed.MessageID == progress.MessageID {
			edits++
		}
	}
	if messages != 1 {
		t.Errorf("%d progress messages for the job, want one edited in place", messages)
	}
	// The message existed, showing the plan, before the job was let go:
	// the completion reached it by an edit. (The plan itself may be in
	// the message as first sent, when the job reported it before the
	// message left: how many edits there are depends on the machine's
	// pace, not on the code.)
	if edits < 1 {
		t.Errorf("the progress message was never edited; want the completion edited into it")
	}
	final, _ := e.bot.MessageText(userAlice, progress.MessageID)
	t.Logf("final progress message:\n%s", final)
}

// TestCoreJobProgressSettledAfterTheAgentDies kills a real agent (SIGKILL
// of its process group) while its core job runs: once crash detection has
// ended the session, the job's progress message stops saying it runs and
// says it was interrupted, in the same message.
func TestCoreJobProgressSettledAfterTheAgentDies(t *testing.T) {
	t.Parallel()
	model := llmtest.NewServer(t)
	e := newTGEnv(t, model, nil)
	e.dumpLogsOnFailure(t, "assistant")
	model.SetResponder(func(ctx context.Context, r *llmtest.Request) llmtest.Step {
		switch {
		case jobName(r) == "survey":
			if assistantSteps(r) == 0 {
				return llmtest.ToolCalls(llmtest.Call{Name: "choir.core.report",
					Arguments: `{"kind":"plan","text":"read the notes, then summarise"}`})
			}
			// The job thinks until the agent is killed.
			<-ctx.Done()
			return llmtest.Text("never seen")
		case offered(r, "choir.core.spawn") && r.Last().Role == "user":
			return llmtest.ToolCalls(llmtest.Call{Name: "choir.core.spawn",
				Arguments: `{"job_name":"survey","task_spec":"Summarise the notes."}`})
		case offered(r, "choir.core.spawn") && r.Last().Role == "tool":
			return llmtest.Text("Started the survey job.")
		}
		return llmtest.Text("ok")
	})
	o := e.options(t)
	o.Daemon.ProgressInterval = 200 * time.Millisecond
	o.Daemon.ProgressSettleAfter, o.Daemon.ProgressSettleInterval = 300*time.Millisecond, 200*time.Millisecond
	choirdtest.Start(t, o)
	e.startAgentAdmin(t, "assistant")

	e.bot.SendText(userAlice, "please survey my notes")
	progress := waitSentTo(t, e.bot, userAlice, "the job's progress message", containsText("Core job survey:"))
	waitUntil(t, "the plan in the progress message", func() bool {
		text, _ := e.bot.MessageText(userAlice, progress.MessageID)
		return strings.Contains(text, "read the notes, then summarise")
	})
	killAgents(t, e.Dir)
	waitUntil(t, "the progress message to say the job was interrupted", func() bool {
		text, _ := e.bot.MessageText(userAlice, progress.MessageID)
		return strings.Contains(text, "Core job survey: interrupted") && strings.Contains(text, "before it finished")
	})
	final, _ := e.bot.MessageText(userAlice, progress.MessageID)
	t.Logf("settled progress message:\n%s", final)
	for _, m := range e.bot.SentTo(userAlice) {
		if strings.Contains(m.Text, "Core job survey:") && m.MessageID != progress.MessageID {
			t.Errorf("a second progress message: %q", m.Text)
		}
	}
}
