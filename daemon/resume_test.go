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

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/rpc/admin"
)

// outboxText is the text queued under an agent's message id, "" if none.
func outboxText(t *testing.T, pool *pgxpool.Pool, agent, messageID string) (dm, text string) {
	t.Helper()
	pool.QueryRow(context.Background(), `SELECT dm, text FROM choir_control.outbox WHERE agent_id = $1 AND message_id = $2`,
		agent, messageID).Scan(&dm, &text)
	return dm, text
}

// waitCrashDetection waits until crash detection has run to completion
// once after since: whatever it would crash, it has crashed by then.
func waitCrashDetection(t *testing.T, pool *pgxpool.Pool, since time.Time) {
	t.Helper()
	choirdtest.WaitFor(t, "a crash detection run", nil, func() bool {
		var n int
		pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind = 'crash_detect' AND state = 'completed' AND finalized_at > $1`, since).Scan(&n)
		return n > 0
	})
}

// waitSilentBeyondThreshold waits until session id has sent no heartbeat
// for longer than the crash threshold, so that crash detection would take
// it the moment it runs.
func waitSilentBeyondThreshold(t *testing.T, pool *pgxpool.Pool, id string, threshold time.Duration) {
	t.Helper()
	choirdtest.WaitFor(t, "the session silent beyond the crash threshold", nil, func() bool {
		var silent bool
		pool.QueryRow(context.Background(), `SELECT last_heartbeat_at < now() - $2 * interval '1 millisecond'
			FROM choir_control.sessions WHERE session_id = $1`, id, threshold.Milliseconds()+500).Scan(&silent)
		return silent
	})
}

func TestChoirdRestartResumesActiveSessions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartWithAgents(t, func(c *config.Config) {
		c.SnapshotEveryEvents = 2
		c.Models["fast"] = c.Models["local"]
	})
	pool := d.OwnPool(t)
	sc := control.Scope{Admin: true, Actor: "test"}
	// Bindings other than the defaults, and a transient model: the
	// successor keeps them all.
	if _, err := d.AgentStart(ctx, sc, "assistant", admin.StartOverrides{Workspace: "other", DM: "second"}); err != nil {
		t.Fatal(err)
	}
	first := d.WaitState(t, "assistant", admin.AgentActive)
	if _, err := d.ModelSet(ctx, sc, "assistant", "fast"); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		d.PushText(t, "assistant", "message "+strconv.Itoa(i))
	}
	var acked int64
	choirdtest.WaitFor(t, "three events acknowledged", nil, func() bool {
		pool.QueryRow(ctx, "SELECT acked_rev FROM choir_control.sessions WHERE session_id = $1", first.SessionID).Scan(&acked)
		return acked >= 3
	})
	pid := agentPid(t, d, "assistant")
	threshold := d.Snapshot().Config.CrashDetectionThreshold()
	if err := d.Stop(); err != nil { // the agent keeps running, its connection gone
		t.Fatal(err)
	}

	// choird stays down beyond the crash threshold, so that crash
	// detection, once it runs, would take the old session if resuming
	// had not claimed it first.
	waitSilentBeyondThreshold(t, pool, first.SessionID, threshold)
	// Heartbeats went on until the kill (one in flight may have committed
	// after it): the revision the successor must resume at is the one
	// acknowledged last.
	if err := pool.QueryRow(ctx, "SELECT acked_rev FROM choir_control.sessions WHERE session_id = $1", first.SessionID).Scan(&acked); err != nil {
		t.Fatal(err)
	}
	restarted := time.Now()
	d = d.Restart(t)

	second := d.WaitState(t, "assistant", admin.AgentActive)
	if second.SessionID == first.SessionID {
		t.Fatal("the old session is still the live one")
	}
	choirdtest.WaitFor(t, "the old instance to be gone", nil, func() bool { return syscall.Kill(pid, 0) != nil || zombie(pid) })
	if newPid := agentPid(t, d, "assistant"); newPid == pid {
		t.Error("the old instance was kept")
	}

	var status, reason string
	pool.QueryRow(ctx, "SELECT status, end_reason FROM choir_control.sessions WHERE session_id = $1",
		first.SessionID).Scan(&status, &reason)
	if status != "crashed" || reason != control.ResumeEndReason {
		t.Errorf("the old session is %s (%q), want crashed (%q)", status, reason, control.ResumeEndReason)
	}
	var resumedFrom *uuid.UUID
	var baseRev int64
	var workspace, dm string
	pool.QueryRow(ctx, `SELECT resumed_from, base_rev, resource_bindings->>'workspace', resource_bindings->>'dm'
		FROM choir_control.sessions WHERE session_id = $1`, second.SessionID).Scan(&resumedFrom, &baseRev, &workspace, &dm)
	if resumedFrom == nil || resumedFrom.String() != first.SessionID || baseRev != acked {
		t.Errorf("the successor resumes from %v at %d, want %s at %d", resumedFrom, baseRev, first.SessionID, acked)
	}
	if workspace != "other" || dm != "second" {
		t.Errorf("the successor is bound to workspace %q and DM %q, want other and second", workspace, dm)
	}
	var leases []string
	rows, _ := pool.Query(ctx, `SELECT resource_kind || ':' || resource_name FROM choir_control.resource_leases
		WHERE session_id = $1 AND released_at IS NULL ORDER BY 1`, second.SessionID)
	for rows.Next() {
		var l string
		rows.Scan(&l)
		leases = append(leases, l)
	}
	if got := strings.Join(leases, " "); !strings.Contains(got, "workspace:other") || !strings.Contains(got, "dm:second") {
		t.Errorf("the successor holds %q, want the workspace and DM leases of its bindings", got)
	}
	if ms, err := d.ModelGet(ctx, control.Scope{Admin: true}, "assistant"); err != nil || ms.LLM != "fast" || !ms.LLMOverridden {
		t.Errorf("model after the resume: %+v, %v; want the transient override fast", ms, err)
	}

	t.Run("TheDMIsToldAndNoCrashNoticeIsSent", func(t *testing.T) {
		waitCrashDetection(t, pool, restarted)
		dm, text := outboxText(t, pool, "assistant", "resume:"+first.SessionID)
		if dm != "second" || !strings.Contains(text, "assistant is back") {
			t.Errorf("resume notice to %q: %q", dm, text)
		}
		if _, text := outboxText(t, pool, "assistant", "crash:"+first.SessionID); text != "" {
			t.Errorf("the resumed session was also crash-noticed: %q", text)
		}
	})

	t.Run("TheAgentRestoresItsStateAndContinuesTheChain", func(t *testing.T) {
		choirdtest.WaitFor(t, "the agent log to report the restore", nil, func() bool {
			b, _ := os.ReadFile(filepath.Join(d.Home, "logs", "assistant.log"))
			return bytes.Contains(b, []byte(`"status":"resumed"`))
		})
		d.PushText(t, "assistant", "after the restart")
		choirdtest.WaitFor(t, "the next event continuing the chain", nil, func() bool {
			var n int64
			pool.QueryRow(ctx, "SELECT acked_rev FROM choir_control.sessions WHERE session_id = $1", second.SessionID).Scan(&n)
			return n > acked
		})
		var breaks int
		pool.QueryRow(ctx, "SELECT count(*) FROM choir_audit.chain_breaks").Scan(&breaks)
		if breaks != 0 {
			t.Errorf("%d chain breaks across the resume", breaks)
		}
	})
}

func TestChoirdRestartResumesOnlyWhatItShould(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartWithAgents(t, func(c *config.Config) {
		c.Workspaces["third"] = config.Workspace{Path: t.TempDir()}
		c.DMs["third"] = config.DM{Gateway: "console", UserID: "third"}
		c.Agents["third"] = config.Agent{Defaults: config.AgentDefaults{Workspace: "third", LLM: "local", DM: "third"}}
	})
	home := d.Home
	pool := d.OwnPool(t)
	sc := control.Scope{Admin: true, Actor: "test"}
	start := func(agent string, o admin.StartOverrides) admin.AgentStatus {
		t.Helper()
		if _, err := d.AgentStart(ctx, sc, agent, o); err != nil {
			t.Fatal(err)
		}
		return d.WaitState(t, agent, admin.AgentActive)
	}
	assistant := start("assistant", admin.StartOverrides{})
	helper := start("helper", admin.StartOverrides{Workspace: "other", DM: "second"})
	third := start("third", admin.StartOverrides{})
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}

	// While choird is down: helper leaves config.json, assistant's
	// workspace disappears (its start fails), and third was being
	// stopped when choird died.
	cfg, secrets, err := config.Load(home)
	if err != nil {
		t.Fatal(err)
	}
	delete(cfg.Agents, "helper")
	if err := config.WriteFiles(home, cfg, secrets, true); err != nil {
		t.Fatal(err)
	}
	mainWS := cfg.Workspaces[cfg.Agents["assistant"].Defaults.Workspace].Path
	if err := os.RemoveAll(mainWS); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE choir_control.sessions SET status = 'stopping' WHERE session_id = $1",
		third.SessionID); err != nil {
		t.Fatal(err)
	}

	restarted := time.Now()
	d = d.Restart(t)
	waitCrashDetection(t, pool, restarted)
	sessions := func(agent string) int {
		var n int
		pool.QueryRow(ctx, "SELECT count(*) FROM choir_control.sessions WHERE agent_id = $1", agent).Scan(&n)
		return n
	}
	statusOf := func(id string) (status, reason string) {
		pool.QueryRow(ctx, "SELECT status, end_reason FROM choir_control.sessions WHERE session_id = $1", id).Scan(&status, &reason)
		return status, reason
	}

	t.Run("RemovedAgentIsNotRestartedAndItsDMIsToldWhy", func(t *testing.T) {
		if n := sessions("helper"); n != 1 {
			t.Errorf("helper has %d sessions, want only the old one", n)
		}
		if st, _ := statusOf(helper.SessionID); st != "crashed" {
			t.Errorf("helper's old session is %s, want crashed", st)
		}
		dm, text := outboxText(t, pool, "helper", "resume:"+helper.SessionID)
		if dm != "second" || !strings.Contains(text, "helper did not come back") || !strings.Contains(text, "no longer in config.json") {
			t.Errorf("notice to %q: %q", dm, text)
		}
		if _, text := outboxText(t, pool, "helper", "crash:"+helper.SessionID); text != "" {
			t.Errorf("also crash-noticed: %q", text)
		}
	})

	t.Run("FailedResumeIsReported", func(t *testing.T) {
		if st := d.LatestStatus(ctx, "assistant"); st.State != admin.AgentCrashed || st.SessionID != assistant.SessionID {
			t.Errorf("assistant is %s in session %s, want its old session crashed", st.State, st.SessionID)
		}
		dm, text := outboxText(t, pool, "assistant", "resume:"+assistant.SessionID)
		if dm != "console" || !strings.Contains(text, "assistant did not come back") || !strings.Contains(text, "does not exist") ||
			!strings.Contains(text, "choirctl agent start assistant") {
			t.Errorf("notice to %q: %q", dm, text)
		}
		if _, text := outboxText(t, pool, "assistant", "crash:"+assistant.SessionID); text != "" {
			t.Errorf("also crash-noticed: %q", text)
		}
	})

	t.Run("StoppingSessionEndsAndIsNotResumed", func(t *testing.T) {
		if st, reason := statusOf(third.SessionID); st != "ended" || reason != control.StoppingEndReason {
			t.Errorf("third's session is %s (%q), want ended (%q)", st, reason, control.StoppingEndReason)
		}
		if n := sessions("third"); n != 1 {
			t.Errorf("third has %d sessions, want only the stopped one", n)
		}
		for _, key := range []string{"resume:", "crash:"} {
			if _, text := outboxText(t, pool, "third", key+third.SessionID); text != "" {
				t.Errorf("a stopped agent's DM got %q", text)
			}
		}
	})

	t.Run("FailedResumeIsNotRetried", func(t *testing.T) {
		// The workspace is back, so a retry would succeed; there is none.
		if err := os.MkdirAll(mainWS, 0o755); err != nil {
			t.Fatal(err)
		}
		d = d.Restart(t)
		if n := sessions("assistant"); n != 1 {
			t.Errorf("assistant has %d sessions after a second restart, want the one that failed to resume", n)
		}
		var notices int
		pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.outbox WHERE message_id LIKE 'resume:%'`).Scan(&notices)
		if notices != 2 {
			t.Errorf("%d resume notices after a second restart, want the first two", notices)
		}
		// It starts by hand.
		if _, err := d.AgentStart(ctx, sc, "assistant", admin.StartOverrides{}); err != nil {
			t.Fatal(err)
		}
		d.WaitState(t, "assistant", admin.AgentActive)
	})
}

func TestChoirdThatCannotMakeItsRuntimeLeavesSessionsAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartWithAgents(t, nil)
	pool := d.OwnPool(t)
	if _, err := d.AgentStart(ctx, control.Scope{Admin: true, Actor: "test"}, "assistant", admin.StartOverrides{}); err != nil {
		t.Fatal(err)
	}
	first := d.WaitState(t, "assistant", admin.AgentActive)
	if err := d.Stop(); err != nil {
		t.Fatal(err)
	}

	// choird fails at its runtime: the session is neither closed nor
	// noticed, so the next choird that can start agents resumes it.
	err := daemon.Run(ctx, daemon.Options{Home: d.Home, Stderr: &logbuf.Buffer{}, Runtime: "process",
		AgentBinary: filepath.Join(t.TempDir(), "no-such-agent")})
	if err == nil || !strings.Contains(err.Error(), "process runtime") {
		t.Fatalf("Run with a missing agent binary = %v, want the runtime's error", err)
	}
	var status string
	pool.QueryRow(ctx, "SELECT status FROM choir_control.sessions WHERE session_id = $1", first.SessionID).Scan(&status)
	if status != "active" {
		t.Errorf("the session is %s after a choird that could not start, want active", status)
	}
	if _, text := outboxText(t, pool, "assistant", "resume:"+first.SessionID); text != "" {
		t.Errorf("the DM was told %q", text)
	}

	d = d.Restart(t)
	if st := d.WaitState(t, "assistant", admin.AgentActive); st.SessionID == first.SessionID {
		t.Error("the old session is still the live one")
	}
	if _, text := outboxText(t, pool, "assistant", "resume:"+first.SessionID); !strings.Contains(text, "assistant is back") {
		t.Errorf("resume notice: %q", text)
	}
}
