package choirdtest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/rpc/admin"
)

// Process is choird run from its binary as a child process, so that a test
// can kill it mid-request.
type Process struct {
	Home
	// Logs receives choird's standard output and error.
	Logs *logbuf.Buffer

	opts Options
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// StartProcess runs the choird binary (Binary) on o's home (WriteHome) with
// o.Daemon's runtime, agent binary, agent image, OS image and Telegram
// server, and returns once its admin socket answers. The test's cleanup
// stops the agents it still runs, then choird, with SIGTERM.
func StartProcess(t testing.TB, o Options) *Process {
	t.Helper()
	if d := o.Daemon; d.Transport != "" || d.Listen != "" || d.TLSCert != "" || d.TLSKey != "" {
		t.Fatal("choirdtest.StartProcess passes no transport options to choird: run it in process (Start) to set them")
	}
	p := &Process{Home: WriteHome(t, o), Logs: &logbuf.Buffer{}, done: make(chan struct{})}
	p.opts = o
	p.opts.Home, p.opts.DatabaseURL = p.Dir, p.DatabaseURL
	args := []string{"--home", p.Dir, "--runtime=" + o.Daemon.Runtime}
	for flag, v := range map[string]string{"--agent-binary": o.Daemon.AgentBinary, "--agent-image": o.Daemon.AgentImage,
		"--os-image": o.Daemon.OSImage, "--telegram-api-url": o.Daemon.TelegramAPIURL} {
		if v != "" {
			args = append(args, flag+"="+v)
		}
	}
	p.cmd = exec.Command(Binary(t, "cmd/choird"), args...)
	p.cmd.Stdout, p.cmd.Stderr = p.Logs, p.Logs
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start choird: %v", err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		if p.exited() {
			return
		}
		if o.Daemon.Runtime != "" {
			p.stopAgents(t)
		}
		if err := p.Signal(syscall.SIGTERM); err != nil {
			t.Errorf("stop choird: %v", err)
		}
	})
	c := admin.NewClient(admin.SocketPath(p.Dir))
	defer c.Close()
	timeout := o.ReadyTimeout
	if timeout == 0 {
		timeout = time.Minute
	}
	deadline := time.Now().Add(timeout)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := c.Status(ctx)
		cancel()
		if err == nil {
			return p
		}
		if p.exited() {
			t.Fatalf("choird exited before it was ready: %v\n%s", p.err, p.Logs.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("choird not ready within %s: %v\n%s", timeout, err, p.Logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Restart starts a new choird process with the same options on the same
// home and database, once p has exited (Signal).
func (p *Process) Restart(t testing.TB) *Process {
	t.Helper()
	if !p.exited() {
		t.Fatal("choird still runs: stop it (Signal) before starting another on its home")
	}
	return StartProcess(t, p.opts)
}

// exited says whether choird has exited.
func (p *Process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Signal sends sig to choird and waits until it has exited; one that is
// still there after 30 s is killed, and named in the error.
func (p *Process) Signal(sig syscall.Signal) error {
	if err := p.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill() //nolint:errcheck
		<-p.done
		return errors.New("choird did not exit on " + sig.String() + " within 30 s; killed")
	}
}

// stopAgents stops, through the admin socket, every agent choird runs.
func (p *Process) stopAgents(t testing.TB) {
	c := admin.NewClient(admin.SocketPath(p.Dir))
	defer c.Close()
	for id := range p.Config.Agents {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		if st, err := c.AgentStatus(ctx, id); err == nil && (st.State == admin.AgentActive || st.State == admin.AgentStarting) {
			if _, err := c.AgentStop(ctx, id); err != nil {
				t.Logf("stop %s: %v", id, err)
			}
		}
		cancel()
	}
}
