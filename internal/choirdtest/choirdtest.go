// Package choirdtest is the one test harness for "Postgres + choird + an
// agent": it writes a .choir.d with a configuration made by config.Local
// for a fresh migrated database (dbtest), runs a real choird on it in
// process (Start, Restart) or from its binary as a process a test can kill
// (StartProcess), builds the module's commands once (Binary), plays agents
// over the real protocol for tests that run none (StandIn, StartSession,
// HelloSession), and offers what choird's end-to-end tests share, wherever
// they live beside the feature they test: the two-agent configuration
// (TwoAgents, StartTwoAgents, StartWithAgents), a DM command layer
// (SetupCommands), replica patches (ChainEvents, Patch), git repositories,
// choirctl in process, and the small waits and buffers. It holds no
// fakes: the model, Telegram and the runtime are whatever the test
// configures. It imports no agent code, so the agent's own tests may use
// it.
package choirdtest

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/rpc/admin"
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
	Logs *logbuf.Buffer

	opts    Options
	cancel  context.CancelFunc
	done    chan error
	once    sync.Once
	stopped atomic.Bool
	err     error
}

// Start runs choird and returns once it is ready. The test's cleanup stops
// it (and fails the test if it ended with an error), after stopping every
// agent its runtime, if any, still runs. A choird that cannot start fails
// the test with its log.
func Start(t testing.TB, o Options) *Choird {
	t.Helper()
	h := WriteHome(t, o)
	o.Home, o.DatabaseURL = h.Dir, h.DatabaseURL
	c := &Choird{Home: h.Dir, Config: h.Config, Secrets: h.Secrets, DatabaseURL: h.DatabaseURL, Logs: &logbuf.Buffer{},
		opts: o, done: make(chan error, 1)}
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
			c.StopAgents(t)
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

// Restart stops c, if it still runs, without stopping its agents (as when
// choird alone dies), and starts a new choird with the same options on the
// same home and database.
func (c *Choird) Restart(t testing.TB) *Choird {
	t.Helper()
	if err := c.Stop(); err != nil {
		t.Errorf("choird: %v", err)
	}
	return Start(t, c.opts)
}

// StopAgents stops every agent c's runtime still runs, unless c is stopped
// already (a restarted choird's successor stops them). The test's cleanup
// does so too; a test calls it where its agents must be gone before its
// other cleanups run (a model server's, say).
func (c *Choird) StopAgents(t testing.TB) {
	if c.opts.Daemon.Runtime == "" || c.stopped.Load() {
		return
	}
	ctx := context.Background()
	for id := range c.Snapshot().Config.Agents {
		if st := c.LatestStatus(ctx, id); st.State == admin.AgentActive || st.State == admin.AgentStarting {
			if _, err := c.AgentStop(ctx, control.Scope{Admin: true, Actor: "choirdtest"}, id); err != nil {
				t.Errorf("stop %s: %v", id, err)
			}
		}
	}
}

// Stop stops choird and waits for it; later calls return the same result.
func (c *Choird) Stop() error {
	c.once.Do(func() {
		c.stopped.Store(true)
		c.cancel()
		c.err = <-c.done
	})
	return c.err
}

// Workspace is the directory of a configured workspace.
func (c *Choird) Workspace(name string) string { return c.Config.Workspaces[name].Path }

// WaitState waits until agentID is in state want, and returns its status.
func (c *Choird) WaitState(t testing.TB, agentID string, want admin.AgentState) admin.AgentStatus {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		st := c.LatestStatus(context.Background(), agentID)
		if st.State == want {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("agent %s is %s, want %s; log:\n%s", agentID, st.State, want, c.Logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Socket is the agent protocol's socket.
func (c *Choird) Socket() string { return daemon.AgentSocketPath(c.Home) }

// StartSession opens a live session of agentID for an agent the test runs
// itself (recorded under the process runtime), with default bindings, and
// returns its id and lease token.
func (c *Choird) StartSession(t testing.TB, agentID string) (sessionID, token string) {
	t.Helper()
	sessionID, token, err := c.Daemon.StartSession(context.Background(), agentID, admin.StartOverrides{}, "process")
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
