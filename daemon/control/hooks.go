package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
)

// The control layer's side of the jobs: the hooks River's workers call.

// DMAddress locates a DM of config.json: its gateway and chat.
func (d *Control) DMAddress(dm string) (gatewayName, chatID string, ok bool) {
	cfg, _ := d.config()
	return DMAddressIn(cfg, dm)
}

// RemoveInstance removes the container or process of a crashed session,
// for the crash detection job: a frozen agent must not wake up and act
// (its token is revoked too, so it could not anyway).
func (d *Control) RemoveInstance(ctx context.Context, sessionID uuid.UUID) error {
	if d.runtime == nil {
		return nil
	}
	s, err := db.New(d.pool).SessionGetByID(ctx, sessionID)
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
func (d *Control) crashNotice(ctx context.Context, sessionID uuid.UUID, why string) {
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		s, err := db.New(tx).SessionGetByID(ctx, sessionID)
		if err != nil {
			return err
		}
		return jobs.CrashNoticeTx(ctx, tx, d.river, d.DMAddress, s.AgentID, sessionID, s.ResourceBindings, why)
	})
	if err != nil {
		d.logger.WarnContext(ctx, "crash notice not queued", slog.String("session_id", sessionID.String()),
			slog.String("error", err.Error()))
	}
}

// WorkspaceDirs returns the configured workspaces, name to directory: where
// the delivery worker looks for the files of outbox rows.
func (d *Control) WorkspaceDirs() map[string]string {
	cfg, _ := d.config()
	m := make(map[string]string, len(cfg.Workspaces))
	for name, ws := range cfg.Workspaces {
		m[name] = ws.Path
	}
	return m
}
