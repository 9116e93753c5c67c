package approval_test

import (
	"context"
	"strings"
	"testing"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// TestBareApproveAsksWhenSeveralWereFiled: the person read request A and
// sends a bare /approve, but meanwhile A was decided elsewhere and the
// agent filed B. B is the only one pending, yet it is not what the person
// read: a bare /approve decides nothing and asks which, and the numbered
// answer then decides B.
func TestBareApproveAsksWhenSeveralWereFiled(t *testing.T) {
	t.Parallel()
	b := choirdtest.SetupCommands(t)
	ctx := context.Background()
	assistant := b.D.StandIn(t, "assistant", admin.StartOverrides{})
	read := choirdtest.RequestApproval(t, assistant, "the one alice read")
	if _, err := b.D.Approvals().Decide(ctx, control.Scope{Admin: true, Actor: "choirctl"}, read, false); err != nil {
		t.Fatal(err)
	}
	sneaked := choirdtest.RequestApproval(t, assistant, "filed meanwhile")
	reply := b.Send(t, "alice", "/approve")
	if !strings.Contains(reply, "2 approvals were filed in the last minute") || !strings.Contains(reply, "the one alice read") ||
		!strings.Contains(reply, "1. assistant: filed meanwhile") {
		t.Fatalf("bare /approve with two filed lately = %q", reply)
	}
	a, err := b.D.Approvals().Show(ctx, control.Scope{Admin: true}, sneaked)
	if err != nil || a.Status != "pending" {
		t.Fatalf("the bare /approve decided %s: %s, %v", sneaked, a.Status, err)
	}
	if reply := b.Send(t, "alice", "/approve 1"); !strings.HasPrefix(reply, "Approved: filed meanwhile") {
		t.Errorf("/approve 1 = %q", reply)
	}
}
