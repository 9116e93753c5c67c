package docker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/choirhq/choir/daemon/logfile"
)

// An agent's output, like the process runtime's, is its log (spec 22.2):
// Start attaches to the created container's stdout and stderr before it
// starts, so nothing the agent prints is missed whatever the engine's log
// driver, and copies them to <LogDir>/<agent-id>.log until the container
// exits; then the log is archived to <LogDir>/archive/<agent-id>/<ts>.log.gz.
// Stop and Remove wait for that copy, so the next instance of the agent
// starts a new file.

// copyWait bounds how long Stop and Remove wait for an exited container's
// output to be copied and archived.
const copyWait = 10 * time.Second

// attachOutput attaches to the container's stdout and stderr and copies
// them to the agent's log until the container exits. With no LogDir it
// does nothing.
func (r *Runtime) attachOutput(ctx context.Context, id, agentID string) error {
	if r.opts.LogDir == "" {
		return nil
	}
	path := filepath.Join(r.opts.LogDir, agentID+".log")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("open agent log: %w", err)
	}
	// The stream outlives Start's context: it ends with the container.
	att, err := r.cli.ContainerAttach(context.WithoutCancel(ctx), id,
		client.ContainerAttachOptions{Stream: true, Stdout: true, Stderr: true})
	if err != nil {
		f.Close()
		return r.engineErr("attach to the agent's output", err)
	}
	done := make(chan struct{})
	r.mu.Lock()
	r.copies[id] = done
	r.mu.Unlock()
	go func() {
		defer close(done)
		_, err := stdcopy.StdCopy(f, f, att.Reader)
		att.Close()
		f.Close()
		if err != nil {
			r.log.Warn("agent output copy ended", slog.String("agent_id", agentID), slog.String("error", err.Error()))
		}
		archive, err := logfile.Archive(path, filepath.Join(r.opts.LogDir, "archive", agentID), time.Now())
		if err != nil {
			r.log.Warn("agent log not archived", slog.String("agent_id", agentID), slog.String("error", err.Error()))
		} else if archive != "" {
			r.log.Info("agent log archived", slog.String("agent_id", agentID), slog.String("archive", archive))
		}
		// Only now is the copy done: until the log is archived, Stop and
		// Remove find the copy and wait for it.
		r.mu.Lock()
		delete(r.copies, id)
		r.mu.Unlock()
	}()
	return nil
}

// waitOutput waits until the exited container's output is copied and
// its log archived.
func (r *Runtime) waitOutput(ctx context.Context, id string) {
	r.mu.Lock()
	done, ok := r.copies[id]
	r.mu.Unlock()
	if !ok {
		return
	}
	t := time.NewTimer(copyWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.log.Warn("agent output still copying; its log is archived when the copy ends", slog.String("container", shortID(id)))
	case <-ctx.Done():
	}
}
