package agent_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/lane"
	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc"
)

// TestAgentCoreJobs drives core jobs through choird: the agent's budgets
// come from its configuration (a second job is refused by max_core_jobs,
// and the user is told), a cancel push of scope core ends the running job,
// each job's status reaches choird under its own lane, and the report is
// queued under the ID derived from the job's core_stopped event.
func TestAgentCoreJobs(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t)
	srv.SetResponder(func(_ context.Context, r *llmtest.Request) llmtest.Step {
		last := r.Last()
		if last.Role == "system" && len(r.Messages) > 1 {
			last = r.Messages[len(r.Messages)-2] // what the edge told the user follows the tool result
		}
		switch {
		case strings.Contains(string(r.Body), `\"job_name\": \"long\"`):
			return llmtest.ToolCalls(llmtest.Call{Name: "choir.exec", Arguments: `{"command":"sleep 60"}`})
		case last.Role == "user" && strings.Contains(last.Content, "start the long job"):
			return llmtest.ToolCalls(llmtest.Call{Name: "choir.core.spawn", Arguments: `{"job_name":"long","task_spec":"Run the long command."}`})
		case last.Role == "user" && strings.Contains(last.Content, "start another"):
			return llmtest.ToolCalls(llmtest.Call{Name: "choir.core.spawn", Arguments: `{"job_name":"other","task_spec":"Do the other thing."}`})
		case last.Role == "tool" && strings.Contains(last.Content, "max_core_jobs"):
			return llmtest.Text("Refused: one job at a time.")
		case last.Role == "tool":
			return llmtest.Text("Started.")
		}
		return llmtest.Text("The session went as planned.")
	})
	b := setupWith(t, srv, func(c *config.Config, _ config.Secrets) {
		a := c.Agents["assistant"]
		a.Budgets = config.Budgets{MaxCoreJobs: 1}
		c.Agents["assistant"] = a
	})
	b.say(t, 1, "start the long job")
	b.waitReply(t, "Started.")
	b.waitFor(t, "the job's status at choird", func() bool { return b.laneState(t, "core:long") == "CORE_WAITING_TOOL" })
	b.say(t, 2, "start another")
	b.waitReply(t, `Core job "other" was not started: 1 core jobs are running, the most this session allows (max_core_jobs)`)
	b.waitReply(t, "Refused: one job at a time.")

	b.push(t, rpc.Push{Kind: rpc.PushCancel, Cancel: &rpc.Cancel{Scope: rpc.CancelCore, JobName: "long", Reason: "user said stop"}})
	id := b.waitReply(t, `Core job "long" was cancelled: user said stop (1 steps, 1 tool calls`)
	stopped := b.waitEvents(t, rpc.EventCoreStopped, 1)
	if want := lane.MessageID("core_report", stopped[0].Hash); id != want {
		t.Errorf("report message ID = %s, want %s", id, want)
	}
	b.waitFor(t, "the job's final status at choird", func() bool { return b.laneState(t, "core:long") == "CORE_TERMINATED" })
	var st rpc.ReportStatusRequest
	var raw []byte
	b.pool.QueryRow(context.Background(), "SELECT lane_status->'core:long' FROM choir_control.sessions WHERE session_id = $1",
		b.sessionID).Scan(&raw)
	if err := json.Unmarshal(raw, &st); err != nil || st.Steps != 1 || st.BudgetRemaining.Steps == nil ||
		*st.BudgetRemaining.Steps != config.DefaultPerJobMaxSteps-1 {
		t.Errorf("core:long status at choird = %s (%v)", raw, err)
	}
}

// laneState is a lane's state as choird last heard it.
func (b *testBundle) laneState(t *testing.T, lane string) string {
	t.Helper()
	var state *string
	b.pool.QueryRow(context.Background(), "SELECT lane_status->$2->>'state' FROM choir_control.sessions WHERE session_id = $1",
		b.sessionID, lane).Scan(&state)
	if state == nil {
		return ""
	}
	return *state
}
