// Package choirdtest is the one test harness for "Postgres + choird + an
// agent": it runs a real choird in process on a fresh migrated database
// (dbtest) with a configuration made by config.Local, opens live sessions
// for agents the test runs itself, and offers the small waits and buffers
// such tests share. It holds no fakes: the model, Telegram and the runtime
// are whatever the test configures. It imports no agent code, so the
// agent's own tests may use it.
package choirdtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/dbtest"
)

// Options shape one choird.
type Options struct {
	// DatabaseURL is the database to run on; empty makes a fresh one.
	DatabaseURL string
	// Home is .choir.d; empty makes a temporary one. When it already holds
	// a config.json (a restart), Edit is not applied and nothing is written.
	Home string
	// ModelEndpoint, when set, is the endpoint of the "local" model.
	ModelEndpoint string
	// FastHeartbeat sets a 100 ms heartbeat and a 5 s crash threshold, so
	// that replication is seen within a test's patience.
	FastHeartbeat bool
	// Edit changes the configuration and secrets before they are written.
	Edit func(*config.Config, config.Secrets)
	// Daemon holds choird's other options (Runtime, AgentBinary,
	// TelegramAPIURL, ...); Home, Stderr and Ready are the harness's.
	Daemon daemon.Options
	// ReadyTimeout bounds the start (default one minute).
	ReadyTimeout time.Duration
}

// Choird is a choird running in process for one test.
type Choird struct {
	*daemon.Daemon
	// Home is its .choir.d, Config and Secrets what it was started with.
	Home    string
	Config  *config.Config
	Secrets config.Secrets
	// DatabaseURL is its database.
	DatabaseURL string
	// Logs receives its JSON log lines.
	Logs *SyncBuffer

	cancel context.CancelFunc
	done   chan error
	once   sync.Once
	err    error
}

// Start runs choird and returns once it is ready; the test's cleanup stops
// it (and fails the test if it ended with an error). A choird that cannot
// start fails the test with its log.
func Start(t testing.TB, o Options) *Choird {
	t.Helper()
	c := &Choird{Home: o.Home, DatabaseURL: o.DatabaseURL, Logs: &SyncBuffer{}, done: make(chan error, 1)}
	if c.DatabaseURL == "" {
		c.DatabaseURL = dbtest.NewDatabase(t)
	}
	if c.Home == "" {
		c.Home = t.TempDir()
	}
	if err := c.writeConfig(o); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	ready := make(chan *daemon.Daemon, 1)
	opts := o.Daemon
	opts.Home, opts.Stderr = c.Home, c.Logs
	opts.Ready = func(d *daemon.Daemon) { ready <- d }
	go func() { c.done <- daemon.Run(ctx, opts) }()
	timeout := o.ReadyTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	select {
	case c.Daemon = <-ready:
		t.Cleanup(func() {
			if err := c.Stop(); err != nil {
				t.Errorf("choird: %v", err)
			}
		})
		return c
	case err := <-c.done:
		cancel()
		t.Fatalf("choird: %v\n%s", err, c.Logs.String())
	case <-time.After(timeout):
		cancel()
		t.Fatalf("choird not ready within %s:\n%s", timeout, c.Logs.String())
	}
	return nil
}

func (c *Choird) writeConfig(o Options) error {
	if _, err := os.Stat(filepath.Join(c.Home, "config.json")); err == nil {
		cfg, secrets, err := config.Load(c.Home)
		c.Config, c.Secrets = cfg, secrets
		return err
	}
	pc, err := pgx.ParseConfig(c.DatabaseURL)
	if err != nil {
		return err
	}
	c.Config, c.Secrets = config.Local(c.Home, config.Postgres{Host: pc.Host, Port: int(pc.Port), Database: pc.Database})
	if o.ModelEndpoint != "" {
		m := c.Config.Models["local"]
		m.Endpoint = o.ModelEndpoint
		c.Config.Models["local"] = m
	}
	if o.FastHeartbeat {
		c.Config.HeartbeatIntervalMS = 100
		c.Config.CrashDetectionThresholdMS = 5000
	}
	if o.Edit != nil {
		o.Edit(c.Config, c.Secrets)
	}
	if err := config.WriteFiles(c.Home, c.Config, c.Secrets, false); err != nil {
		return err
	}
	for name, ws := range c.Config.Workspaces {
		if err := os.MkdirAll(ws.Path, 0o755); err != nil {
			return fmt.Errorf("workspace %s: %w", name, err)
		}
	}
	return nil
}

// Stop stops choird and waits for it; later calls return the same result.
func (c *Choird) Stop() error {
	c.once.Do(func() {
		c.cancel()
		c.err = <-c.done
	})
	return c.err
}

// Workspace is the directory of a configured workspace.
func (c *Choird) Workspace(name string) string { return c.Config.Workspaces[name].Path }

// Socket is the agent protocol's socket.
func (c *Choird) Socket() string { return daemon.AgentSocketPath(c.Home) }

// StartSession opens a live session of agentID for an agent the test runs
// itself (recorded under the process runtime), with default bindings, and
// returns its id and lease token.
func (c *Choird) StartSession(t testing.TB, agentID string) (sessionID, token string) {
	t.Helper()
	sessionID, token, err := c.Daemon.StartSession(context.Background(), agentID, daemon.StartOverrides{}, "process")
	if err != nil {
		t.Fatalf("start a session of %s: %v", agentID, err)
	}
	return sessionID, token
}

// WaitHello waits until the session's agent has said hello.
func (c *Choird) WaitHello(t testing.TB, sessionID string, logs fmt.Stringer) {
	t.Helper()
	WaitFor(t, "the agent's hello", logs, func() bool {
		var hello bool
		c.Pool().QueryRow(context.Background(),
			"SELECT hello_at IS NOT NULL FROM choir_control.sessions WHERE session_id = $1", sessionID).Scan(&hello)
		return hello
	})
}

// OwnPool opens a pool of the test's own on choird's database, closed at
// cleanup; use it to look at rows without taking choird's connections.
func (c *Choird) OwnPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return dbtest.Connect(t, c.DatabaseURL)
}

// WaitFor polls cond every 20 ms for up to 30 s, then fails the test
// naming what it waited for, with logs (may be nil) appended.
func WaitFor(t testing.TB, what string, logs fmt.Stringer, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			if logs != nil {
				t.Fatalf("timed out waiting for %s; log:\n%s", what, logs.String())
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// SyncBuffer is a bytes.Buffer safe for concurrent writers, for logs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is what was written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
