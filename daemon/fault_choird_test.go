package daemon

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/dbtest"
)

// choirdProcess is choird running as a real process, so that a test can
// kill it with SIGKILL mid-request.
type choirdProcess struct {
	cmd  *exec.Cmd
	done chan error
	log  string
}

// startChoirdProcess runs choird on home without an agent runtime (the
// test's agent runs in the test process and keeps running across choird's
// death, as a container does) and waits until its agent socket answers.
func startChoirdProcess(t *testing.T, home string, n int) *choirdProcess {
	t.Helper()
	logPath := filepath.Join(home, "choird-"+strconv.Itoa(n)+".out")
	out, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(buildChoird(t), "--home", home, "--runtime=")
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &choirdProcess{cmd: cmd, done: make(chan error, 1), log: logPath}
	go func() { p.done <- cmd.Wait() }()
	t.Cleanup(func() { p.kill(syscall.SIGTERM) })
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.Dial("unix", AgentSocketPath(home))
		if err == nil {
			c.Close()
			return p
		}
		select {
		case err := <-p.done:
			p.done <- err
			b, _ := os.ReadFile(logPath)
			t.Fatalf("choird exited before it was ready: %v\n%s", err, b)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(logPath)
			t.Fatalf("choird's agent socket did not answer within a minute\n%s", b)
		}
	}
}

// kill sends sig and waits for the process to exit.
func (p *choirdProcess) kill(sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return
	}
	select {
	case err := <-p.done:
		p.done <- err
	case <-time.After(15 * time.Second):
		p.cmd.Process.Kill()
	}
}

func TestFaultChoirdKilledMidHeartbeat(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	// The threshold is far beyond the restart: the session must outlive
	// choird's death, as it does when choird restarts under a running
	// container before crash detection fires.
	home := lifecycleHomeWith(t, url, func(c *config.Config) { c.CrashDetectionThresholdMS = 120_000 })
	pool := dbtest.Connect(t, url)
	const agent = "replica"
	id, token := tokenSession(t, pool, agent)

	p := startChoirdProcess(t, home, 1)
	a := startReplicatingAgent(t, home, id.String(), token)
	a.waitAcked(t, 1000, "before the first kill")

	// Strike while a heartbeat is on its way, a little later each time.
	// The kill lands before the heartbeat's commit, or after it; between
	// the commit and the answer there are only microseconds, so a commit
	// whose answer is lost is rare here (TestReplicate's resend cases
	// cover it). Either way nothing acknowledged may be missing, and the
	// agent's resent tail must continue the chain exactly.
	for i, delay := range []time.Duration{0, time.Millisecond, 3 * time.Millisecond} {
		<-a.sending
		<-a.sending
		time.Sleep(delay)
		p.kill(syscall.SIGKILL)
		ackedBefore := a.ackedRev()
		var stored int64
		pool.QueryRow(t.Context(), "SELECT acked_rev FROM choir_control.sessions WHERE session_id = $1", id).Scan(&stored)
		t.Logf("kill %d (%s after a heartbeat left): the agent saw %d acknowledged, the replica holds %d",
			i+1, delay, ackedBefore, stored)
		if stored < ackedBefore {
			t.Fatalf("the replica holds %d, less than the %d the agent saw acknowledged", stored, ackedBefore)
		}
		// The agent keeps committing while choird is gone, and its
		// heartbeats fail: the tail it cannot get acknowledged stays in
		// its log.
		time.Sleep(300 * time.Millisecond)
		if head, _ := a.log.Head(); head <= ackedBefore {
			t.Fatalf("the agent committed nothing while choird was down (head %d, acked %d)", head, ackedBefore)
		}
		p = startChoirdProcess(t, home, i+2)
		a.waitAcked(t, ackedBefore+1000, "after the restart")
	}
	failed, lastErr := a.failedBeats()
	if failed == 0 {
		t.Errorf("no heartbeat failed while choird was dead: the kill missed")
	}
	t.Logf("%d heartbeats failed while choird was down (last: %v)", failed, lastErr)
	head, hash := a.stop(t)
	checkReplica(t, pool, agent, a.ackedRev(), head, hash)

	var status string
	pool.QueryRow(t.Context(), "SELECT status FROM choir_control.sessions WHERE session_id = $1", id).Scan(&status)
	if status != "active" {
		t.Errorf("session is %s after choird's restart, want active", status)
	}
}
