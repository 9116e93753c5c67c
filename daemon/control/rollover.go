package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"

	"github.com/choirhq/choir/daemon/hold"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// rolloverActor is the actor of the daily rollover's stop and start.
const rolloverActor = "choird (daily session rollover)"

// RolloverEndReason is why a session that rolled over ended.
const RolloverEndReason = "the day's session rollover"

// AgentRollover rolls the live session from of agentID over to a new
// session (session.Rollover decides when): the session is stopped
// gracefully, as a person's stop does it but without holding the agent
// (the agent's safe point, its session summary, the final heartbeat, the
// chunking into memory), and its successor is started with the same
// bindings and transient overrides, resuming the chain from the last
// acknowledged revision with fresh per-session budgets. It reports false
// when from is no longer the agent's active session. A successor that
// cannot start is owed (successor_due): the rollover's next run tries
// again, and the DM is told, once, how to start the agent meanwhile.
func (d *Control) AgentRollover(ctx context.Context, agentID string, from uuid.UUID) (bool, error) {
	q := seam.Queries(d.pool)
	s, err := q.SessionGetLiveByAgent(ctx, agentID)
	if errors.Is(err, choirsql.ErrNotFound) || (err == nil && (s.SessionID != from || s.Status != "active")) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("load the live session of %s: %w", agentID, err)
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(s.ResourceBindings, &b); err != nil {
		return false, fmt.Errorf("read the bindings of session %s: %w", from, err)
	}
	// The successor is owed from here on: should choird stop between the
	// stop and the start, or the start fail, the rollover's next run
	// starts it (session.RolloverWorker.startDue).
	if err := q.SessionMarkSuccessorDue(ctx, db.SessionMarkSuccessorDueParams{SessionID: from, KeepRolloverAt: true}); err != nil {
		return false, fmt.Errorf("mark session %s's successor due: %w", from, err)
	}
	// Choird rolls over an idle session only; should a message arrive
	// in between, its turn finishes before the agent stops.
	if err := d.stopSession(ctx, session.Of(s), rpc.Shutdown{Reason: RolloverEndReason, AfterTurn: true}, rolloverActor); err != nil {
		return false, fmt.Errorf("stop session %s for the rollover: %w", from, err)
	}
	st, err := d.AgentStart(ctx, Scope{Admin: true, Actor: rolloverActor, Unattended: true, Rollover: true}, agentID, overridesOf(b))
	if errors.Is(err, hold.Err) {
		// A person stopped the agent while it rolled over: it stays
		// stopped, as they asked.
		return true, nil
	}
	if err != nil {
		d.notice(context.WithoutCancel(ctx), PendingResume{SessionID: from, AgentID: agentID, Bindings: s.ResourceBindings},
			"rollover:", fmt.Sprintf("%s did not come back after the day's session rollover: %v. Everything it had "+
				"acknowledged is kept, and choird tries again every minute; choirctl agent start %s (or /start %s from "+
				"an admin DM) resumes it where it left off.",
				agentID, err, agentID, agentID))
		return false, fmt.Errorf("start the successor of session %s: %w", from, err)
	}
	if err := d.carryOverrides(ctx, from, st.SessionID); err != nil {
		d.logger.WarnContext(ctx, "transient overrides not carried over the rollover", slog.String("agent_id", agentID),
			slog.String("session_id", st.SessionID), slog.String("error", err.Error()))
	}
	d.logger.InfoContext(ctx, "session rolled over", slog.String("agent_id", agentID), slog.String("from", from.String()),
		slog.String("session_id", st.SessionID))
	return true, nil
}

// AgentRolloverStart starts the successor that ended session from of
// agentID owes (a rollover whose start did not happen, or a session whose
// budget was used up): with from's bindings and transient overrides,
// resuming its chain, with a fresh budget. A person's stop since
// (hold.Err) keeps the agent stopped; a start that fails is tried again
// at the rollover's next run, and the DM is told, once.
func (d *Control) AgentRolloverStart(ctx context.Context, agentID string, from uuid.UUID) error {
	q := seam.Queries(d.pool)
	s, err := q.SessionGetByID(ctx, from)
	if err != nil {
		return fmt.Errorf("load session %s: %w", from, err)
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(s.ResourceBindings, &b); err != nil {
		return fmt.Errorf("read the bindings of session %s: %w", from, err)
	}
	st, err := d.AgentStart(ctx, Scope{Admin: true, Actor: rolloverActor, Unattended: true, Rollover: true}, agentID, overridesOf(b))
	if errors.Is(err, hold.Err) {
		return nil
	}
	if err != nil {
		d.notice(context.WithoutCancel(ctx), PendingResume{SessionID: from, AgentID: agentID, Bindings: s.ResourceBindings},
			"rollover:", fmt.Sprintf("%s did not start again with a fresh budget at the day's rollover: %v. choird tries "+
				"again every minute; choirctl agent start %s (or /start %s from an admin DM) starts it.", agentID, err, agentID, agentID))
		return fmt.Errorf("start agent %s with a fresh budget: %w", agentID, err)
	}
	if err := d.carryOverrides(ctx, from, st.SessionID); err != nil {
		d.logger.WarnContext(ctx, "transient overrides not carried over the rollover", slog.String("agent_id", agentID),
			slog.String("session_id", st.SessionID), slog.String("error", err.Error()))
	}
	return nil
}
