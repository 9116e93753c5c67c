package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/sql/seam"
)

// Supervision of the agent instances the runtime runs: a dead instance
// ends its session at once, and what a crash or a previous run of choird
// leaves behind is removed.

// watchExits ends the session of every instance that dies while its
// session is live, at once, without waiting for missed heartbeats; the
// heartbeat threshold stays the authority for anything the runtime misses.
func (d *Daemon) watchExits(ctx context.Context) {
	exits, err := d.runtime.Events(ctx)
	if err != nil {
		d.logger.Error("cannot watch agent instances; crashes are detected by heartbeat only", slog.String("error", err.Error()))
		return
	}
	for ex := range exits {
		id, err := uuid.Parse(ex.SessionID)
		if err != nil {
			continue
		}
		ended, err := session.EndSession(ctx, d.pool, d.river, id, "crashed",
			fmt.Sprintf("instance %s exited with status %d", ex.ID, ex.ExitCode))
		if err != nil {
			d.logger.Error("could not end the session of a dead instance", slog.String("session_id", ex.SessionID),
				slog.String("error", err.Error()))
			continue
		}
		if ended {
			d.logger.Warn("agent instance died; session crashed", slog.String("agent_id", ex.AgentID),
				slog.String("session_id", ex.SessionID), slog.Int("exit_code", ex.ExitCode), slog.Bool("oom_killed", ex.OOMKilled))
			d.closeSession(ctx, ex.SessionID) //nolint:errcheck
			d.crashNotice(ctx, id, fmt.Sprintf("its instance exited with status %d", ex.ExitCode))
		}
		if err := d.runtime.Remove(ctx, ex.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			d.logger.Warn("could not remove a dead instance", slog.String("instance", ex.ID), slog.String("error", err.Error()))
		}
	}
}

// reportLeftRunning says, as choird stops, which agents it leaves running
// and what becomes of them: choird's stop (Ctrl-C at a terminal, a service
// stop or restart) never stops agents, so that a restart loses nothing; a
// choird started again within the bound resumes each one in a successor
// session, and without one each agent stops by itself once the bound has
// passed (agent.ErrOrphaned).
func (d *Daemon) reportLeftRunning(ctx context.Context) {
	if d.runtime == nil {
		return
	}
	list, err := d.runtime.List(ctx)
	if err != nil {
		return
	}
	var agents []string
	for _, inst := range list {
		if inst.Running() {
			agents = append(agents, inst.AgentID)
		}
	}
	if len(agents) == 0 {
		return
	}
	bound := d.Snapshot().Config.CrashDetectionThreshold() + agentapi.OrphanGrace
	d.logger.InfoContext(ctx, fmt.Sprintf("agents left running: started again within %s, choird resumes them; "+
		"otherwise each stops by itself then (choirctl agent stop before stopping choird ends them now)", bound),
		slog.Any("agents", agents), slog.Duration("bound", bound))
}

// cleanOrphans removes every instance a previous run of choird left (spec
// 6.2 step 6). Their sessions were closed before (CloseLiveSessions), and
// the active ones are resumed in successors (ResumeSessions).
func (d *Daemon) cleanOrphans(ctx context.Context) error {
	removed, err := runtime.RemoveOrphans(ctx, d.runtime, func(runtime.Instance) bool { return false })
	if err != nil {
		return fmt.Errorf("remove orphaned agent instances: %w", err)
	}
	for _, inst := range removed {
		d.logger.InfoContext(ctx, "step 6: removed orphaned agent instance", slog.String("instance", inst.ID),
			slog.String("agent_id", inst.AgentID), slog.String("session_id", inst.SessionID))
	}
	return nil
}

// removeInstance removes the container or process of a crashed session,
// for the crash detection job: a frozen agent must not wake up and act
// (its token is revoked too, so it could not anyway).
func (d *Daemon) removeInstance(ctx context.Context, sessionID uuid.UUID) error {
	if d.runtime == nil {
		return nil
	}
	s, err := seam.Queries(d.pool).SessionGetByID(ctx, sessionID)
	if err != nil {
		return fmt.Errorf("load session %s: %w", sessionID, err)
	}
	if s.ContainerID == "" {
		return nil
	}
	if err := d.runtime.Remove(ctx, s.ContainerID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("remove instance %s of crashed session %s: %w", s.ContainerID, sessionID, err)
	}
	d.logger.InfoContext(ctx, "instance of a crashed session removed", slog.String("session_id", sessionID.String()),
		slog.String("instance", s.ContainerID))
	return nil
}

// crashNotice tells the crashed session's DM, through the outbox.
func (d *Daemon) crashNotice(ctx context.Context, sessionID uuid.UUID, why string) {
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		s, err := seam.Queries(tx).SessionGetByID(ctx, sessionID)
		if err != nil {
			return err
		}
		return session.CrashNoticeTx(ctx, tx, d.river, d.DMAddress, s.AgentID, sessionID, s.ResourceBindings, why)
	})
	if err != nil {
		d.logger.WarnContext(ctx, "crash notice not queued", slog.String("session_id", sessionID.String()),
			slog.String("error", err.Error()))
	}
}
