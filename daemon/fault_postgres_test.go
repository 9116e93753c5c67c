package daemon_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	choirsql "github.com/choirhq/choir/sql"
)

// privateCluster is a Postgres cluster of the test's own, started by
// scripts/devpg.sh on a private data directory and port, so that the test
// can restart it without disturbing the shared test cluster.
type privateCluster struct {
	root string
	port int
	env  []string
}

func (c *privateCluster) url() string {
	return "postgres://postgres@127.0.0.1:" + strconv.Itoa(c.port) + "/choir?sslmode=disable"
}

func (c *privateCluster) devpg(t *testing.T, arg string) {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join("..", "scripts", "devpg.sh"), arg)
	cmd.Env = append(os.Environ(), c.env...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("devpg.sh %s: %v\n%s", arg, err, out)
	}
}

// pgctl runs pg_ctl on the cluster as the postgres user.
func (c *privateCluster) pgctl(t *testing.T, args ...string) {
	t.Helper()
	args = append([]string{"-u", "postgres", "--", "/usr/lib/postgresql/15/bin/pg_ctl", "-D", filepath.Join(c.root, "data"),
		"-l", filepath.Join(c.root, "log", "postgres.log")}, args...)
	if out, err := exec.Command("runuser", args...).CombinedOutput(); err != nil {
		log, _ := os.ReadFile(filepath.Join(c.root, "log", "postgres.log"))
		t.Fatalf("pg_ctl %v: %v\n%s\n%s", args, err, out, log)
	}
}

// startPrivateCluster starts a fresh cluster under /dev/shm (the postgres
// user must reach it, which a t.TempDir under /tmp does not allow) on a free
// port, migrates its choir database, and removes it when the test ends.
func startPrivateCluster(t *testing.T) *privateCluster {
	t.Helper()
	var b [6]byte
	rand.Read(b[:])
	root := filepath.Join("/dev/shm", "choir-pg-fault-"+hex.EncodeToString(b[:]))
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	c := &privateCluster{root: root, port: port,
		env: []string{"CHOIR_PG_ROOT=" + root, "CHOIR_PG_PORT=" + strconv.Itoa(port)}}
	t.Cleanup(func() {
		cmd := exec.Command("bash", filepath.Join("..", "scripts", "devpg.sh"), "stop")
		cmd.Env = append(os.Environ(), c.env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("stop the private cluster: %v\n%s", err, out)
		}
		os.RemoveAll(root)
	})
	c.devpg(t, "start")

	ctx := context.Background()
	pool, err := choirsql.Connect(ctx, c.url(), choirsql.ConnectOptions{Origin: "the test's private cluster", MaxConns: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	m, err := choirsql.NewMigrator(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("migrate the private cluster: %v", err)
	}
	return c
}

func TestFaultPostgresRestartedUnderLoad(t *testing.T) {
	t.Parallel()
	c := startPrivateCluster(t)
	pool := dbtest.Connect(t, c.url())
	const agent = "replica"
	id, token := choirdtest.TokenSession(t, pool, agent)

	d := choirdtest.StartTwoAgents(t, choirdtest.Options{DatabaseURL: c.url(), Edit: func(cfg *config.Config, s config.Secrets) {
		choirdtest.FastHeartbeat(cfg, s)
		cfg.CrashDetectionThresholdMS = 120_000
	}})
	a := startReplicatingAgent(t, d.Home, id.String(), token)
	a.waitAcked(t, 1000, "before the restart")

	// Restart while heartbeats flow; -m fast ends every session, the
	// heartbeat transactions in flight included, and checkpoints.
	<-a.sending
	<-a.sending
	ackedBefore := a.ackedRev()
	c.pgctl(t, "-m", "fast", "-w", "-t", "60", "restart")
	a.waitAcked(t, ackedBefore+1500, "after the restart")
	failed, lastErr := a.failedBeats()
	t.Logf("%d heartbeats failed around the restart (last: %v)", failed, lastErr)
	head, hash := a.stop(t)
	// A fresh pool: the test's own connections died with the restart.
	checkReplica(t, freshPool(t, c.url()), agent, a.ackedRev(), head, hash)
}

func freshPool(t *testing.T, url string) *pgxpool.Pool {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		pool := dbtest.Connect(t, url)
		err := pool.Ping(context.Background())
		if err == nil {
			return pool
		}
		if time.Now().After(deadline) {
			t.Fatalf("reconnect after the restart: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
