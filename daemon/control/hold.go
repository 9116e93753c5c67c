package control

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	choirsql "github.com/choirhq/choir/sql"
)

// A person's stop is final (issue 29). When a person stops an agent (a
// DM's /stop, choirctl agent stop, and the stop of a restart or a
// workspace reset), the agent is held: its row names who stopped it, and
// its active start_agent schedules are paused, marked held. While it is
// held, choird starts it on its own for nobody: a schedule's fire (or a
// resume) that tries is refused, saying so in its log line, and its
// message waits for the next session. A person's start lifts the hold and
// resumes the held schedules.
//
// Budgets cannot be reset by cycling sessions: a session that choird
// starts on its own continues the session budget of the session before
// it, whatever ended that one (the agent itself, a crash, choird's
// restart), so an agent that ends its own session and is started again by
// its schedule finds the session caps as spent as it left them. Only a
// person's start gives a session a fresh budget. (Day caps were already
// counted per day across sessions.)

// Origin is who starts a session.
type Origin int

const (
	// ByPerson is a start by a person (choirctl, a DM): it lifts a
	// person's stop, and its session has a fresh budget.
	ByPerson Origin = iota
	// ByChoird is a start choird makes on its own (a schedule's
	// start_agent, a resume): refused while a person's stop holds the
	// agent; its session continues the budget of the one before it.
	ByChoird
)

// ErrHeld refuses a start choird would make on its own of an agent a
// person stopped.
var ErrHeld = errors.New("agent stopped by a person")

// heldErr says why an unattended start of agentID is refused.
func heldErr(agentID, by string, at time.Time) error {
	return fmt.Errorf("%w: %s was stopped by %s at %s, and choird does not start it on its own (schedules, resumes) "+
		"until a person starts it again: choirctl agent start %s, or /start or /restart in its DM",
		ErrHeld, agentID, by, at.UTC().Format(time.RFC3339), agentID)
}

// stoppableSession is the live session AgentStop stops. A person's stop
// first holds the agent (holdAgent), then looks again, so that a session
// a schedule started meanwhile is stopped too; an agent that is not
// running stays held.
func (d *Control) stoppableSession(ctx context.Context, sc Scope, agentID string) (db.ChoirControlSession, error) {
	q := db.New(choirsql.Interpreted(d.pool))
	s, err := q.SessionGetLiveByAgent(ctx, agentID)
	live := err == nil
	if err != nil && !errors.Is(err, choirsql.ErrNotFound) {
		return s, err
	}
	if live {
		if err := sc.AllowSession(s); err != nil {
			return s, err
		}
	}
	if sc.Unattended {
		if !live {
			return s, fmt.Errorf("agent %s is not running", agentID)
		}
		return s, nil
	}
	if err := d.KnownAgent(agentID); err != nil {
		return s, err
	}
	if err := d.holdAgent(ctx, sc, agentID); err != nil {
		return s, err
	}
	if !live {
		s, err = q.SessionGetLiveByAgent(ctx, agentID)
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

// holdAgent records a person's stop of agentID and pauses its start_agent
// schedules, in one transaction that holds the agent's row lock, which an
// unattended start takes too (CreateSessionAs).
func (d *Control) holdAgent(ctx context.Context, sc Scope, agentID string) error {
	var held []db.ChoirControlSchedule
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		if _, err := db.New(choirsql.Interpreted(tx)).AgentHold(ctx, db.AgentHoldParams{AgentID: agentID, HeldBy: &sc.Actor}); err != nil {
			return fmt.Errorf("record the stop of %s: %w", agentID, err)
		}
		var err error
		held, err = jobs.ScheduleHoldTx(ctx, tx, agentID)
		return err
	})
	if err != nil {
		return err
	}
	d.logger.InfoContext(ctx, "agent held by a person's stop: choird does not start it on its own until a person does",
		slog.String("agent_id", agentID), slog.String("by", sc.Actor), slog.Any("schedules_paused", scheduleIDs(held)))
	return nil
}

// releaseAgent lifts a person's stop of agentID, which a person has just
// started, and resumes the schedules it held.
func (d *Control) releaseAgent(ctx context.Context, sc Scope, agentID string) error {
	var resumed []db.ChoirControlSchedule
	var lifted int64
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		var err error
		if lifted, err = db.New(choirsql.Interpreted(tx)).AgentRelease(ctx, agentID); err != nil {
			return fmt.Errorf("lift the stop of %s: %w", agentID, err)
		}
		if d.river == nil {
			return nil
		}
		resumed, err = jobs.ScheduleReleaseTx(ctx, tx, d.river, agentID, time.Now())
		return err
	})
	if err != nil {
		return err
	}
	if lifted > 0 || len(resumed) > 0 {
		d.logger.InfoContext(ctx, "a person started the agent: its stop is lifted and the schedules it held resumed",
			slog.String("agent_id", agentID), slog.String("by", sc.Actor), slog.Any("schedules_resumed", scheduleIDs(resumed)))
	}
	return nil
}

func scheduleIDs(rows []db.ChoirControlSchedule) []int64 {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ScheduleID
	}
	return ids
}

// carryBudget makes p, a session choird starts on its own, continue the
// session budget of prev, the agent's session before it: its base is
// prev's base plus what prev spent, as its replicated log shows.
func carryBudget(ctx context.Context, q *db.Queries, prev db.ChoirControlSession, p *db.SessionCreateParams) error {
	spent, err := q.UsageSessionTotals(ctx, prev.SessionID)
	if err != nil {
		return fmt.Errorf("usage of session %s: %w", prev.SessionID, err)
	}
	p.BudgetFrom = &prev.SessionID
	p.BudgetBaseTokens = prev.BudgetBaseTokens + spent.Tokens
	p.BudgetBaseCostUsd = prev.BudgetBaseCostUsd + spent.CostUsd
	return nil
}
