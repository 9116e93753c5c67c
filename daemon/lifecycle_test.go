package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/ctl"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

var (
	agentBinOnce sync.Once
	agentBin     string
	agentBinErr  error
)

// buildAgent builds choir-agent once per test binary, without cgo.
func buildAgent(t testing.TB) string {
	t.Helper()
	agentBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "choir-agent-bin-")
		if err != nil {
			agentBinErr = err
			return
		}
		agentBin = filepath.Join(dir, "choir-agent")
		// Static, as make and the images build it: without cgo the agent
		// drops capabilities on every thread at once (sandbox.Harden).
		cmd := exec.Command("go", "build", "-o", agentBin, "github.com/choirhq/choir/cmd/choir-agent")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		if err != nil {
			agentBinErr = err
			agentBin = string(out)
		}
	})
	if agentBinErr != nil {
		t.Fatalf("build choir-agent: %v\n%s", agentBinErr, agentBin)
	}
	return agentBin
}

const canary = "sk-canary-0d5e9b21"

// lifecycleHome writes a configuration with two agents that share the
// default workspace, a canary model key, and a fast heartbeat.
func lifecycleHome(t testing.TB, url string) string {
	t.Helper()
	return lifecycleHomeWith(t, url, nil)
}

func lifecycleHomeWith(t testing.TB, url string, edit func(*config.Config)) string {
	t.Helper()
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	cfg := testConfig(t)
	cfg.Postgres = config.Postgres{Host: pc.Host, Port: int(pc.Port), Database: pc.Database, Secret: "postgres-admin"}
	cfg.HeartbeatIntervalMS = 100
	cfg.CrashDetectionThresholdMS = 3000
	secrets := config.Secrets{"postgres-admin": "postgres:", "model-key": canary, "git-token": "ghp-test"}
	if edit != nil {
		edit(cfg)
	}
	if err := config.WriteFiles(home, cfg, secrets, false); err != nil {
		t.Fatal(err)
	}
	for _, ws := range cfg.Workspaces {
		if err := os.MkdirAll(ws.Path, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return home
}

type choirdRun struct {
	d      *Daemon
	home   string
	cancel context.CancelFunc
	done   chan error
}

func startChoird(t testing.TB, home string) *choirdRun {
	t.Helper()
	return startChoirdWith(t, home, Options{Runtime: "process", AgentBinary: buildAgent(t)})
}

func startChoirdWith(t testing.TB, home string, opts Options) *choirdRun {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan *Daemon, 1)
	r := &choirdRun{home: home, cancel: cancel, done: make(chan error, 1)}
	go func() {
		opts.Home, opts.Stderr, opts.Ready = home, &lockedBuffer{}, func(d *Daemon) { ready <- d }
		r.done <- Run(ctx, opts)
	}()
	select {
	case r.d = <-ready:
	case err := <-r.done:
		cancel()
		t.Fatalf("choird: %v", err)
	case <-time.After(time.Minute):
		cancel()
		t.Fatal("choird not ready")
	}
	return r
}

// stop stops every running agent, then choird.
func (r *choirdRun) stop(t testing.TB) {
	t.Helper()
	for id := range r.d.Snapshot().Config.Agents {
		if st := r.d.LatestStatus(context.Background(), id); st.State == admin.AgentActive || st.State == admin.AgentStarting {
			if _, err := r.d.AgentStop(context.Background(), Scope{Admin: true, Actor: "test"}, id); err != nil {
				t.Errorf("stop %s: %v", id, err)
			}
		}
	}
	r.kill(t)
}

// kill stops choird alone; its agents keep running, as after a crash.
func (r *choirdRun) kill(t testing.TB) {
	t.Helper()
	r.cancel()
	if err := <-r.done; err != nil {
		t.Errorf("choird: %v", err)
	}
}

func choirctl(t *testing.T, home string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := ctl.Run(context.Background(), append([]string{"--home", home}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

func (r *choirdRun) waitState(t *testing.T, agent string, want admin.AgentState) admin.AgentStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := r.d.LatestStatus(context.Background(), agent)
		if st.State == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s is %s, want %s", agent, st.State, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func agentPid(t *testing.T, r *choirdRun, agent string) int {
	t.Helper()
	s, err := r.d.runtime.List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, inst := range s {
		if inst.AgentID == agent && inst.Running() {
			return inst.Pid
		}
	}
	t.Fatalf("no running instance of %s", agent)
	return 0
}

// TestRestartBringsBackACrashedAgent: the crash notice offers /restart and
// choirctl agent restart; both start an agent that is not running,
// resuming the chain of its crashed session.
func TestRestartBringsBackACrashedAgent(t *testing.T) {
	t.Parallel()
	home := lifecycleHomeWith(t, dbtest.NewDatabase(t), func(c *config.Config) {
		c.DMs["mine"] = config.DM{Gateway: "console", UserID: "mine"}
		a := c.Agents["assistant"]
		a.Defaults.DM = "mine"
		c.Agents["assistant"] = a
	})
	r := startChoird(t, home)
	defer r.stop(t)
	ctx := context.Background()
	for _, how := range []string{"choirctl", "its DM"} {
		if code, _, errs := choirctl(t, home, "agent", "start", "assistant"); code != 0 {
			t.Fatalf("start: %s", errs)
		}
		before := r.waitState(t, "assistant", admin.AgentActive)
		if err := syscall.Kill(agentPid(t, r, "assistant"), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		r.waitState(t, "assistant", admin.AgentCrashed)
		switch how {
		case "choirctl":
			if code, _, errs := choirctl(t, home, "agent", "restart", "assistant"); code != 0 {
				t.Fatalf("restart of a crashed agent: %s", errs)
			}
		default:
			sc, err := r.d.DMScope(ctx, gateway.DM{Name: "mine", Gateway: "console"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.d.AgentRestart(ctx, sc, "assistant"); err != nil {
				t.Fatalf("restart of a crashed agent from its DM: %v", err)
			}
		}
		after := r.waitState(t, "assistant", admin.AgentActive)
		var from, dm string
		r.d.pool.QueryRow(ctx, "SELECT coalesce(resumed_from::text, ''), resource_bindings->>'dm' FROM choir_control.sessions WHERE session_id = $1",
			after.SessionID).Scan(&from, &dm)
		if from != before.SessionID || dm != "mine" {
			t.Errorf("restarted from %s: session %s resumes %q on DM %q, want the crashed %s on mine", how, after.SessionID, from, dm, before.SessionID)
		}
		if code, _, errs := choirctl(t, home, "agent", "stop", "assistant"); code != 0 {
			t.Fatalf("stop: %s", errs)
		}
	}
}

func TestLifecycleProcessRuntime(t *testing.T) {
	t.Parallel()
	home := lifecycleHome(t, dbtest.NewDatabase(t))
	r := startChoird(t, home)
	defer r.stop(t)

	t.Run("StartWithoutDMUsesTheDefault", func(t *testing.T) {
		code, _, errs := choirctl(t, home, "agent", "start", "assistant")
		if code != 0 {
			t.Fatalf("start without --dm: exit %d: %s", code, errs)
		}
		st := r.waitState(t, "assistant", admin.AgentActive)
		var dm string
		r.d.pool.QueryRow(context.Background(), "SELECT resource_bindings->>'dm' FROM choir_control.sessions WHERE session_id = $1",
			st.SessionID).Scan(&dm)
		if want := r.d.Snapshot().Config.Agents["assistant"].Defaults.DM; dm != want {
			t.Errorf("the session is bound to DM %q, want the agent's defaults.dm %q", dm, want)
		}
		if code, _, errs := choirctl(t, home, "agent", "stop", "assistant"); code != 0 {
			t.Fatalf("stop: %s", errs)
		}
	})

	t.Run("UnknownAgentOrResourceIsNamed", func(t *testing.T) {
		code, _, errs := choirctl(t, home, "agent", "start", "ghost", "--dm", "console")
		if code == 0 || !strings.Contains(errs, `agent "ghost" is not in config.json`) {
			t.Fatalf("exit %d: %s", code, errs)
		}
		code, _, errs = choirctl(t, home, "agent", "start", "assistant", "--dm", "console", "--workspace", "nope")
		if code == 0 || !strings.Contains(errs, "--workspace=nope") {
			t.Fatalf("exit %d: %s", code, errs)
		}
	})

	t.Run("StartStatusStopRestart", func(t *testing.T) {
		code, out, errs := choirctl(t, home, "agent", "start", "assistant", "--dm", "console")
		if code != 0 {
			t.Fatalf("start: %s", errs)
		}
		if !strings.Contains(out, "assistant") {
			t.Errorf("start output: %s", out)
		}
		st := r.waitState(t, "assistant", admin.AgentActive)
		if st.Runtime != "process" {
			t.Errorf("runtime = %q", st.Runtime)
		}
		pid := agentPid(t, r, "assistant")

		t.Run("CanarySecretIsNowhereButInMemory", func(t *testing.T) {
			environ, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(environ, []byte(canary)) {
				t.Error("the canary secret is in the agent's environment")
			}
			filepath.Walk(home, func(path string, info os.FileInfo, err error) error {
				if err != nil || info.IsDir() || filepath.Base(path) == "secrets.json" || info.Mode()&os.ModeSocket != 0 {
					return nil
				}
				if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(canary)) {
					t.Errorf("the canary secret leaked into %s", path)
				}
				return nil
			})
			var n int
			r.d.pool.QueryRow(context.Background(), `SELECT count(*) FROM choir_control.session_events
				WHERE payload::text LIKE '%' || $1 || '%'`, canary).Scan(&n)
			if n != 0 {
				t.Errorf("the canary secret is in %d session events", n)
			}
		})

		t.Run("GitIdentityIsInTheAgentsGitConfig", func(t *testing.T) {
			var found string
			waitUntil(t, "the agent's .gitconfig", func() bool {
				filepath.Walk(filepath.Join(home, "run"), func(path string, info os.FileInfo, err error) error {
					if err == nil && info.Name() == ".gitconfig" {
						b, _ := os.ReadFile(path)
						found = string(b)
					}
					return nil
				})
				return strings.Contains(found, "dev@choir.local") && strings.Contains(found, "cred-helper")
			})
			if !strings.Contains(found, "name = Dev") || strings.Contains(found, "ghp-test") {
				t.Errorf(".gitconfig = %q", found)
			}
			// git asks the agent binary, as git-cred-helper, which asks the
			// running agent: the token goes only to the allowed host.
			var agentHome string
			filepath.Walk(filepath.Join(home, "run"), func(path string, info os.FileInfo, err error) error {
				if err == nil && info.Name() == ".gitconfig" {
					agentHome = filepath.Dir(path)
				}
				return nil
			})
			fill := func(host string) string {
				cmd := exec.Command("git", "credential", "fill")
				cmd.Env = []string{"HOME=" + agentHome, "PATH=" + os.Getenv("PATH"), "GIT_TERMINAL_PROMPT=0"}
				cmd.Stdin = strings.NewReader("protocol=https\nhost=" + host + "\n\n")
				out, _ := cmd.CombinedOutput()
				return string(out)
			}
			if out := fill("git.example.com"); !strings.Contains(out, "password=ghp-test") {
				t.Errorf("allowed host got: %q", out)
			}
			if out := fill("evil.example.com"); strings.Contains(out, "ghp-test") {
				t.Errorf("another host got the token: %q", out)
			}

			// A rotated token reaches the running agent with secret apply.
			secrets := config.Secrets{"postgres-admin": "postgres:", "model-key": canary, "git-token": "ghp-rotated"}
			if err := os.WriteFile(filepath.Join(home, "secrets.json"), mustJSON(t, map[string]string(secrets)), 0o600); err != nil {
				t.Fatal(err)
			}
			if code, out, errs := choirctl(t, home, "secret", "apply"); code != 0 || !strings.Contains(out, "1 running agents") {
				t.Fatalf("secret apply: %d %s %s", code, out, errs)
			}
			waitUntil(t, "the rotated token in the agent", func() bool {
				return strings.Contains(fill("git.example.com"), "password=ghp-rotated")
			})
		})

		t.Run("SecondAgentOnTheSameWorkspaceIsRefusedNamingTheHolder", func(t *testing.T) {
			code, _, errs := choirctl(t, home, "agent", "start", "helper", "--dm", "second")
			if code == 0 || !strings.Contains(errs, "leased to agent assistant") {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var sessions int
			r.d.pool.QueryRow(context.Background(), "SELECT count(*) FROM choir_control.sessions WHERE agent_id = 'helper'").Scan(&sessions)
			if sessions != 0 {
				t.Errorf("a refused start left %d sessions", sessions)
			}
		})

		code, out, _ = choirctl(t, home, "agent", "status", "assistant")
		if code != 0 || !strings.Contains(out, "active") {
			t.Fatalf("status: %s", out)
		}

		code, _, errs = choirctl(t, home, "agent", "restart", "assistant")
		if code != 0 {
			t.Fatalf("restart: %s", errs)
		}
		r.waitState(t, "assistant", admin.AgentActive)
		if newPid := agentPid(t, r, "assistant"); newPid == pid {
			t.Error("restart kept the same process")
		}

		code, _, errs = choirctl(t, home, "agent", "stop", "assistant")
		if code != 0 {
			t.Fatalf("stop: %s", errs)
		}
		var status, reason string
		r.d.pool.QueryRow(context.Background(), `SELECT status, end_reason FROM choir_control.sessions
			WHERE agent_id = 'assistant' ORDER BY started_at DESC LIMIT 1`).Scan(&status, &reason)
		if status != "ended" || !strings.Contains(reason, "terminated by the agent") {
			t.Errorf("after stop: %s (%s), want ended by the agent itself", status, reason)
		}
		var leases int
		r.d.pool.QueryRow(context.Background(), "SELECT count(*) FROM choir_audit.leases").Scan(&leases)
		if leases != 0 {
			t.Errorf("%d leases after stop", leases)
		}
	})

	t.Run("KilledAgentIsCrashedAtOnce", func(t *testing.T) {
		if code, _, errs := choirctl(t, home, "agent", "start", "assistant", "--dm", "console"); code != 0 {
			t.Fatalf("start: %s", errs)
		}
		r.waitState(t, "assistant", admin.AgentActive)
		syscall.Kill(agentPid(t, r, "assistant"), syscall.SIGKILL)
		// Well before the 3 s heartbeat threshold: the runtime reported it.
		start := time.Now()
		r.waitState(t, "assistant", admin.AgentCrashed)
		t.Logf("crash noticed %s after the kill", time.Since(start))
		var breaks int
		r.d.pool.QueryRow(context.Background(), "SELECT count(*) FROM choir_audit.chain_breaks").Scan(&breaks)
		if breaks != 0 {
			t.Errorf("%d chain breaks after kill -9", breaks)
		}
	})

	t.Run("WorkspaceListAndReset", func(t *testing.T) {
		ws := r.d.Snapshot().Config.Workspaces["main"].Path
		os.WriteFile(filepath.Join(ws, "junk.txt"), []byte("x"), 0o644)
		// The workspace is leased: reset stops its agent first.
		if code, _, errs := choirctl(t, home, "agent", "start", "assistant", "--dm", "console"); code != 0 {
			t.Fatalf("start: %s", errs)
		}
		r.waitState(t, "assistant", admin.AgentActive)
		if code, out, _ := choirctl(t, home, "workspace", "list"); code != 0 || !strings.Contains(out, "assistant") {
			t.Fatalf("list does not show the holder: %s", out)
		}
		code, out, _ := choirctl(t, home, "workspace", "list")
		if code != 0 || !strings.Contains(out, "main") {
			t.Fatalf("list: %s", out)
		}
		if code, _, errs := choirctl(t, home, "workspace", "reset", "main"); code != 0 {
			t.Fatalf("reset: %s", errs)
		}
		if entries, _ := os.ReadDir(ws); len(entries) != 0 {
			t.Errorf("workspace not empty: %v", entries)
		}
		if st := r.d.LatestStatus(context.Background(), "assistant"); st.State != admin.AgentStopped {
			t.Errorf("the agent leasing the workspace is %s after reset, want stopped", st.State)
		}
	})
}

func TestOrphansAreRemovedWhenChoirdRestarts(t *testing.T) {
	t.Parallel()
	home := lifecycleHome(t, dbtest.NewDatabase(t))
	r := startChoird(t, home)
	if _, err := r.d.AgentStart(context.Background(), Scope{Admin: true, Actor: "test"}, "assistant", StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	old := r.waitState(t, "assistant", admin.AgentActive)
	pid := agentPid(t, r, "assistant")
	r.kill(t) // the agent keeps running: choird's instances outlive it

	r = startChoird(t, home)
	defer r.stop(t)
	if err := syscall.Kill(pid, 0); err == nil {
		// Reaped asynchronously by the runtime; give it a moment.
		deadline := time.Now().Add(10 * time.Second)
		for syscall.Kill(pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if syscall.Kill(pid, 0) == nil {
			t.Errorf("orphaned agent %d still runs after choird restarted", pid)
		}
	}
	var status string
	r.d.pool.QueryRow(context.Background(), "SELECT status FROM choir_control.sessions WHERE session_id = $1",
		old.SessionID).Scan(&status)
	if status != "crashed" {
		t.Errorf("orphan's session is %s, want crashed", status)
	}
	// The agent came back by itself, in a new instance and session.
	if st := r.waitState(t, "assistant", admin.AgentActive); st.SessionID == old.SessionID {
		t.Error("the orphan's session is live again")
	}
	if newPid := agentPid(t, r, "assistant"); newPid == pid {
		t.Error("the orphaned instance was kept")
	}
}

func pushText(t *testing.T, r *choirdRun, agent, text string) {
	t.Helper()
	st := r.d.LatestStatus(context.Background(), agent)
	if _, err := r.d.Push(st.SessionID, rpcUserMessage(text)); err != nil {
		t.Fatal(err)
	}
}

func TestFaultsProcessRuntime(t *testing.T) {
	t.Parallel()

	t.Run("KilledAgentResumesFromSnapshotAndTail", func(t *testing.T) {
		t.Parallel()
		home := lifecycleHomeWith(t, dbtest.NewDatabase(t), func(c *config.Config) { c.SnapshotEveryEvents = 2 })
		r := startChoird(t, home)
		defer r.stop(t)
		sc := Scope{Admin: true, Actor: "test"}
		if _, err := r.d.AgentStart(context.Background(), sc, "assistant", StartOverrides{}); err != nil {
			t.Fatal(err)
		}
		r.waitState(t, "assistant", admin.AgentActive)
		// No model answers here: each message commits a user_msg event and
		// gets an error reply; that is enough events to snapshot.
		for i := range 3 {
			pushText(t, r, "assistant", "message "+strconv.Itoa(i))
		}
		var snaps int
		waitUntil(t, "a snapshot", func() bool {
			r.d.pool.QueryRow(context.Background(), "SELECT count(*) FROM choir_control.session_snapshots").Scan(&snaps)
			return snaps > 0
		})
		var acked int64
		waitUntil(t, "three events acknowledged", func() bool {
			r.d.pool.QueryRow(context.Background(), "SELECT max(acked_rev) FROM choir_control.sessions").Scan(&acked)
			return acked >= 3
		})
		syscall.Kill(agentPid(t, r, "assistant"), syscall.SIGKILL)
		r.waitState(t, "assistant", admin.AgentCrashed)
		if _, err := r.d.AgentStart(context.Background(), sc, "assistant", StartOverrides{}); err != nil {
			t.Fatal(err)
		}
		r.waitState(t, "assistant", admin.AgentActive)
		pushText(t, r, "assistant", "after the crash")
		waitUntil(t, "the next event continuing the chain", func() bool {
			var n int64
			r.d.pool.QueryRow(context.Background(), "SELECT max(rev) FROM choir_control.session_events").Scan(&n)
			return n > acked
		})
		var breaks int
		r.d.pool.QueryRow(context.Background(), "SELECT count(*) FROM choir_audit.chain_breaks").Scan(&breaks)
		if breaks != 0 {
			t.Errorf("%d chain breaks across the crash", breaks)
		}
		waitUntil(t, "the agent log to report the restore", func() bool {
			b, _ := os.ReadFile(filepath.Join(home, "logs", "assistant.log"))
			return bytes.Contains(b, []byte(`"status":"resumed"`)) && bytes.Contains(b, []byte("working state restored"))
		})
	})

	t.Run("FrozenAgentIsFencedAfterTheThreshold", func(t *testing.T) {
		t.Parallel()
		home := lifecycleHome(t, dbtest.NewDatabase(t))
		r := startChoird(t, home)
		defer r.stop(t)
		if _, err := r.d.AgentStart(context.Background(), Scope{Admin: true, Actor: "test"}, "assistant", StartOverrides{}); err != nil {
			t.Fatal(err)
		}
		st := r.waitState(t, "assistant", admin.AgentActive)
		pid := agentPid(t, r, "assistant")
		syscall.Kill(pid, syscall.SIGSTOP)
		r.waitState(t, "assistant", admin.AgentCrashed) // heartbeat threshold 3 s, detection every second
		var leases int
		r.d.pool.QueryRow(context.Background(), "SELECT count(*) FROM choir_audit.leases").Scan(&leases)
		if leases != 0 {
			t.Errorf("%d leases held by a crashed session", leases)
		}
		syscall.Kill(pid, syscall.SIGCONT)
		// Its next heartbeat is refused; the agent stops itself.
		waitUntil(t, "the fenced agent to exit", func() bool { return syscall.Kill(pid, 0) != nil || zombie(pid) })
		var status string
		r.d.pool.QueryRow(context.Background(), "SELECT status FROM choir_control.sessions WHERE session_id = $1",
			st.SessionID).Scan(&status)
		if status != "crashed" {
			t.Errorf("session is %s after the fenced agent came back", status)
		}
	})
}

func zombie(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	return err == nil && bytes.Contains(b, []byte(") Z "))
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

func rpcUserMessage(text string) rpc.Push {
	return rpc.Push{Kind: rpc.PushUserMessage, UserMessage: &rpc.UserMessage{InboxID: time.Now().UnixNano(),
		Gateway: "console", ChatID: "operator", UserID: "operator", Text: text, ReceivedAt: time.Now()}}
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
