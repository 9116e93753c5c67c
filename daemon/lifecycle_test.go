package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// agentPid is the process of agent's running instance.
func agentPid(t *testing.T, c *choirdtest.Choird, agent string) int {
	t.Helper()
	s, err := c.Runtime().List(context.Background())
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
	d := choirdtest.StartWithAgents(t, func(c *config.Config) {
		c.DMs["mine"] = config.DM{Gateway: "console", UserID: "mine"}
		a := c.Agents["assistant"]
		a.Defaults.DM = "mine"
		c.Agents["assistant"] = a
	})
	home := d.Home
	ctx := context.Background()
	for _, how := range []string{"choirctl", "its DM"} {
		if code, _, errs := choirctltest.Run(t, home, "agent", "start", "assistant"); code != 0 {
			t.Fatalf("start: %s", errs)
		}
		before := d.WaitState(t, "assistant", admin.AgentActive)
		if err := syscall.Kill(agentPid(t, d, "assistant"), syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		d.WaitState(t, "assistant", admin.AgentCrashed)
		switch how {
		case "choirctl":
			if code, _, errs := choirctltest.Run(t, home, "agent", "restart", "assistant"); code != 0 {
				t.Fatalf("restart of a crashed agent: %s", errs)
			}
		default:
			sc, err := d.DMScope(ctx, control.DM{Name: "mine"})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.AgentRestart(ctx, sc, "assistant"); err != nil {
				t.Fatalf("restart of a crashed agent from its DM: %v", err)
			}
		}
		after := d.WaitState(t, "assistant", admin.AgentActive)
		var from, dm string
		d.Pool().QueryRow(ctx, "SELECT coalesce(resumed_from::text, ''), resource_bindings->>'dm' FROM choir_control.sessions WHERE session_id = $1",
			after.SessionID).Scan(&from, &dm)
		if from != before.SessionID || dm != "mine" {
			t.Errorf("restarted from %s: session %s resumes %q on DM %q, want the crashed %s on mine", how, after.SessionID, from, dm, before.SessionID)
		}
		if code, _, errs := choirctltest.Run(t, home, "agent", "stop", "assistant"); code != 0 {
			t.Fatalf("stop: %s", errs)
		}
	}
}

func TestLifecycleProcessRuntime(t *testing.T) {
	t.Parallel()
	d := choirdtest.StartWithAgents(t, nil)
	home := d.Home

	t.Run("StartWithoutDMUsesTheDefault", func(t *testing.T) {
		code, _, errs := choirctltest.Run(t, home, "agent", "start", "assistant")
		if code != 0 {
			t.Fatalf("start without --dm: exit %d: %s", code, errs)
		}
		st := d.WaitState(t, "assistant", admin.AgentActive)
		var dm string
		d.Pool().QueryRow(context.Background(), "SELECT resource_bindings->>'dm' FROM choir_control.sessions WHERE session_id = $1",
			st.SessionID).Scan(&dm)
		if want := d.Snapshot().Config.Agents["assistant"].Defaults.DM; dm != want {
			t.Errorf("the session is bound to DM %q, want the agent's defaults.dm %q", dm, want)
		}
		if code, _, errs := choirctltest.Run(t, home, "agent", "stop", "assistant"); code != 0 {
			t.Fatalf("stop: %s", errs)
		}
	})

	t.Run("UnknownAgentOrResourceIsNamed", func(t *testing.T) {
		code, _, errs := choirctltest.Run(t, home, "agent", "start", "ghost", "--dm", "console")
		if code == 0 || !strings.Contains(errs, `agent "ghost" is not in config.json`) {
			t.Fatalf("exit %d: %s", code, errs)
		}
		code, _, errs = choirctltest.Run(t, home, "agent", "start", "assistant", "--dm", "console", "--workspace", "nope")
		if code == 0 || !strings.Contains(errs, "--workspace=nope") {
			t.Fatalf("exit %d: %s", code, errs)
		}
	})

	t.Run("StartStatusStopRestart", func(t *testing.T) {
		code, out, errs := choirctltest.Run(t, home, "agent", "start", "assistant", "--dm", "console")
		if code != 0 {
			t.Fatalf("start: %s", errs)
		}
		if !strings.Contains(out, "assistant") {
			t.Errorf("start output: %s", out)
		}
		st := d.WaitState(t, "assistant", admin.AgentActive)
		if st.Runtime != "process" {
			t.Errorf("runtime = %q", st.Runtime)
		}
		pid := agentPid(t, d, "assistant")

		t.Run("CanarySecretIsNowhereButInMemory", func(t *testing.T) {
			environ, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/environ")
			if err != nil {
				t.Fatal(err)
			}
			if bytes.Contains(environ, []byte(choirdtest.Canary)) {
				t.Error("the canary secret is in the agent's environment")
			}
			filepath.Walk(home, func(path string, info os.FileInfo, err error) error {
				if err != nil || info.IsDir() || filepath.Base(path) == "secrets.json" || info.Mode()&os.ModeSocket != 0 {
					return nil
				}
				if b, err := os.ReadFile(path); err == nil && bytes.Contains(b, []byte(choirdtest.Canary)) {
					t.Errorf("the canary secret leaked into %s", path)
				}
				return nil
			})
			var n int
			d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM choir_control.session_events
				WHERE payload::text LIKE '%' || $1 || '%'`, choirdtest.Canary).Scan(&n)
			if n != 0 {
				t.Errorf("the canary secret is in %d session events", n)
			}
		})

		t.Run("GitIdentityIsInTheAgentsGitConfig", func(t *testing.T) {
			var found string
			choirdtest.WaitFor(t, "the agent's .gitconfig", d.Logs, func() bool {
				filepath.Walk(filepath.Join(home, "run"), func(path string, info os.FileInfo, err error) error {
					if err == nil && info.Name() == ".gitconfig" {
						b, _ := os.ReadFile(path)
						found = string(b)
					}
					return nil
				})
				return strings.Contains(found, "dev@choir.local") && strings.Contains(found, "insteadOf")
			})
			// git reaches git.example.com through choird's git route, which
			// adds the token; git itself has no credential to give.
			if !strings.Contains(found, "name = Dev") || strings.Contains(found, "ghp-test") ||
				!regexp.MustCompile(`\[url "http://127\.0\.0\.1:\d+/svc/git/dev/git\.example\.com/"\]\s+insteadOf = https://git\.example\.com/`).MatchString(found) ||
				strings.Contains(found, "helper") {
				t.Errorf(".gitconfig = %q", found)
			}
			var agentHome string
			filepath.Walk(filepath.Join(home, "run"), func(path string, info os.FileInfo, err error) error {
				if err == nil && info.Name() == ".gitconfig" {
					agentHome = filepath.Dir(path)
				}
				return nil
			})
			cmd := exec.Command("git", "credential", "fill")
			cmd.Env = []string{"HOME=" + agentHome, "PATH=" + os.Getenv("PATH"), "GIT_TERMINAL_PROMPT=0", "GIT_ASKPASS=/bin/false"}
			cmd.Stdin = strings.NewReader("protocol=https\nhost=git.example.com\n\n")
			if out, _ := cmd.CombinedOutput(); strings.Contains(string(out), "password=") {
				t.Errorf("git credential fill gave a password: %q", out)
			}

			// The agent never holds the git token, nor the model's key:
			// choird hands it neither, before or after a rotation (the
			// gateway's routes read the rotated values at their next
			// request).
			handed := func() []string {
				return regexp.MustCompile(`"msg":"secrets handed to agent".*`).FindAllString(d.Logs.String(), -1)
			}
			secrets := config.Secrets{"postgres-admin": "postgres:", "model-key": choirdtest.Canary, "git-token": "ghp-rotated"}
			if err := os.WriteFile(filepath.Join(home, "secrets.json"), mustJSON(t, map[string]string(secrets)), 0o600); err != nil {
				t.Fatal(err)
			}
			if code, out, errs := choirctltest.Run(t, home, "secret", "apply"); code != 0 || !strings.Contains(out, "1 running agents") {
				t.Fatalf("secret apply: %d %s %s", code, out, errs)
			}
			for _, line := range handed() {
				if strings.Contains(line, "git-token") || strings.Contains(line, "model-key") {
					t.Errorf("choird handed the agent a secret its gateway adds: %s", line)
				}
			}
		})

		t.Run("SecondAgentOnTheSameWorkspaceIsRefusedNamingTheHolder", func(t *testing.T) {
			code, _, errs := choirctltest.Run(t, home, "agent", "start", "helper", "--dm", "second")
			if code == 0 || !strings.Contains(errs, "leased to agent assistant") {
				t.Fatalf("exit %d: %s", code, errs)
			}
			var sessions int
			d.Pool().QueryRow(context.Background(), "SELECT count(*) FROM choir_control.sessions WHERE agent_id = 'helper'").Scan(&sessions)
			if sessions != 0 {
				t.Errorf("a refused start left %d sessions", sessions)
			}
		})

		code, out, _ = choirctltest.Run(t, home, "agent", "status", "assistant")
		if code != 0 || !strings.Contains(out, "active") {
			t.Fatalf("status: %s", out)
		}

		code, _, errs = choirctltest.Run(t, home, "agent", "restart", "assistant")
		if code != 0 {
			t.Fatalf("restart: %s", errs)
		}
		d.WaitState(t, "assistant", admin.AgentActive)
		if newPid := agentPid(t, d, "assistant"); newPid == pid {
			t.Error("restart kept the same process")
		}

		code, _, errs = choirctltest.Run(t, home, "agent", "stop", "assistant")
		if code != 0 {
			t.Fatalf("stop: %s", errs)
		}
		var status, reason string
		d.Pool().QueryRow(context.Background(), `SELECT status, end_reason FROM choir_control.sessions
			WHERE agent_id = 'assistant' ORDER BY started_at DESC LIMIT 1`).Scan(&status, &reason)
		if status != "ended" || !strings.Contains(reason, "terminated by the agent") {
			t.Errorf("after stop: %s (%s), want ended by the agent itself", status, reason)
		}
		var leases int
		d.Pool().QueryRow(context.Background(), "SELECT count(*) FROM choir_audit.leases").Scan(&leases)
		if leases != 0 {
			t.Errorf("%d leases after stop", leases)
		}
	})

	t.Run("KilledAgentIsCrashedAtOnce", func(t *testing.T) {
		if code, _, errs := choirctltest.Run(t, home, "agent", "start", "assistant", "--dm", "console"); code != 0 {
			t.Fatalf("start: %s", errs)
		}
		d.WaitState(t, "assistant", admin.AgentActive)
		syscall.Kill(agentPid(t, d, "assistant"), syscall.SIGKILL)
		// Well before the 3 s heartbeat threshold: the runtime reported it.
		start := time.Now()
		d.WaitState(t, "assistant", admin.AgentCrashed)
		t.Logf("crash noticed %s after the kill", time.Since(start))
		var breaks int
		d.Pool().QueryRow(context.Background(), "SELECT count(*) FROM choir_audit.chain_breaks").Scan(&breaks)
		if breaks != 0 {
			t.Errorf("%d chain breaks after kill -9", breaks)
		}
	})

	t.Run("WorkspaceListAndReset", func(t *testing.T) {
		ws := d.Snapshot().Config.Workspaces["main"].Path
		os.WriteFile(filepath.Join(ws, "junk.txt"), []byte("x"), 0o644)
		// The workspace is leased: reset stops its agent first.
		if code, _, errs := choirctltest.Run(t, home, "agent", "start", "assistant", "--dm", "console"); code != 0 {
			t.Fatalf("start: %s", errs)
		}
		d.WaitState(t, "assistant", admin.AgentActive)
		if code, out, _ := choirctltest.Run(t, home, "workspace", "list"); code != 0 || !strings.Contains(out, "assistant") {
			t.Fatalf("list does not show the holder: %s", out)
		}
		code, out, _ := choirctltest.Run(t, home, "workspace", "list")
		if code != 0 || !strings.Contains(out, "main") {
			t.Fatalf("list: %s", out)
		}
		if code, _, errs := choirctltest.Run(t, home, "workspace", "reset", "main"); code != 0 {
			t.Fatalf("reset: %s", errs)
		}
		if entries, _ := os.ReadDir(ws); len(entries) != 0 {
			t.Errorf("workspace not empty: %v", entries)
		}
		if st := d.LatestStatus(context.Background(), "assistant"); st.State != admin.AgentStopped {
			t.Errorf("the agent leasing the workspace is %s after reset, want stopped", st.State)
		}
	})
}

func TestOrphansAreRemovedWhenChoirdRestarts(t *testing.T) {
	t.Parallel()
	d := choirdtest.StartWithAgents(t, nil)
	if _, err := d.AgentStart(context.Background(), control.Scope{Admin: true, Actor: "test"}, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	old := d.WaitState(t, "assistant", admin.AgentActive)
	pid := agentPid(t, d, "assistant")
	d = d.Restart(t) // the agent keeps running: choird's instances outlive it
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
	d.Pool().QueryRow(context.Background(), "SELECT status FROM choir_control.sessions WHERE session_id = $1",
		old.SessionID).Scan(&status)
	if status != "crashed" {
		t.Errorf("orphan's session is %s, want crashed", status)
	}
	// The agent came back by itself, in a new instance and session.
	if st := d.WaitState(t, "assistant", admin.AgentActive); st.SessionID == old.SessionID {
		t.Error("the orphan's session is live again")
	}
	if newPid := agentPid(t, d, "assistant"); newPid == pid {
		t.Error("the orphaned instance was kept")
	}
}

func TestFaultsProcessRuntime(t *testing.T) {
	t.Parallel()

	t.Run("KilledAgentResumesFromSnapshotAndTail", func(t *testing.T) {
		t.Parallel()
		d := choirdtest.StartWithAgents(t, func(c *config.Config) {
			c.SnapshotEveryEvents = 2
			// The crash here is the kill below. The 3 s default is outlasted
			// by a machine running the whole suite on two cores: a stalled
			// agent would be crashed before its first snapshot.
			c.CrashDetectionThresholdMS = 10_000
		})
		home := d.Home
		sc := control.Scope{Admin: true, Actor: "test"}
		if _, err := d.AgentStart(context.Background(), sc, "assistant", admin.StartOverrides{}); err != nil {
			t.Fatal(err)
		}
		d.WaitState(t, "assistant", admin.AgentActive)
		// No model answers here: each message commits a user_msg event and
		// gets an error reply; that is enough events to snapshot.
		for i := range 3 {
			d.PushText(t, "assistant", "message "+strconv.Itoa(i))
		}
		var snaps int
		choirdtest.WaitFor(t, "a snapshot", d.Logs, func() bool {
			d.Pool().QueryRow(context.Background(), "SELECT count(*) FROM choir_control.session_snapshots").Scan(&snaps)
			return snaps > 0
		})
		var acked int64
		choirdtest.WaitFor(t, "three events acknowledged", d.Logs, func() bool {
			d.Pool().QueryRow(context.Background(), "SELECT max(acked_rev) FROM choir_control.sessions").Scan(&acked)
			return acked >= 3
		})
		syscall.Kill(agentPid(t, d, "assistant"), syscall.SIGKILL)
		d.WaitState(t, "assistant", admin.AgentCrashed)
		if _, err := d.AgentStart(context.Background(), sc, "assistant", admin.StartOverrides{}); err != nil {
			t.Fatal(err)
		}
		d.WaitState(t, "assistant", admin.AgentActive)
		d.PushText(t, "assistant", "after the crash")
		choirdtest.WaitFor(t, "the next event continuing the chain", d.Logs, func() bool {
			var n int64
			d.Pool().QueryRow(context.Background(), "SELECT max(rev) FROM choir_control.session_events").Scan(&n)
			return n > acked
		})
		var breaks int
		d.Pool().QueryRow(context.Background(), "SELECT count(*) FROM choir_audit.chain_breaks").Scan(&breaks)
		if breaks != 0 {
			t.Errorf("%d chain breaks across the crash", breaks)
		}
		choirdtest.WaitFor(t, "the agent log to report the restore", d.Logs, func() bool {
			b, _ := os.ReadFile(filepath.Join(home, "logs", "assistant.log"))
			return bytes.Contains(b, []byte(`"status":"resumed"`)) && bytes.Contains(b, []byte("working state restored"))
		})
	})

	t.Run("FrozenAgentIsFencedAfterTheThreshold", func(t *testing.T) {
		t.Parallel()
		d := choirdtest.StartWithAgents(t, nil)
		if _, err := d.AgentStart(context.Background(), control.Scope{Admin: true, Actor: "test"}, "assistant", admin.StartOverrides{}); err != nil {
			t.Fatal(err)
		}
		st := d.WaitState(t, "assistant", admin.AgentActive)
		pid := agentPid(t, d, "assistant")
		syscall.Kill(pid, syscall.SIGSTOP)
		d.WaitState(t, "assistant", admin.AgentCrashed) // heartbeat threshold 3 s, detection every second
		var leases int
		d.Pool().QueryRow(context.Background(), "SELECT count(*) FROM choir_audit.leases").Scan(&leases)
		if leases != 0 {
			t.Errorf("%d leases held by a crashed session", leases)
		}
		syscall.Kill(pid, syscall.SIGCONT)
		// Its next heartbeat is refused; the agent stops itself.
		choirdtest.WaitFor(t, "the fenced agent to exit", d.Logs, func() bool { return syscall.Kill(pid, 0) != nil || zombie(pid) })
		var status string
		d.Pool().QueryRow(context.Background(), "SELECT status FROM choir_control.sessions WHERE session_id = $1",
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

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
