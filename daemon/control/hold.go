package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/choirhq/choir/daemon/hold"
	"github.com/choirhq/choir/daemon/session"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// stoppableSession is the live session AgentStop stops. A stop is a
// person's (choird never stops an agent on its own): it first holds the
// agent (holdAgent), then looks again, so that a session a schedule
// started meanwhile is stopped too; an agent that is not running stays
// held.
func (d *Control) stoppableSession(ctx context.Context, sc Scope, agentID string) (session.Session, error) {
	q := seam.Queries(d.pool)
	row, err := q.SessionGetLiveByAgent(ctx, agentID)
	s := session.Of(row)
	live := err == nil
	if err != nil && !errors.Is(err, choirsql.ErrNotFound) {
		return s, err
	}
	if live {
		if err := sc.AllowSession(s); err != nil {
			return s, err
		}
	}
	if err := d.KnownAgent(agentID); err != nil {
		return s, err
	}
	if err := d.holdAgent(ctx, sc, agentID); err != nil {
		return s, err
	}
	if !live {
		row, err = q.SessionGetLiveByAgent(ctx, agentID)
		s = session.Of(row)
		if errors.Is(err, choirsql.ErrNotFound) {
			return s, fmt.Errorf("agent %s is not running; it stays stopped: its start_agent schedules are paused "+
				"until a person starts it", agentID)
		}
		if err != nil {
			return s, err
		}
		if err := sc.AllowSession(s); err != nil {
			return s, err
		}
	}
	return s, nil
}

// holdAgent records a person's stop of agentID (hold.Place).
func (d *Control) holdAgent(ctx context.Context, sc Scope, agentID string) error {
	paused, err := hold.Place(ctx, d.pool, agentID, sc.Actor)
	if err != nil {
		return err
	}
	d.logger.InfoContext(ctx, "agent held by a person's stop: choird does not start it on its own until a person does",
		slog.String("agent_id", agentID), slog.String("by", sc.Actor), slog.Any("schedules_paused", paused))
	return nil
}

// releaseAgent lifts a person's stop of agentID, which a person has just
// started (hold.Lift).
func (d *Control) releaseAgent(ctx context.Context, sc Scope, agentID string) error {
	lifted, resumed, err := hold.Lift(ctx, d.pool, d.river, agentID, time.Now())
	if err != nil {
		return err
	}
	if lifted || len(resumed) > 0 {
		d.logger.InfoContext(ctx, "a person started the agent: its stop is lifted and the schedules it held resumed",
			slog.String("agent_id", agentID), slog.String("by", sc.Actor), slog.Any("schedules_resumed", resumed))
	}
	return nil
}
