package runtimetest

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/daemon/runtime"
)

// Harness is what the conformance suite needs from one runtime.
type Harness struct {
	Runtime runtime.Runtime
	// Image is the stand-in agent's image (docker only).
	Image    string
	Listener *Listener
	// Kill kills an instance from outside the runtime, as a crash or an
	// operator would (docker kill, kill -9).
	Kill func(t *testing.T, inst runtime.Instance)
	// AgentWorkspace and AgentSocket map host paths to what the agent
	// sees.
	AgentWorkspace func(host string) string
	AgentSocket    func(host string) string
	// BaseEnv lists the variable names an agent may see beyond the
	// contract (the process runtime's pass-through, the image's PATH).
	BaseEnv []string
}

const waitTimeout = 30 * time.Second

// NewSpec returns a valid spec for a fresh agent and session, with its own
// workspace.
func (h *Harness) NewSpec(t testing.TB) runtime.Spec {
	t.Helper()
	ws := t.TempDir()
	return runtime.Spec{
		AgentID:       "t" + RandomHex(4),
		SessionID:     RandomHex(16),
		LeaseToken:    "lease-" + RandomHex(16),
		Image:         h.Image,
		Env:           map[string]string{"CHOIR_EXTRA": "x"},
		Workspace:     ws,
		ControlSocket: h.Listener.Path,
		Limits:        runtime.Limits{CPUs: 0.5, MemoryBytes: 128 << 20, PIDs: 64},
		Labels:        map[string]string{"choir.test": "1"},
	}
}

// Start starts spec, removes the instance when the test ends, and waits
// for the agent's hello.
func (h *Harness) Start(t *testing.T, spec runtime.Spec) (runtime.Instance, *Conn) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	inst, err := h.Runtime.Start(ctx, spec)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
		defer cancel()
		if err := h.Runtime.Remove(ctx, inst.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("remove %s: %v", inst.ID, err)
		}
	})
	conn, err := h.Listener.Wait(ctx, spec.SessionID)
	if err != nil {
		t.Fatalf("instance %s: %v", inst.ID, err)
	}
	return inst, conn
}

// Subscribe returns the runtime's exits until the test ends.
func (h *Harness) Subscribe(t *testing.T) <-chan runtime.Exit {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ch, err := h.Runtime.Events(ctx)
	if err != nil {
		cancel()
		t.Fatalf("events: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		for range ch { // drained and closed once ctx ends
		}
	})
	return ch
}

// WaitExit returns the exit of instance id.
func WaitExit(t *testing.T, ch <-chan runtime.Exit, id string) runtime.Exit {
	t.Helper()
	timeout := time.After(waitTimeout)
	for {
		select {
		case e, ok := <-ch:
			if !ok {
				t.Fatalf("events channel closed before instance %s exited", id)
			}
			if e.ID == id {
				return e
			}
		case <-timeout:
			t.Fatalf("no exit of instance %s within %s", id, waitTimeout)
		}
	}
}

func (h *Harness) inspect(t *testing.T, id string) runtime.Instance {
	t.Helper()
	inst, err := h.Runtime.Inspect(t.Context(), id)
	if err != nil {
		t.Fatalf("inspect %s: %v", id, err)
	}
	return inst
}

// Run runs the scenarios every runtime must pass.
func Run(t *testing.T, h *Harness) {
	t.Run("StartInspectStopRemove", func(t *testing.T) { scenarioStartInspectStopRemove(t, h) })
	t.Run("EnvironmentHoldsOnlyTheContract", func(t *testing.T) { scenarioEnvironmentHoldsOnlyTheContract(t, h) })
	t.Run("RestartStartsAFreshInstance", func(t *testing.T) { scenarioRestartStartsAFreshInstance(t, h) })
	t.Run("ListAndRemoveOrphans", func(t *testing.T) { scenarioListAndRemoveOrphans(t, h) })
	t.Run("ExitReportedWhenKilled", func(t *testing.T) { scenarioExitReportedWhenKilled(t, h) })
	t.Run("ExitReportedWhenAgentExits", func(t *testing.T) { scenarioExitReportedWhenAgentExits(t, h) })
	t.Run("StopKillsAfterGrace", func(t *testing.T) { scenarioStopKillsAfterGrace(t, h) })
	t.Run("UnknownInstanceIsNotFound", func(t *testing.T) { scenarioUnknownInstanceIsNotFound(t, h) })
	t.Run("InvalidSpecStartsNothing", func(t *testing.T) { scenarioInvalidSpecStartsNothing(t, h) })
	t.Run("SocketIsOptional", func(t *testing.T) { scenarioSocketIsOptional(t, h) })
}

func scenarioStartInspectStopRemove(t *testing.T, h *Harness) {
	t.Parallel()
	spec := h.NewSpec(t)
	began := time.Now()
	inst, conn := h.Start(t, spec)
	if inst.ID == "" || inst.Runtime != h.Runtime.Name() || inst.AgentID != spec.AgentID || inst.SessionID != spec.SessionID {
		t.Fatalf("Start returned %+v", inst)
	}
	got := h.inspect(t, inst.ID)
	if !got.Running() || got.Pid <= 0 || got.StartedAt.Before(began.Add(-time.Minute)) {
		t.Fatalf("running instance inspects as %+v", got)
	}
	for k, v := range map[string]string{
		runtime.LabelManaged: "true", runtime.LabelAgentID: spec.AgentID,
		runtime.LabelSessionID: spec.SessionID, runtime.LabelRuntime: h.Runtime.Name(), "choir.test": "1",
	} {
		if got.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, got.Labels[k], v)
		}
	}
	hello := conn.Hello
	if hello.AgentID != spec.AgentID || hello.LeaseToken != spec.LeaseToken || hello.Runtime != h.Runtime.Name() {
		t.Errorf("agent saw %+v", hello)
	}
	if !hello.TokenEOF {
		t.Errorf("the agent's standard input did not end after the lease token")
	}
	if want := h.AgentWorkspace(spec.Workspace); hello.Workspace != want || hello.Cwd != want {
		t.Errorf("agent workspace %q, cwd %q, want %q", hello.Workspace, hello.Cwd, want)
	}
	if want := h.AgentSocket(spec.ControlSocket); hello.Socket != want {
		t.Errorf("agent socket %q, want %q", hello.Socket, want)
	}
	if !hello.WorkspaceWritable || !hello.HomeWritable || !hello.TmpWritable {
		t.Errorf("agent could not write: workspace %v, home %v, tmp %v", hello.WorkspaceWritable, hello.HomeWritable, hello.TmpWritable)
	}

	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := h.Runtime.Stop(ctx, inst.ID, 10*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	got = h.inspect(t, inst.ID)
	if got.State != runtime.StateExited || got.ExitCode != 0 || got.FinishedAt.IsZero() {
		t.Fatalf("stopped instance inspects as %+v, want exited with 0", got)
	}
	if err := h.Runtime.Stop(ctx, inst.ID, time.Second); err != nil {
		t.Errorf("second stop: %v", err)
	}
	if err := h.Runtime.Remove(ctx, inst.ID); err != nil {
		t.Fatalf("remove: %v", err)
	}
	if _, err := h.Runtime.Inspect(ctx, inst.ID); !errors.Is(err, runtime.ErrNotFound) {
		t.Errorf("inspect after remove: %v, want ErrNotFound", err)
	}
}

func scenarioEnvironmentHoldsOnlyTheContract(t *testing.T, h *Harness) {
	t.Parallel()
	spec := h.NewSpec(t)
	_, conn := h.Start(t, spec)
	allowed := append([]string{runtime.EnvAgentID, runtime.EnvSessionID, runtime.EnvLeaseTokenFD, runtime.EnvRuntime,
		runtime.EnvWorkspace, runtime.EnvSocket, runtime.EnvHome, runtime.EnvControlPlane, runtime.EnvEgressSocket, "CHOIR_EXTRA", "HOSTNAME"}, h.BaseEnv...)
	for _, kv := range conn.Hello.Env {
		k, v, _ := strings.Cut(kv, "=")
		if !slices.Contains(allowed, k) {
			t.Errorf("unexpected variable %s in the agent's environment", k)
		}
		if k == "CHOIR_EXTRA" && v != "x" {
			t.Errorf("spec.Env not passed: %s", kv)
		}
		// Whatever the agent starts inherits its environment (and can
		// read the one it was started with in /proc): no token there.
		if strings.Contains(v, spec.LeaseToken) {
			t.Errorf("the lease token is in the agent's environment, in %s", k)
		}
	}
	if conn.Hello.LeaseToken != spec.LeaseToken {
		t.Errorf("the agent read lease token %q from its standard input, want %q", conn.Hello.LeaseToken, spec.LeaseToken)
	}
}

func scenarioRestartStartsAFreshInstance(t *testing.T, h *Harness) {
	t.Parallel()
	spec := h.NewSpec(t)
	first, _ := h.Start(t, spec)
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	if err := h.Runtime.Stop(ctx, first.ID, 10*time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if err := h.Runtime.Remove(ctx, first.ID); err != nil {
		t.Fatalf("remove: %v", err)
	}
	spec.SessionID, spec.LeaseToken = RandomHex(16), "lease-"+RandomHex(16)
	second, conn := h.Start(t, spec)
	if second.ID == first.ID {
		t.Fatalf("restart reused instance id %s", first.ID)
	}
	if conn.Hello.SessionID != spec.SessionID || conn.Hello.LeaseToken != spec.LeaseToken {
		t.Errorf("restarted agent saw session %s token %s", conn.Hello.SessionID, conn.Hello.LeaseToken)
	}
	if !h.inspect(t, second.ID).Running() {
		t.Errorf("restarted instance is not running")
	}
}

func scenarioListAndRemoveOrphans(t *testing.T, h *Harness) {
	t.Parallel()
	a, _ := h.Start(t, h.NewSpec(t))
	b, _ := h.Start(t, h.NewSpec(t))
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	// An exited instance is an orphan too.
	if err := h.Runtime.Stop(ctx, b.ID, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	list, err := h.Runtime.List(ctx)
	if err != nil {
		t.Fatalf("list: %v", err)
	}
	mine := func(inst runtime.Instance) bool { return inst.ID == a.ID || inst.ID == b.ID }
	var found []string
	for _, inst := range list {
		if mine(inst) {
			found = append(found, inst.ID)
			if inst.Labels[runtime.LabelManaged] != "true" {
				t.Errorf("listed %s without the managed label", inst.ID)
			}
		}
	}
	if len(found) != 2 {
		t.Fatalf("list found %v of [%s %s]", found, a.ID, b.ID)
	}
	// Keep everything but ours: parallel tests own the rest.
	removed, err := runtime.RemoveOrphans(ctx, h.Runtime, func(inst runtime.Instance) bool { return !mine(inst) })
	if err != nil {
		t.Fatalf("remove orphans: %v", err)
	}
	if len(removed) != 2 {
		t.Fatalf("removed %d orphans, want 2: %+v", len(removed), removed)
	}
	list, err = h.Runtime.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, inst := range list {
		if mine(inst) {
			t.Errorf("orphan %s still listed", inst.ID)
		}
	}
}

func scenarioExitReportedWhenKilled(t *testing.T, h *Harness) {
	t.Parallel()
	exits := h.Subscribe(t)
	spec := h.NewSpec(t)
	inst, _ := h.Start(t, spec)
	h.Kill(t, inst)
	e := WaitExit(t, exits, inst.ID)
	if e.AgentID != spec.AgentID || e.SessionID != spec.SessionID || e.ExitCode != 137 || e.At.IsZero() {
		t.Errorf("exit %+v, want agent %s session %s code 137", e, spec.AgentID, spec.SessionID)
	}
	got := h.inspect(t, inst.ID)
	if got.State != runtime.StateExited || got.ExitCode != 137 {
		t.Errorf("killed instance inspects as %+v", got)
	}
}

func scenarioExitReportedWhenAgentExits(t *testing.T, h *Harness) {
	t.Parallel()
	exits := h.Subscribe(t)
	inst, conn := h.Start(t, h.NewSpec(t))
	if err := conn.Send("exit 7"); err != nil {
		t.Fatal(err)
	}
	if e := WaitExit(t, exits, inst.ID); e.ExitCode != 7 {
		t.Errorf("exit code %d, want 7", e.ExitCode)
	}
}

func scenarioStopKillsAfterGrace(t *testing.T, h *Harness) {
	t.Parallel()
	inst, conn := h.Start(t, h.NewSpec(t))
	if err := conn.Send("hang"); err != nil {
		t.Fatal(err)
	}
	var ack map[string]bool
	if err := conn.Reply(&ack); err != nil || !ack["hanging"] {
		t.Fatalf("hang: %v %v", ack, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	began := time.Now()
	if err := h.Runtime.Stop(ctx, inst.ID, time.Second); err != nil {
		t.Fatalf("stop: %v", err)
	}
	took := time.Since(began)
	if took < 900*time.Millisecond || took > 15*time.Second {
		t.Errorf("stop took %s with a 1s grace", took)
	}
	if got := h.inspect(t, inst.ID); got.State != runtime.StateExited || got.ExitCode != 137 {
		t.Errorf("instance after forced stop: %+v, want exited with 137", got)
	}
}

func scenarioUnknownInstanceIsNotFound(t *testing.T, h *Harness) {
	t.Parallel()
	ctx := t.Context()
	for _, id := range []string{"p0123456789abcdef", "0123456789ab", "nonsense", ""} {
		if _, err := h.Runtime.Inspect(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("inspect %q: %v", id, err)
		}
		if err := h.Runtime.Stop(ctx, id, time.Second); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("stop %q: %v", id, err)
		}
		if err := h.Runtime.Remove(ctx, id); !errors.Is(err, runtime.ErrNotFound) {
			t.Errorf("remove %q: %v", id, err)
		}
	}
}

func scenarioInvalidSpecStartsNothing(t *testing.T, h *Harness) {
	t.Parallel()
	spec := h.NewSpec(t)
	spec.Workspace = filepath.Join(spec.Workspace, "missing")
	spec.Env["CHOIR_LEASE_TOKEN"] = "x"
	spec.Env["bad-name"] = "x"
	_, err := h.Runtime.Start(t.Context(), spec)
	if !errors.Is(err, runtime.ErrInvalidSpec) {
		t.Fatalf("start: %v, want ErrInvalidSpec", err)
	}
	for _, want := range []string{spec.Workspace + ": no such file or directory", "CHOIR_LEASE_TOKEN: set by the runtime", `"bad-name"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	list, err := h.Runtime.List(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, inst := range list {
		if inst.AgentID == spec.AgentID {
			t.Errorf("invalid spec left instance %+v", inst)
		}
	}
}

func scenarioSocketIsOptional(t *testing.T, h *Harness) {
	t.Parallel()
	spec := h.NewSpec(t)
	spec.ControlSocket = ""
	ctx, cancel := context.WithTimeout(t.Context(), waitTimeout)
	defer cancel()
	inst, err := h.Runtime.Start(ctx, spec)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	defer h.Runtime.Remove(context.Background(), inst.ID)
	if !h.inspect(t, inst.ID).Running() {
		t.Errorf("instance without socket is not running")
	}
}

// ProcessAlive reports whether pid exists and is not a zombie.
func ProcessAlive(pid int) bool {
	data, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(data), ')')
	return i > 0 && i+2 < len(data) && data[i+2] != 'Z' && data[i+2] != 'X'
}

// BenchStart measures the start latency: from Runtime.Start to the
// agent's first connection on the control socket (its hello), and to
// Start's return. It reports the p50 and p95 of both in milliseconds.
func BenchStart(b *testing.B, h *Harness) {
	var toReturn, toHello []time.Duration
	ctx := b.Context()
	for b.Loop() {
		b.StopTimer()
		spec := h.NewSpec(b)
		b.StartTimer()
		began := time.Now()
		inst, err := h.Runtime.Start(ctx, spec)
		if err != nil {
			b.Fatalf("start: %v", err)
		}
		returned := time.Since(began)
		wctx, cancel := context.WithTimeout(ctx, waitTimeout)
		_, err = h.Listener.Wait(wctx, spec.SessionID)
		cancel()
		if err != nil {
			b.Fatal(err)
		}
		hello := time.Since(began)
		b.StopTimer()
		toReturn, toHello = append(toReturn, returned), append(toHello, hello)
		if err := h.Runtime.Remove(ctx, inst.ID); err != nil {
			b.Fatalf("remove: %v", err)
		}
		b.StartTimer()
	}
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"start", toReturn}, {"hello", toHello}} {
		b.ReportMetric(percentile(m.d, 50), m.name+"-p50-ms")
		b.ReportMetric(percentile(m.d, 95), m.name+"-p95-ms")
	}
}

// percentile returns the p-th percentile of d in milliseconds (nearest
// rank).
func percentile(d []time.Duration, p int) float64 {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (p*len(s)+99)/100 - 1
	i = max(0, min(i, len(s)-1))
	return float64(s[i].Microseconds()) / 1000
}
