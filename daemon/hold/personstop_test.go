package hold_test

import (
	"context"
	"strings"
	"testing"

	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestPersonStopIsFinal runs, under each runtime, an agent whose session
// ends on its own and that its start_agent schedule starts again, with the
// ended session's budget, then a person stops: the stop pauses its
// start_agent schedules (held), a schedule a person resumes and that fires
// meanwhile is refused the start (its log line says who stopped the agent
// and how to start it), and once a person starts the agent the held
// schedules resume.
func TestPersonStopIsFinal(t *testing.T) {
	t.Parallel()
	t.Run("Process", func(t *testing.T) {
		t.Parallel()
		testPersonStopIsFinal(t, daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent")})
	})
	t.Run("Docker", func(t *testing.T) {
		t.Parallel()
		cli := runtimetest.RequireDocker(t)
		bin := runtimetest.BuildStatic(t, "github.com/choirhq/choir/cmd/choir-agent")
		image := runtimetest.ImportImage(t, cli, "choir-agent-personstop", map[string]runtimetest.File{
			"choir-agent": {Source: bin, Mode: 0o755},
		}, `ENTRYPOINT ["/choir-agent"]`)
		testPersonStopIsFinal(t, daemon.Options{Runtime: "docker", AgentImage: image})
	})
}

func testPersonStopIsFinal(t *testing.T, opts daemon.Options) {
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Daemon: opts, Edit: choirdtest.FastHeartbeat})
	defer d.StopAgents(t)
	sc := control.Scope{Admin: true, Actor: "test"}
	add := func(text string) int64 {
		t.Helper()
		s, err := d.Schedules().Add(ctx, sc, admin.ScheduleAddRequest{AgentID: "assistant", Cron: "0 3 * * *", Text: text,
			StartAgent: true})
		if err != nil {
			t.Fatal(err)
		}
		return s.ID
	}
	// dueNow makes a schedule due now rather than at 03:00: the job's
	// time and the row's.
	dueNow := func(id int64) {
		t.Helper()
		if _, err := d.Pool().Exec(ctx, `
			WITH s AS (UPDATE choir_control.schedules SET next_run_at = now() WHERE schedule_id = $1 RETURNING job_id, next_run_at)
			UPDATE river_job j SET scheduled_at = s.next_run_at, args = jsonb_set(j.args, '{due}', to_jsonb(s.next_run_at))
			  FROM s WHERE j.id = s.job_id`, id); err != nil {
			t.Fatal(err)
		}
	}
	state := func(id int64) (status string, held, armed bool) {
		t.Helper()
		if err := d.Pool().QueryRow(ctx, `SELECT status, held, job_id IS NOT NULL FROM choir_control.schedules WHERE schedule_id = $1`,
			id).Scan(&status, &held, &armed); err != nil {
			t.Fatal(err)
		}
		return status, held, armed
	}
	mail, plants := add("check the mail"), add("water the plants")

	// A person starts the agent, and its session ends without a person's
	// stop (its instance dies; an agent ending its own session is the
	// same to choird): its schedule starts it again, and that session
	// continues the budget of the one that ended.
	if code, _, errs := choirctltest.Run(t, d.Home, "agent", "start", "assistant"); code != 0 {
		t.Fatalf("start: %s", errs)
	}
	first := d.WaitState(t, "assistant", admin.AgentActive)
	if err := d.Runtime().Stop(ctx, d.Instance(t, first.SessionID), 0); err != nil {
		t.Fatal(err)
	}
	choirdtest.WaitFor(t, "the first session's end", d.Logs, func() bool {
		st := d.LatestStatus(ctx, "assistant")
		return st.State == admin.AgentCrashed || st.State == admin.AgentStopped
	})
	dueNow(mail)
	choirdtest.WaitFor(t, "the agent started by its schedule", d.Logs, func() bool {
		return strings.Contains(d.Logs.String(), `"msg":"agent started by its schedule"`)
	})
	second := d.WaitState(t, "assistant", admin.AgentActive)
	var budgetFrom *string
	d.Pool().QueryRow(ctx, `SELECT budget_from::text FROM choir_control.sessions WHERE session_id = $1`, second.SessionID).Scan(&budgetFrom)
	if budgetFrom == nil || *budgetFrom != first.SessionID {
		t.Errorf("the session the schedule started continues the budget of %v, want the ended session %s", budgetFrom, first.SessionID)
	}

	if code, _, errs := choirctltest.Run(t, d.Home, "agent", "stop", "assistant"); code != 0 {
		t.Fatalf("stop: %s", errs)
	}
	for _, id := range []int64{mail, plants} {
		if status, held, armed := state(id); status != "paused" || !held || armed {
			t.Fatalf("start_agent schedule %d after a person's stop: %s, held %v, armed %v; want paused, held, no pending run",
				id, status, held, armed)
		}
	}

	// A fire after the stop (here a person resumed the schedule, not the
	// agent) queues its message but does not start the agent.
	if _, err := d.Schedules().Resume(ctx, sc, mail); err != nil {
		t.Fatal(err)
	}
	dueNow(mail)
	choirdtest.WaitFor(t, "the schedule's start refused", d.Logs, func() bool {
		logs := d.Logs.String()
		return strings.Contains(logs, `"msg":"schedule could not start its agent; its message waits for the next session"`) &&
			strings.Contains(logs, "was stopped by choirctl") && strings.Contains(logs, "until a person starts it again")
	})
	if st := d.LatestStatus(ctx, "assistant"); st.State == admin.AgentActive || st.State == admin.AgentStarting {
		t.Fatalf("a schedule started the agent a person stopped: %+v", st)
	}

	// A person starts it: the stop is lifted, the held schedule resumes.
	if code, _, errs := choirctltest.Run(t, d.Home, "agent", "start", "assistant"); code != 0 {
		t.Fatalf("start: %s", errs)
	}
	d.WaitState(t, "assistant", admin.AgentActive)
	if status, held, armed := state(plants); status != "active" || held || !armed {
		t.Errorf("held schedule %d after a person's start: %s, held %v, armed %v; want active with its next run", plants, status, held, armed)
	}
}
