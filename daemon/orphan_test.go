package daemon_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/moby/moby/client"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/runtime/process"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// orphanThreshold is the crash threshold of the orphan tests: small, so
// that the bound (threshold plus agentapi.OrphanGrace) passes quickly,
// and large enough that a choird process killed with SIGKILL and started
// again on a loaded machine is back within the bound.
const orphanThreshold = 2 * time.Second

// TestOrphanedAgentStopsByItself kills choird with SIGKILL under each
// runtime. Started again within the bound, choird finds the agent still
// running and brings it back as it always has (the old instance removed,
// a successor resuming its session). Never started again, the agent is
// gone by itself within the bound: the process exits, the container
// stops.
func TestOrphanedAgentStopsByItself(t *testing.T) {
	t.Parallel()
	for _, rt := range []string{"process", "docker"} {
		t.Run(rt, func(t *testing.T) {
			t.Parallel()
			o := choirdtest.Options{DatabaseURL: dbtest.NewDatabase(t),
				Edit: func(c *config.Config, _ config.Secrets) {
					c.HeartbeatIntervalMS = 100
					c.CrashDetectionThresholdMS = orphanThreshold.Milliseconds()
				}}
			probe := orphanProbe{rt: rt}
			switch rt {
			case "process":
				probe.bin = choirdtest.Binary(t, "cmd/choir-agent")
				o.Daemon = daemon.Options{Runtime: rt, AgentBinary: probe.bin}
			case "docker":
				probe.cli = runtimetest.RequireDocker(t)
				bin := runtimetest.BuildStatic(t, "github.com/choirhq/choir/cmd/choir-agent")
				image := runtimetest.ImportImage(t, probe.cli, "choir-agent-orphan", map[string]runtimetest.File{
					"choir-agent": {Source: bin, Mode: 0o755}}, `ENTRYPOINT ["/choir-agent"]`)
				o.Daemon = daemon.Options{Runtime: rt, AgentImage: image}
			}
			p := choirdtest.StartProcess(t, choirdtest.WithTwoAgents(o))
			pool := dbtest.Connect(t, p.DatabaseURL)
			probe.home = p.Dir
			bound := orphanThreshold + agentapi.OrphanGrace

			first := startBeating(t, p, pool)
			old := probe.find(t, first)
			killChoird(t, p)
			if !probe.alive(t, old) {
				t.Fatal("the agent died with choird: nothing was left to adopt")
			}
			p = p.Restart(t)
			back := waitResumed(t, p, pool, first)
			choirdtest.WaitFor(t, "the old instance removed by the restarted choird", p.Logs, func() bool {
				return !probe.alive(t, old)
			})

			// Now choird dies and nobody starts it again.
			inst := probe.find(t, back)
			killed := killChoird(t, p)
			choirdtest.WaitFor(t, "the orphaned agent to stop by itself", nil, func() bool {
				return !probe.alive(t, inst)
			})
			took := time.Since(killed)
			t.Logf("%s: the orphaned agent was gone %s after choird's death (bound %s)", rt, took.Round(time.Millisecond), bound)
			// The bound runs from the last heartbeat choird answered,
			// before the kill; the slack is the agent's stop (a safe
			// point, a last try) and the engine's teardown on a loaded
			// machine.
			if slack := 15 * time.Second; took > bound+slack {
				t.Errorf("the orphaned agent stopped %s after choird's death, beyond the bound %s (+%s slack)", took, bound, slack)
			}
			if took < orphanThreshold {
				t.Errorf("the agent stopped %s after choird's death, before the crash threshold %s: its session "+
					"could still have been adopted", took, orphanThreshold)
			}
			if rt == "process" {
				// The log holds both sessions: count the second one's lines.
				all, _ := os.ReadFile(filepath.Join(p.Dir, "logs", "assistant.log"))
				var b []byte
				for line := range bytes.Lines(all) {
					if bytes.Contains(line, []byte(`"session_id":"`+back+`"`)) {
						b = append(b, line...)
					}
				}
				for _, want := range []string{"choird unreachable; retrying with backoff",
					"choird out of reach for longer than this session could still be adopted; stopping"} {
					if n := bytes.Count(b, []byte(want)); n != 1 {
						t.Errorf("the agent logged %q %d times, want once:\n%s", want, n, b)
					}
				}
			}
		})
	}
}

// startBeating starts assistant through choird's admin socket and waits
// for a heartbeat after its hello; it returns the session.
func startBeating(t *testing.T, p *choirdtest.Process, pool *pgxpool.Pool) string {
	t.Helper()
	c := admin.NewClient(admin.SocketPath(p.Dir))
	defer c.Close()
	st, err := c.AgentStart(context.Background(), "assistant", admin.StartOverrides{DM: "console"})
	if err != nil {
		t.Fatalf("start assistant: %v\n%s", err, p.Logs)
	}
	waitBeat(t, p, pool, st.SessionID)
	return st.SessionID
}

// waitBeat waits for a heartbeat of session id after its hello.
func waitBeat(t *testing.T, p *choirdtest.Process, pool *pgxpool.Pool, id string) {
	t.Helper()
	choirdtest.WaitFor(t, "a heartbeat after the hello", p.Logs, func() bool {
		var ok bool
		pool.QueryRow(context.Background(), `SELECT hello_at IS NOT NULL AND last_heartbeat_at > hello_at
			FROM choir_control.sessions WHERE session_id = $1`, id).Scan(&ok)
		return ok
	})
}

// waitResumed waits for the live session of assistant to be a successor
// of old that heartbeats, and returns it.
func waitResumed(t *testing.T, p *choirdtest.Process, pool *pgxpool.Pool, old string) string {
	t.Helper()
	var id string
	choirdtest.WaitFor(t, "a successor resuming the old session", p.Logs, func() bool {
		pool.QueryRow(context.Background(), `SELECT session_id::text FROM choir_control.sessions
			WHERE resumed_from = $1 AND status = 'active'`, old).Scan(&id)
		return id != ""
	})
	waitBeat(t, p, pool, id)
	return id
}

// killChoird kills choird with SIGKILL and returns when.
func killChoird(t *testing.T, p *choirdtest.Process) time.Time {
	t.Helper()
	at := time.Now()
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	return at
}

// orphanProbe finds an agent's instance and says whether it still runs,
// from outside choird: the process runtime's state files and /proc, or
// the Docker engine.
type orphanProbe struct {
	rt   string
	home string
	bin  string // the agent binary, which the process runtime checks
	cli  *client.Client
}

// find returns the instance of session id: a pid, or a container id.
func (o orphanProbe) find(t *testing.T, id string) string {
	t.Helper()
	ctx := context.Background()
	if o.rt == "process" {
		r, err := process.New(process.Options{Binary: o.bin, StateDir: process.StateDir(o.home)})
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		list, err := r.List(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, inst := range list {
			if inst.SessionID == id && inst.Running() {
				return strconv.Itoa(inst.Pid)
			}
		}
		t.Fatalf("no running process of session %s", id)
	}
	res, err := o.cli.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", runtime.LabelSessionID+"="+id)})
	if err != nil || len(res.Items) != 1 {
		t.Fatalf("containers of session %s: %d, %v", id, len(res.Items), err)
	}
	cid := res.Items[0].ID
	t.Cleanup(func() {
		o.cli.ContainerRemove(context.Background(), cid, client.ContainerRemoveOptions{Force: true}) //nolint:errcheck
	})
	return cid
}

// alive says whether instance still runs: a live process that is not a
// zombie, or a running container.
func (o orphanProbe) alive(t *testing.T, instance string) bool {
	t.Helper()
	if o.rt == "process" {
		pid, _ := strconv.Atoi(instance)
		return syscall.Kill(pid, 0) == nil && !zombie(pid)
	}
	res, err := o.cli.ContainerInspect(context.Background(), instance, client.ContainerInspectOptions{})
	if err != nil {
		return false // removed
	}
	return res.Container.State != nil && res.Container.State.Running
}

// TestStopSaysWhatBecomesOfRunningAgents: choird's stop (Ctrl-C at a
// terminal included) leaves its agents running, and says so, with the
// bound within which a restarted choird resumes them.
func TestStopSaysWhatBecomesOfRunningAgents(t *testing.T) {
	t.Parallel()
	d := choirdtest.StartWithAgents(t, nil)
	if _, err := d.AgentStart(context.Background(), control.Scope{Admin: true, Actor: "test"}, "assistant",
		admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	d.WaitState(t, "assistant", admin.AgentActive)
	pid := agentPid(t, d, "assistant")
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}
	want := "agents left running: started again within 8s, choird resumes them"
	if logs := d.Logs.String(); !strings.Contains(logs, want) || !strings.Contains(logs, `"agents":["assistant"]`) {
		t.Errorf("choird's stop does not say %q of assistant:\n%s", want, logs)
	}
	if syscall.Kill(pid, 0) != nil || zombie(pid) {
		t.Error("choird's stop stopped the agent")
	}
}
