package approval_test

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/dmcmd"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// TestApprovalDecisions: exactly one decision wins, a second one says
// "already", a regular DM cannot decide another agent's approval, the
// requesting session is told by push, the agent's replicated approval
// event marks the outcome taken, and an approval decided while its agent
// was down is told to the agent's next sessions until one takes it.
func TestApprovalDecisions(t *testing.T) {
	b := choirdtest.SetupCommands(t)
	d := b.D
	ctx := context.Background()
	operator := control.Scope{Admin: true, Actor: "choirctl:uid=0"}
	other := control.Scope{Agent: "helper", Actor: "telegram:bob"}

	a := b.D.StandIn(t, "assistant", admin.StartOverrides{})
	id := choirdtest.RequestApproval(t, a, "deploy to staging")
	if _, err := d.Approvals().Decide(ctx, other, id, true); !errors.Is(err, control.ErrForbidden) {
		t.Fatalf("another agent's DM decided: %v", err)
	}
	if got, err := d.Approvals().Show(ctx, operator, id); err != nil || got.Status != "pending" {
		t.Fatalf("after the refused decision: %+v, %v", got, err)
	}
	got, err := d.Approvals().Decide(ctx, control.Scope{Agent: "assistant", Actor: "telegram:alice"}, id, true)
	if err != nil || got.Status != "approved" || got.ResolvedBy != "telegram:alice" {
		t.Fatalf("decide = %+v, %v", got, err)
	}
	p := a.Next(t, rpc.PushApprovalResolved)
	if p.ApprovalResolved.ApprovalID != id || p.ApprovalResolved.Status != rpc.ApprovalApproved {
		t.Errorf("pushed outcome = %+v", p.ApprovalResolved)
	}
	again, err := d.Approvals().Decide(ctx, operator, id, false)
	if !errors.Is(err, approval.ErrResolved) || again.Status != "approved" {
		t.Fatalf("second decision = %+v, %v", again, err)
	}
	if answer, _ := dmcmd.DecisionAnswer(again, err); answer != "already approved" {
		t.Errorf("the second presser is told %q", answer)
	}
	var auditBy string
	d.Pool().QueryRow(ctx, `SELECT resolved_by FROM choir_audit.approvals WHERE approval_id = $1`, id).Scan(&auditBy)
	if auditBy != "telegram:alice" {
		t.Errorf("audit view resolved_by = %q", auditBy)
	}

	// The agent's log shows the outcome taken: choird records it, and
	// tells no later session of it again.
	a.TakeApproval(t, id, rpc.ApprovalApproved)
	if !outcomeTaken(t, d.Pool(), id) {
		t.Error("the replicated approval event did not mark the outcome taken")
	}

	// Decided while the agent is down: told at the next session's hello,
	// and again at the one after if that one ended before taking it.
	id2 := choirdtest.RequestApproval(t, a, "add tool choir.repo.status")
	a.Terminate(t, "test stop")
	if _, err := d.Approvals().Decide(ctx, operator, id2, false); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true} {
		next := b.D.StandIn(t, "assistant", admin.StartOverrides{})
		p = next.Next(t, rpc.PushApprovalResolved)
		if p.ApprovalResolved.ApprovalID != id2 || p.ApprovalResolved.Status != rpc.ApprovalRejected ||
			p.ApprovalResolved.RequestType == "" {
			t.Errorf("session %d: outcome at the hello = %+v; want %s rejected, what was asked with it", i+1, p.ApprovalResolved, id2)
		}
		if want {
			next.TakeApproval(t, id2, rpc.ApprovalRejected)
		}
		if got := outcomeTaken(t, d.Pool(), id2); got != want {
			t.Errorf("session %d: outcome taken = %v, want %v", i+1, got, want)
		}
		next.Terminate(t, "test stop")
	}
	var pushed bool
	d.Pool().QueryRow(ctx, `SELECT outcome_pushed_at IS NOT NULL FROM choir_control.pending_approvals WHERE approval_id = $1`,
		id2).Scan(&pushed)
	if !pushed {
		t.Error("the outcome is not recorded as pushed")
	}
	var untaken int
	if err := d.Pool().QueryRow(ctx, `SELECT count(*) FROM choir_control.pending_approvals
		WHERE agent_id = 'assistant' AND status <> 'pending' AND outcome_taken_at IS NULL`).Scan(&untaken); err != nil || untaken != 0 {
		t.Errorf("outcomes left to push to the next session: %d, %v", untaken, err)
	}
	if list, err := d.Approvals().List(ctx, operator, ""); err != nil || len(list) != 0 {
		t.Errorf("pending after both decisions: %+v, %v", list, err)
	}
}

// outcomeTaken reports whether choird records approval id's outcome as
// taken by the agent.
func outcomeTaken(t *testing.T, pool *pgxpool.Pool, id string) bool {
	t.Helper()
	var taken bool
	if err := pool.QueryRow(context.Background(), `SELECT outcome_taken_at IS NOT NULL FROM choir_control.pending_approvals
		WHERE approval_id = $1`, id).Scan(&taken); err != nil {
		t.Fatal(err)
	}
	return taken
}
