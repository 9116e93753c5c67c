// Package hold is a person's stop of an agent, which is final (issue 29).
//
// When a person stops an agent (a DM's /stop, choirctl agent stop, and the
// stop of a restart or a workspace reset), the agent is held: its row
// names who stopped it, and its active start_agent schedules are paused,
// marked held. While it is held, choird starts it on its own for nobody:
// a schedule's fire (or a resume) that tries is refused with Err, whose
// message says who stopped it and how to start it, and the fire's message
// waits for the next session. A person's start lifts the hold and resumes
// the held schedules. Placing the hold and an unattended start both take
// the agent's row lock, so they never pass each other.
package hold

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/schedule/state"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// Err refuses a start choird would make on its own of an agent a person
// stopped.
var Err = errors.New("agent stopped by a person")

// Check refuses an unattended start of agent a while a person's stop
// holds it. It reads a's row as locked by the start's transaction.
func Check(a db.ChoirControlAgent) error {
	if a.HeldBy == nil || a.HeldAt == nil {
		return nil
	}
	return fmt.Errorf("%w: %s was stopped by %s at %s, and choird does not start it on its own (schedules, resumes) "+
		"until a person starts it again: choirctl agent start %s, or /start or /restart in its DM",
		Err, a.AgentID, *a.HeldBy, a.HeldAt.UTC().Format(time.RFC3339), a.AgentID)
}

// Place records a person's (by's) stop of agentID and pauses its
// start_agent schedules, in one transaction; it returns the schedules
// paused.
func Place(ctx context.Context, pool *pgxpool.Pool, agentID, by string) ([]int64, error) {
	var held []int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := seam.Queries(tx).AgentHold(ctx, db.AgentHoldParams{AgentID: agentID, HeldBy: &by}); err != nil {
			return fmt.Errorf("record the stop of %s: %w", agentID, err)
		}
		var err error
		held, err = state.HoldTx(ctx, tx, agentID)
		return err
	})
	return held, err
}

// Lift clears a person's stop of agentID, which a person has just
// started, and resumes the schedules it held (with ins, their jobs); it
// reports whether there was a stop and which schedules resumed.
func Lift(ctx context.Context, pool *pgxpool.Pool, ins jobs.Inserter, agentID string, now time.Time) (bool, []int64, error) {
	var resumed []int64
	var lifted int64
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		var err error
		if lifted, err = seam.Queries(tx).AgentRelease(ctx, agentID); err != nil {
			return fmt.Errorf("lift the stop of %s: %w", agentID, err)
		}
		if ins == nil {
			return nil
		}
		resumed, err = state.ReleaseTx(ctx, tx, ins, agentID, now)
		return err
	})
	return lifted > 0, resumed, err
}
