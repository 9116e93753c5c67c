package schedule

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/schedule/state"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// ApprovalType is the request type of the approval a schedule made by an
// agent waits for, when its agent's policy says so.
const ApprovalType = "choir.schedule"

// RegisterApprovals registers the approval kind of schedules: approved, a
// schedule is armed; rejected or timed out, it is cancelled; and the chat
// is told when an approved schedule runs next.
func RegisterApprovals(r *approval.Registry) {
	r.Register(ApprovalType, approval.Kind{
		ResolvedTx: func(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, a approval.Approval) error {
			return approvalResolvedTx(ctx, tx, ins, a, time.Now())
		},
		OutcomeText: approvedText,
	})
}

// approvalResolvedTx applies an approval's outcome to the schedule
// waiting for it, in the transaction that resolved the approval: approved,
// it is armed (a one-shot whose time passed meanwhile fires at once, on
// time: the wait was a person's, not downtime); rejected or timed out, it
// is cancelled.
func approvalResolvedTx(ctx context.Context, tx pgx.Tx, ins jobs.Inserter, a approval.Approval, now time.Time) error {
	q := seam.Queries(tx)
	s, err := q.ScheduleLockByApproval(ctx, &a.ID)
	if errors.Is(err, choirsql.ErrNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lock the schedule of approval %s: %w", a.ID, err)
	}
	if s.Status != state.PendingApproval {
		return nil
	}
	if a.Status != "approved" {
		_, err := q.ScheduleSetState(ctx, db.ScheduleSetStateParams{ScheduleID: s.ScheduleID, Status: state.Cancelled})
		return err
	}
	next, err := state.Next(s, now)
	if err != nil {
		return err
	}
	_, err = state.ArmTx(ctx, tx, ins, s, state.Later(next, now))
	return err
}

// approvedText says what happens next once a schedule's approval is
// approved: nothing runs at the moment of the approval; the schedule is
// armed and runs when it fires. A rejection keeps the plain words ("").
func approvedText(ctx context.Context, tx pgx.Tx, row approval.Approval) (string, error) {
	if row.Status != "approved" {
		return "", nil
	}
	s, err := seam.Queries(tx).ScheduleLockByApproval(ctx, &row.ID)
	switch {
	case errors.Is(err, choirsql.ErrNotFound):
		return fmt.Sprintf("Approved: %s. Nothing runs now.", row.Summary), nil
	case err != nil:
		return "", fmt.Errorf("load the schedule of approval %s: %w", row.ID, err)
	case s.Status != state.Active || s.NextRunAt == nil:
		return fmt.Sprintf("Approved: %s. Nothing runs now: the schedule is %s.", row.Summary, s.Status), nil
	}
	loc, err := time.LoadLocation(s.TimeZone)
	if err != nil {
		loc = time.UTC
	}
	return fmt.Sprintf("Approved: %s. Armed: nothing runs until it fires, next at %s.", row.Summary,
		s.NextRunAt.In(loc).Format("Mon 2 Jan 2006 15:04 MST")), nil
}
