package dmcmd_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/sql/seam"
)

// TestDMControlsOnlyTheAgentHoldingItsLease: an admin starts assistant,
// whose default DM is the regular DM alice, on the admin's DM. alice can
// then do nothing to assistant, see nothing of it and reach nothing of it:
// every command, the approval buttons, her messages and her files are
// refused with a reply that says why, and choird logs each refusal. Her
// message is kept, and reaches assistant once it runs on alice again.
func TestDMControlsOnlyTheAgentHoldingItsLease(t *testing.T) {
	t.Parallel()
	b := choirdtest.SetupCommands(t)
	d := b.D
	ctx := context.Background()
	const why = "assistant, the agent of this DM, is running on another DM"

	a := b.D.StandIn(t, "assistant", admin.StartOverrides{DM: "console"})
	approvalID := choirdtest.RequestApproval(t, a, "admin-only approval")

	t.Run("CommandsAreRefused", func(t *testing.T) {
		for _, text := range []string{"/status", "/stop", "/restart", "/cores", "/cancel edge", "/compact", "/events 5",
			"/model", "/model llm big", "/voice", "/voice calm", "/inject hello", "/approvals", "/approve", "/reject",
			"/approve " + approvalID, "/reject " + approvalID, "/approve 1"} {
			reply := b.Send(t, "alice", text)
			if !choirdtest.Refused(reply) || !strings.Contains(reply, why) || strings.Contains(reply, "admin-only approval") {
				t.Errorf("%s from alice = %q, want a refusal saying %q", text, reply, why)
			}
		}
		if help := b.Send(t, "alice", "/help"); !strings.Contains(help, "this DM controls no agent now: "+why) {
			t.Errorf("/help = %q", help)
		}
		if notes := b.TakeNotes(); len(notes) > 0 {
			t.Errorf("refused commands ran in the background: %q", notes)
		}
	})

	t.Run("ApprovalButtonIsRefused", func(t *testing.T) {
		ans, err := b.C.Decide(ctx, gateway.Decision{DM: choirdtest.DMOf("alice"), ApprovalID: approvalID, Approve: true})
		if err != nil || !strings.HasPrefix(ans, "not your approval") || !strings.Contains(ans, why) {
			t.Errorf("button = %q, %v", ans, err)
		}
	})

	// A scope made while assistant was not running, used after the admin
	// started it elsewhere: the control functions check the session.
	stale := control.Scope{Agent: "assistant", DM: "alice", Actor: "telegram:alice"}
	t.Run("StaleScopeReachesNoSession", func(t *testing.T) {
		checks := map[string]func() error{
			"stop":    func() error { _, err := d.AgentStop(ctx, stale, "assistant"); return err },
			"compact": func() error { _, err := d.SessionCompact(ctx, stale, "assistant"); return err },
			"cancel":  func() error { _, err := d.SessionCancel(ctx, stale, "assistant", "edge"); return err },
			"model":   func() error { _, err := d.ModelSet(ctx, stale, "assistant", "big"); return err },
			"voice":   func() error { _, err := d.ModelGet(ctx, stale, "assistant"); return err },
			"events":  func() error { _, err := d.SessionEvents(ctx, stale, "assistant", 5); return err },
			"cores":   func() error { _, err := d.SessionCores(ctx, stale, "assistant"); return err },
			"status":  func() error { _, err := d.SessionStatus(ctx, stale, "assistant"); return err },
			"decide":  func() error { _, err := d.Approvals().Decide(ctx, stale, approvalID, true); return err },
		}
		for name, check := range checks {
			if err := check(); !errors.Is(err, control.ErrForbidden) {
				t.Errorf("%s with a stale scope: %v, want control.ErrForbidden", name, err)
			}
		}
		if list, err := d.Approvals().List(ctx, stale, ""); err != nil || len(list) != 0 {
			t.Errorf("approvals listed with a stale scope: %v, %v", list, err)
		}
	})

	const aliceUpdate = 7001
	t.Run("MessageIsKeptNotPushed", func(t *testing.T) {
		err := d.Inbox().Receive(ctx, gateway.InboundMessage{DM: choirdtest.DMOf("alice"), UpdateID: aliceUpdate, ChatID: "alice",
			Text: "hello from alice", SentAt: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		// What a hello and the inbox sweep do for assistant's session.
		d.Inbox().RedeliverInbox(ctx, "assistant", uuid.MustParse(a.SessionID), time.Now())
		row, err := seam.Queries(d.Pool()).InboxGetByUpdate(ctx, db.InboxGetByUpdateParams{Gateway: "console", UpdateID: aliceUpdate})
		if err != nil {
			t.Fatal(err)
		}
		if row.AgentID == nil || *row.AgentID != "assistant" || row.PushedAt != nil || row.SessionID != nil {
			t.Errorf("alice's row: agent %v, pushed %v, session %v; want kept for assistant and never pushed",
				row.AgentID, row.PushedAt, row.SessionID)
		}
	})

	t.Run("FileIsRefused", func(t *testing.T) {
		if dir, err := d.Inbox().WorkspaceDir(ctx, choirdtest.DMOf("alice")); !errors.Is(err, gateway.ErrNotBound) {
			t.Errorf("alice's file would go to %q (%v)", dir, err)
		}
	})

	t.Run("NothingReachedTheAgent", func(t *testing.T) {
		// The admin's cancel is the last push; every push before it must
		// be none of alice's.
		if reply := b.Send(t, "console", "/cancel assistant edge"); choirdtest.Refused(reply) {
			t.Fatalf("admin cancel: %s", reply)
		}
		for {
			var p choirdtest.Push
			select {
			case p = <-a.Pushes:
			case <-time.After(10 * time.Second):
				t.Fatal("the admin's cancel was not pushed")
			}
			if p.Kind == rpc.PushCancel && strings.Contains(p.Cancel.Reason, "telegram:console") {
				break
			}
			switch p.Kind {
			case rpc.PushUserMessage, rpc.PushInjection, rpc.PushCancel, rpc.PushCompact, rpc.PushShutdown,
				rpc.PushConfigChanged, rpc.PushApprovalResolved:
				t.Errorf("alice reached assistant: %s push %+v", p.Kind, p)
			}
		}
		if st := d.LatestStatus(ctx, "assistant"); st.SessionID != a.SessionID || st.State != admin.AgentActive {
			t.Errorf("assistant = %+v, want its session still active", st)
		}
		m, err := d.ModelGet(ctx, control.Scope{Admin: true}, "assistant")
		if err != nil || m.LLMOverridden || m.VoiceOverridden {
			t.Errorf("model state = %+v, %v: alice switched it", m, err)
		}
		if ap, err := d.Approvals().Show(ctx, control.Scope{Admin: true}, approvalID); err != nil || ap.Status != "pending" {
			t.Errorf("approval = %+v, %v: want it still pending", ap, err)
		}
	})

	t.Run("ChoirdLogsEachRefusal", func(t *testing.T) {
		log := d.Logs.String()
		for _, want := range []string{`"msg":"dm command refused"`, `"msg":"approval button press refused"`,
			`"msg":"message not passed on: the dm's agent runs bound to another dm"`,
			`"msg":"file not stored: the dm's agent runs bound to another dm"`, `"bound_dm":"console"`} {
			if !strings.Contains(log, want) {
				t.Errorf("choird's log has no %s", want)
			}
		}
	})

	// The admin's session ends. alice controls assistant again, but the
	// admin's conversation stays out of her sight.
	a.Terminate(t, "the admin stopped it")
	t.Run("AfterStopTheOtherDMsSessionStaysHidden", func(t *testing.T) {
		if reply := b.Send(t, "alice", "/status"); choirdtest.Refused(reply) || !strings.Contains(reply, "assistant: stopped") {
			t.Errorf("/status = %q", reply)
		}
		if reply := b.Send(t, "alice", "/events 5"); !choirdtest.Refused(reply) || !strings.Contains(reply, "was on another DM") {
			t.Errorf("/events = %q, want a refusal", reply)
		}
		if reply := b.Send(t, "alice", "/approvals"); reply != "No approval is pending." {
			t.Errorf("/approvals = %q", reply)
		}
		if reply := b.Send(t, "alice", "/approve "+approvalID); !choirdtest.Refused(reply) || !strings.Contains(reply, "requested on another DM") {
			t.Errorf("/approve = %q", reply)
		}
	})

	t.Run("KeptMessageReachesTheAgentOnThisDM", func(t *testing.T) {
		back := b.D.StandIn(t, "assistant", admin.StartOverrides{})
		p := back.Next(t, rpc.PushUserMessage)
		if p.UserMessage.Text != "hello from alice" {
			t.Errorf("pushed %q", p.UserMessage.Text)
		}
	})
}
