package daemon_test

import (
	"syscall"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
)

func TestFaultChoirdKilledMidHeartbeat(t *testing.T) {
	t.Parallel()
	url := dbtest.NewDatabase(t)
	pool := dbtest.Connect(t, url)
	const agent = "replica"
	id, token := choirdtest.TokenSession(t, pool, agent)

	// choird runs no agent runtime: the test's agent runs in the test
	// process and keeps running across choird's death, as a container
	// does. The threshold is far beyond the restart: the session must
	// outlive choird's death, as it does when choird restarts under a
	// running container before crash detection fires.
	p := choirdtest.StartProcess(t, choirdtest.WithTwoAgents(choirdtest.Options{DatabaseURL: url,
		Edit: func(c *config.Config, s config.Secrets) {
			choirdtest.FastHeartbeat(c, s)
			c.CrashDetectionThresholdMS = 120_000
		}}))
	a := startReplicatingAgent(t, p.Dir, id.String(), token)
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
		if err := p.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
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
		p = p.Restart(t)
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
