package process_test

import (
	"context"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/runtime/process"
	"github.com/choirhq/choir/daemon/runtime/runtimetest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type testBundle struct {
	bin     string
	state   string
	logs    string
	rt      *process.Runtime
	harness *runtimetest.Harness
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{bin: runtimetest.BuildAgent(t), state: t.TempDir(), logs: t.TempDir()}
	b.rt = newRuntime(t, b)
	same := func(p string) string { return p }
	b.harness = &runtimetest.Harness{
		Runtime:  b.rt,
		Listener: runtimetest.NewListener(t),
		Kill: func(t *testing.T, inst runtime.Instance) {
			if err := syscall.Kill(inst.Pid, syscall.SIGKILL); err != nil {
				t.Fatalf("kill %d: %v", inst.Pid, err)
			}
		},
		AgentWorkspace: same,
		AgentSocket:    same,
		BaseEnv:        process.DefaultBaseEnv,
	}
	return b
}

func newRuntime(t *testing.T, b *testBundle) *process.Runtime {
	t.Helper()
	rt, err := process.New(process.Options{Binary: b.bin, StateDir: b.state, LogDir: b.logs})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	return rt
}

func TestConformance(t *testing.T) {
	t.Parallel()
	runtimetest.Run(t, setup(t).harness)
}

func TestProcess(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.harness

	t.Run("HomeIsPrivateAndOutputIsLogged", func(t *testing.T) {
		t.Parallel()
		spec := h.NewSpec(t)
		inst, conn := h.Start(t, spec)
		home := conn.Hello.Home
		if filepath.Dir(home) != b.state || !strings.HasPrefix(filepath.Base(home), inst.ID) {
			t.Errorf("HOME = %s, want a directory of its own under %s", home, b.state)
		}
		log, err := os.ReadFile(filepath.Join(b.logs, spec.AgentID+".log"))
		if err != nil || !strings.Contains(string(log), "ready\n") {
			t.Errorf("agent log %q (%v) lacks the agent's output", log, err)
		}
		if err := b.rt.Remove(t.Context(), inst.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(home); !os.IsNotExist(err) {
			t.Errorf("HOME %s survived Remove: %v", home, err)
		}
	})

	t.Run("ExitArchivesTheLog", func(t *testing.T) {
		t.Parallel()
		spec := h.NewSpec(t)
		inst, _ := h.Start(t, spec)
		if err := b.rt.Stop(t.Context(), inst.ID, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		// Stop returns once the log is archived: the next instance starts
		// a new file.
		if _, err := os.Stat(filepath.Join(b.logs, spec.AgentID+".log")); !os.IsNotExist(err) {
			t.Errorf("active log still there after the instance stopped: %v", err)
		}
		archives, _ := filepath.Glob(filepath.Join(b.logs, "archive", spec.AgentID, "*.log.gz"))
		if len(archives) != 1 {
			t.Fatalf("archives %v, want one", archives)
		}
		if got := runtimetest.ReadGzip(t, archives[0]); !strings.Contains(got, "ready\n") {
			t.Errorf("archive %q lacks the agent's output", got)
		}
	})

	t.Run("StopKillsTheProcessGroup", func(t *testing.T) {
		t.Parallel()
		inst, conn := h.Start(t, h.NewSpec(t))
		child := spawn(t, conn)
		if err := b.rt.Stop(t.Context(), inst.ID, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		waitDead(t, child)
	})

	t.Run("AgentDeathKillsItsChildren", func(t *testing.T) {
		t.Parallel()
		exits := h.Subscribe(t)
		inst, conn := h.Start(t, h.NewSpec(t))
		child := spawn(t, conn)
		conn.Send("exit 3")
		runtimetest.WaitExit(t, exits, inst.ID)
		waitDead(t, child)
	})

	t.Run("EventsEndWithContext", func(t *testing.T) {
		t.Parallel()
		ctx, cancel := context.WithCancel(t.Context())
		ch, err := b.rt.Events(ctx)
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		select {
		case _, ok := <-ch:
			if ok {
				t.Fatal("got an exit, want a closed channel")
			}
		case <-time.After(5 * time.Second):
			t.Fatal("channel not closed after cancel")
		}
	})
}

func spawn(t *testing.T, conn *runtimetest.Conn) int {
	t.Helper()
	if err := conn.Send("spawn"); err != nil {
		t.Fatal(err)
	}
	var r struct{ Child int }
	if err := conn.Reply(&r); err != nil || r.Child <= 0 {
		t.Fatalf("spawn: %+v %v", r, err)
	}
	return r.Child
}

func waitDead(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for runtimetest.ProcessAlive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d survived its agent", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOrphansOfAPreviousRun plays a choird restart: a second runtime on the
// same state directory finds what the first left running, child processes
// included, and kills it.
func TestOrphansOfAPreviousRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	h := b.harness
	spec := h.NewSpec(t)
	inst, conn := h.Start(t, spec)
	child := spawn(t, conn)
	b.rt.Close() // choird goes away; the agent does not

	next := newRuntime(t, b)
	ctx := t.Context()
	got, err := next.Inspect(ctx, inst.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Running() || got.Pid != inst.Pid || got.AgentID != spec.AgentID || got.Labels[runtime.LabelSessionID] != spec.SessionID {
		t.Fatalf("adopted instance inspects as %+v", got)
	}
	removed, err := runtime.RemoveOrphans(ctx, next, func(i runtime.Instance) bool { return i.ID != inst.ID })
	if err != nil || len(removed) != 1 || removed[0].ID != inst.ID {
		t.Fatalf("remove orphans: %+v %v", removed, err)
	}
	waitDead(t, inst.Pid)
	waitDead(t, child)
	if _, err := next.Inspect(ctx, inst.ID); err == nil {
		t.Errorf("orphan still inspectable after removal")
	}
	if _, err := os.Stat(filepath.Join(b.state, inst.ID+".json")); !os.IsNotExist(err) {
		t.Errorf("state file survived: %v", err)
	}
}

// TestReusedPidIsNotTheAgent: a state file whose pid now belongs to
// another process (start time differs) is an exited instance, and
// removing it kills nothing.
func TestReusedPidIsNotTheAgent(t *testing.T) {
	t.Parallel()
	b := &testBundle{bin: runtimetest.BuildAgent(t), state: t.TempDir()}
	rt := newRuntime(t, b)
	id := "p00112233445566ff"
	state := `{"id":"` + id + `","agent_id":"ghost","session_id":"s1","pid":` + strconv.Itoa(os.Getpid()) + `,"start_ticks":1,"labels":{"choir.managed":"true"}}`
	if err := os.WriteFile(filepath.Join(b.state, id+".json"), []byte(state), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := rt.Inspect(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	if got.Running() || got.State != runtime.StateUnknown || got.ExitCode != -1 {
		t.Fatalf("instance with a reused pid inspects as %+v", got)
	}
	if err := rt.Remove(t.Context(), id); err != nil {
		t.Fatal(err)
	}
	// Still alive: this test's own process was not killed.
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	_, err := process.New(process.Options{Binary: filepath.Join(t.TempDir(), "choir-agent"), StateDir: t.TempDir()})
	if err == nil || !strings.Contains(err.Error(), "go build ./cmd/choir-agent") {
		t.Errorf("missing binary: %v", err)
	}
	_, err = process.New(process.Options{Binary: "/bin/true"})
	if err == nil || !strings.Contains(err.Error(), "no state directory") {
		t.Errorf("missing state dir: %v", err)
	}
}

// TestEgressIsNamedNotEnforced: the process runtime tells the agent where
// the egress gateway is, and says at every start that it cannot make the
// agent's tools use it.
func TestEgressIsNamedNotEnforced(t *testing.T) {
	t.Parallel()
	b := &testBundle{bin: runtimetest.BuildAgent(t), state: t.TempDir(), logs: t.TempDir()}
	var logs syncBuffer
	rt, err := process.New(process.Options{Binary: b.bin, StateDir: b.state, LogDir: b.logs,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Close() })
	same := func(p string) string { return p }
	h := &runtimetest.Harness{Runtime: rt, Listener: runtimetest.NewListener(t), AgentWorkspace: same, AgentSocket: same,
		BaseEnv: process.DefaultBaseEnv}
	sock := filepath.Join(t.TempDir(), "egress.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	spec := h.NewSpec(t)
	spec.EgressSocket = sock
	_, conn := h.Start(t, spec)
	if !slices.Contains(conn.Hello.Env, runtime.EnvEgressSocket+"="+sock) {
		t.Errorf("the agent's environment %v lacks %s=%s", conn.Hello.Env, runtime.EnvEgressSocket, sock)
	}
	if !strings.Contains(logs.String(), "cannot enforce the egress gateway") {
		t.Errorf("no warning that the gateway is not enforced in:\n%s", logs.String())
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
