package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestLifecycleDockerRuntime runs the real choir-agent in a hardened
// container from a FROM-scratch image: the sandbox self-check passes inside
// it, and start, status, stop, restart, a killed container, orphan
// removal and the resume after choird restarts behave as under the
// process runtime.
func TestLifecycleDockerRuntime(t *testing.T) {
	t.Parallel()
	cli := runtimetest.RequireDocker(t)
	bin := runtimetest.BuildStatic(t, "github.com/choirhq/choir/cmd/choir-agent")
	image := runtimetest.ImportImage(t, cli, "choir-agent-lifecycle", map[string]runtimetest.File{
		"choir-agent": {Source: bin, Mode: 0o755},
	}, `ENTRYPOINT ["/choir-agent"]`)
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Daemon: daemon.Options{Runtime: "docker", AgentImage: image},
		Edit: choirdtest.FastHeartbeat})
	home := d.Home
	ctx := context.Background()

	begin := time.Now()
	if code, _, errs := choirctltest.Run(t, home, "agent", "start", "assistant", "--dm", "console"); code != 0 {
		t.Fatalf("start: %s", errs)
	}
	st := d.WaitState(t, "assistant", admin.AgentActive)
	var beat time.Time
	choirdtest.WaitFor(t, "the first heartbeat after the hello", d.Logs, func() bool {
		var hello *time.Time
		d.Pool().QueryRow(ctx, "SELECT hello_at, last_heartbeat_at FROM choir_control.sessions WHERE session_id = $1",
			st.SessionID).Scan(&hello, &beat)
		return hello != nil && beat.After(*hello)
	})
	t.Logf("agent start to first acknowledged heartbeat: %s", beat.Sub(begin).Round(time.Millisecond))

	s, err := d.Runtime().Inspect(ctx, d.Instance(t, st.SessionID))
	if err != nil || !s.Running() {
		t.Fatalf("container: %+v %v", s, err)
	}
	info, err := cli.ContainerInspect(ctx, s.ID, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range info.Container.Config.Env {
		if strings.Contains(e, choirdtest.Canary) {
			t.Errorf("the canary secret is in the container's environment")
		}
	}

	if code, _, errs := choirctltest.Run(t, home, "agent", "restart", "assistant"); code != 0 {
		t.Fatalf("restart: %s", errs)
	}
	st = d.WaitState(t, "assistant", admin.AgentActive)

	if code, _, errs := choirctltest.Run(t, home, "agent", "stop", "assistant"); code != 0 {
		t.Fatalf("stop: %s", errs)
	}
	var status, reason string
	d.Pool().QueryRow(ctx, "SELECT status, end_reason FROM choir_control.sessions WHERE session_id = $1",
		st.SessionID).Scan(&status, &reason)
	if status != "ended" || !strings.Contains(reason, "terminated by the agent") {
		t.Errorf("after stop: %s (%s)", status, reason)
	}

	// A container killed from outside is noticed at once.
	if _, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: "test"}, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	st = d.WaitState(t, "assistant", admin.AgentActive)
	inst := d.Instance(t, st.SessionID)
	if _, err := cli.ContainerKill(ctx, inst, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	d.WaitState(t, "assistant", admin.AgentCrashed)

	// An agent left running by a choird that died is an orphan for the next.
	if _, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: "test"}, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	st = d.WaitState(t, "assistant", admin.AgentActive)
	orphan := d.Instance(t, st.SessionID)
	d = d.Restart(t)
	if _, err := d.Runtime().Inspect(ctx, orphan); err == nil {
		t.Errorf("orphaned container %s survived choird's restart", orphan)
	}
	d.Pool().QueryRow(ctx, "SELECT status FROM choir_control.sessions WHERE session_id = $1", st.SessionID).Scan(&status)
	if status != "crashed" {
		t.Errorf("orphan's session is %s, want crashed", status)
	}
	// The agent comes back by itself, in a new container whose session
	// resumes the orphan's.
	back := d.WaitState(t, "assistant", admin.AgentActive)
	var resumedFrom string
	d.Pool().QueryRow(ctx, "SELECT resumed_from::text FROM choir_control.sessions WHERE session_id = $1",
		back.SessionID).Scan(&resumedFrom)
	if back.SessionID == st.SessionID || resumedFrom != st.SessionID {
		t.Errorf("the live session %s resumes from %q, want a new one resuming %s", back.SessionID, resumedFrom, st.SessionID)
	}
	if inst := d.Instance(t, back.SessionID); inst == orphan {
		t.Errorf("the orphaned container %s was kept", orphan)
	}
}

// TestFailedStartLeavesNothing starts an agent whose image does not exist:
// the start fails naming the image, and no container, lease or session row
// is left.
func TestFailedStartLeavesNothing(t *testing.T) {
	t.Parallel()
	runtimetest.RequireDocker(t)
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Daemon: daemon.Options{Runtime: "docker", AgentImage: "choir-agent-missing:nope"},
		Edit: choirdtest.FastHeartbeat})
	ctx := context.Background()
	_, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: "test"}, "assistant", admin.StartOverrides{})
	if err == nil || !strings.Contains(err.Error(), "choir-agent-missing:nope") {
		t.Fatalf("start = %v, want an error naming the image", err)
	}
	var sessions, leases int
	d.Pool().QueryRow(ctx, "SELECT count(*) FROM choir_control.sessions").Scan(&sessions)
	d.Pool().QueryRow(ctx, "SELECT count(*) FROM choir_control.resource_leases").Scan(&leases)
	if sessions != 0 || leases != 0 {
		t.Errorf("a failed start left %d sessions and %d leases", sessions, leases)
	}
	if list, err := d.Runtime().List(ctx); err != nil || len(list) != 0 {
		t.Errorf("a failed start left instances %v (%v)", list, err)
	}
}
