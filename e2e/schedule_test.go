package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// expectScheduled checks that the model's request answers a scheduled
// message: the last message is the answer to the lane's notice call, the
// agent's own note (never the user's words), with the header and the
// text.
func expectScheduled(head, text string) func(t testing.TB, r *llmtest.Request) {
	return func(t testing.TB, r *llmtest.Request) {
		m := r.Last()
		var n struct {
			Kind   string `json:"kind"`
			Notice string `json:"notice"`
		}
		json.Unmarshal([]byte(m.Content), &n) //nolint:errcheck // checked below
		if m.Role != "tool" || n.Kind != "schedule" || !strings.HasPrefix(n.Notice, head) || !strings.HasSuffix(n.Notice, "] "+text) {
			t.Errorf("last message %s %q, want the agent's own note %q…] %s", m.Role, m.Content, head, text)
		}
	}
}

// waitReply waits for an outbox row of agentID with text.
func waitReply(t *testing.T, d *daemon.Daemon, text string) {
	t.Helper()
	waitFor(t, "the reply "+text, func() bool {
		var n int
		d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM choir_control.outbox WHERE agent_id = 'assistant' AND text = $1`,
			text).Scan(&n)
		return n == 1
	})
}

// waitDelivered waits until the agent's replicated log holds every
// scheduled message, as the audit view of fires shows it.
func waitDelivered(t *testing.T, d *daemon.Daemon, fires int) {
	t.Helper()
	waitFor(t, "the scheduled messages in the agent's log", func() bool {
		var n int
		d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM choir_audit.schedule_fires
			WHERE agent_id = 'assistant' AND outcome = 'fired' AND delivered_at IS NOT NULL`).Scan(&n)
		return n == fires
	})
}

// TestAgentRemindsItsUser runs a reminder end to end: the model calls
// choir.remind through EXECUTE_HOST_TOOL, River fires it two seconds
// later, the message goes through the inbox to the running agent as a
// scheduled event, and the model's answer to it reaches the outbox.
func TestAgentRemindsItsUser(t *testing.T) {
	t.Parallel()
	srv := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{ID: "1", Name: "choir.remind", Arguments: `{"in":"2s","text":"stretch your legs"}`}),
		llmtest.Text("I will remind you.").Expect(func(t testing.TB, r *llmtest.Request) {
			if c := lastToolContent(t, r); !strings.Contains(c, `"status":"active"`) || !strings.Contains(c, `"purpose":"reminder"`) {
				t.Errorf("choir.remind result = %s", c)
			}
		}),
		llmtest.Text("Time to stretch your legs!").Expect(expectScheduled("[reminder #1 for the user; tell them, due ", "stretch your legs")),
		summaryStep(),
	)
	d, home := choird(t, srv)
	sessionID := startAgent(t, d, home)
	asked := time.Now()
	if _, err := d.Push(sessionID, rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: 7,
		Gateway: "console", ChatID: "operator", UserID: "operator", Text: "remind me in 2s to stretch", ReceivedAt: asked}}); err != nil {
		t.Fatal(err)
	}
	waitReply(t, d, "I will remind you.")
	waitReply(t, d, "Time to stretch your legs!")
	waitDelivered(t, d, 1)
	var due, fired time.Time
	if err := d.Pool().QueryRow(context.Background(), `SELECT due_at, fired_at FROM choir_audit.schedule_fires`).Scan(&due, &fired); err != nil {
		t.Fatal(err)
	}
	if due.Sub(asked) < 2*time.Second || fired.Before(due) {
		t.Errorf("asked at %s, due %s, fired %s: want the fire two seconds after the request, not before", asked, due, fired)
	}
}

// TestScheduledMessageWaitsForItsAgent fires a schedule while its agent is
// not running: the message waits in the inbox, and the agent's next
// session gets it at its hello and answers it.
func TestScheduledMessageWaitsForItsAgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := llmtest.NewServer(t,
		llmtest.Text("Good morning! Nothing is on today.").Expect(expectScheduled("[scheduled #1, due ", "morning briefing")),
		summaryStep(),
	)
	d, home := choird(t, srv)
	if _, err := d.Schedules().Add(ctx, control.Scope{Admin: true, Actor: "test"},
		admin.ScheduleAddRequest{AgentID: "assistant", In: "1s", Text: "morning briefing"}); err != nil {
		t.Fatal(err)
	}
	var pushed bool
	waitFor(t, "the fire", func() bool {
		return d.Pool().QueryRow(ctx, `SELECT pushed_at IS NOT NULL FROM choir_control.inbox WHERE kind = 'scheduled'`).Scan(&pushed) == nil
	})
	if pushed {
		t.Error("message pushed while no session runs")
	}
	startAgent(t, d, home)
	waitReply(t, d, "Good morning! Nothing is on today.")
	waitDelivered(t, d, 1)
}

// TestScheduleStartsItsAgent fires a schedule that says start_agent while
// its agent is not running: choird starts the agent through the process
// runtime, and the new session answers the message.
func TestScheduleStartsItsAgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := llmtest.NewServer(t,
		llmtest.Text("No new mail.").Expect(expectScheduled("[scheduled #1 (cron ", "check the mail")),
		summaryStep(),
	)
	c := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL(), FastHeartbeat: true, ReadyTimeout: 2 * time.Minute,
		Daemon: daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent")}})
	// Cleanups run last first: the agent stops before choird does.
	t.Cleanup(func() {
		if _, err := c.AgentStop(context.Background(), control.Scope{Admin: true, Actor: "test"}, "assistant"); err != nil {
			t.Errorf("stop assistant: %v", err)
		}
	})
	s, err := c.Schedules().Add(ctx, control.Scope{Admin: true, Actor: "test"},
		admin.ScheduleAddRequest{AgentID: "assistant", Cron: "0 3 * * *", Text: "check the mail", StartAgent: true})
	if err != nil {
		t.Fatal(err)
	}
	// Due now rather than at 03:00: the job's time and the row's.
	if _, err := c.Pool().Exec(ctx, `
		WITH s AS (UPDATE choir_control.schedules SET next_run_at = now() WHERE schedule_id = $1 RETURNING job_id, next_run_at)
		UPDATE river_job j SET scheduled_at = s.next_run_at, args = jsonb_set(j.args, '{due}', to_jsonb(s.next_run_at))
		  FROM s WHERE j.id = s.job_id`, s.ID); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the agent started by its schedule", func() bool {
		return strings.Contains(c.Logs.String(), `"msg":"agent started by its schedule"`)
	})
	waitReply(t, c.Daemon, "No new mail.")
	waitDelivered(t, c.Daemon, 1)
	if _, err := c.Schedules().Cancel(ctx, control.Scope{Admin: true, Actor: "test"}, s.ID); err != nil {
		t.Fatal(err)
	}
}
