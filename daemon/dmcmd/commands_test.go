package dmcmd_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/dmcmd"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
	"github.com/choirhq/choir/sql/seam"
)

// TestDMCommandPermissions runs every command of spec 19.3 from the admin
// DM, from a regular DM on its own agent, and from a regular DM naming
// another agent.
func TestDMCommandPermissions(t *testing.T) {
	t.Parallel()
	b := choirdtest.SetupCommands(t)
	rows := []struct {
		name      string
		adminOnly bool
		// admin, own and other are the command as the admin DM, as
		// alice on her agent (assistant), and as alice naming helper.
		// other is empty where the command has no agent-id form.
		admin, own, other string
	}{
		{name: "status", admin: "/status assistant", own: "/status", other: "/status helper"},
		{name: "stop", admin: "/stop assistant", own: "/stop", other: "/stop helper"},
		{name: "restart", admin: "/restart assistant", own: "/restart", other: "/restart helper"},
		{name: "cores", admin: "/cores assistant", own: "/cores", other: "/cores helper"},
		{name: "cancel", admin: "/cancel assistant research", own: "/cancel research", other: "/cancel helper research"},
		{name: "compact", admin: "/compact assistant", own: "/compact", other: "/compact helper"},
		{name: "events", admin: "/events assistant 5", own: "/events 5", other: "/events helper 5"},
		{name: "model", admin: "/model assistant", own: "/model", other: "/model helper"},
		{name: "model llm", admin: "/model assistant llm big", own: "/model llm big", other: "/model helper llm big"},
		{name: "voice", admin: "/voice assistant", own: "/voice", other: "/voice helper"},
		{name: "voice set", admin: "/voice assistant calm", own: "/voice calm", other: "/voice helper calm"},
		{name: "inject", admin: "/inject hello", own: "/inject hello"},
		{name: "approvals", admin: "/approvals assistant", own: "/approvals", other: "/approvals helper"},
		// Deciding another agent's approval by id is refused in
		// TestDMApprovalSelection.
		{name: "approve", admin: "/approve", own: "/approve"},
		{name: "reject", admin: "/reject", own: "/reject"},
		{name: "always", admin: "/always", own: "/always"},
		{name: "resend", admin: "/resend", own: "/resend"},
		{name: "schedules", admin: "/schedules assistant", own: "/schedules", other: "/schedules helper"},
		{name: "usage", admin: "/usage assistant", own: "/usage", other: "/usage helper"},
		{name: "help", admin: "/help", own: "/help"},
		{name: "start", adminOnly: true, admin: "/start assistant llm=big", own: "/start assistant", other: "/start helper"},
		{name: "update", adminOnly: true, admin: "/update assistant", own: "/update", other: "/update helper"},
		{name: "update_all", adminOnly: true, admin: "/update_all", own: "/update_all", other: "/update_all"},
		{name: "cap", adminOnly: true, admin: "/cap assistant per_day_tokens 900000", own: "/cap assistant per_day_tokens 1",
			other: "/cap helper per_day_tokens 1"},
		{name: "config load", adminOnly: true, admin: "/config load", own: "/config load", other: "/config load"},
		{name: "config diff", adminOnly: true, admin: "/config diff", own: "/config diff", other: "/config diff"},
		{name: "config apply", adminOnly: true, admin: "/config apply", own: "/config apply", other: "/config apply"},
		{name: "workspace list", adminOnly: true, admin: "/workspace list", own: "/workspace list", other: "/workspace list"},
		{name: "workspace reset", adminOnly: true, admin: "/workspace reset other", own: "/workspace reset other",
			other: "/workspace reset other"},
		{name: "secret list", adminOnly: true, admin: "/secret list", own: "/secret list", other: "/secret list"},
		{name: "agent list", adminOnly: true, admin: "/agent list", own: "/agent list", other: "/agent list"},
		{name: "agent build", adminOnly: true, admin: "/agent build assistant", own: "/agent build assistant",
			other: "/agent build helper"},
	}
	covered := map[string]bool{}
	for _, row := range rows {
		covered[strings.Fields(row.name)[0]] = true
	}
	for _, name := range dmcmd.CommandNames() {
		if !covered[name] {
			t.Errorf("command /%s has no row in the permission table", name)
		}
	}
	for _, row := range rows {
		t.Run(strings.ReplaceAll(row.name, " ", "_"), func(t *testing.T) {
			reply := b.Send(t, "console", row.admin)
			if choirdtest.Refused(reply) || strings.Contains(reply, "Unknown command") {
				t.Errorf("admin %q refused: %s", row.admin, reply)
			}
			reply = b.Send(t, "alice", row.own)
			switch {
			case row.adminOnly && (!choirdtest.Refused(reply) || !strings.Contains(reply, "needs an admin DM")):
				t.Errorf("regular %q = %q, want a refusal saying it needs an admin DM", row.own, reply)
			case !row.adminOnly && (choirdtest.Refused(reply) || strings.Contains(reply, "Unknown command")):
				t.Errorf("regular %q on its own agent refused: %s", row.own, reply)
			}
			if row.other != "" {
				reply = b.Send(t, "alice", row.other)
				want := "this DM controls only agent assistant, not helper"
				if row.adminOnly {
					want = "needs an admin DM"
				}
				if !choirdtest.Refused(reply) || !strings.Contains(reply, want) {
					t.Errorf("regular %q naming another agent = %q, want a refusal saying %q", row.other, reply, want)
				}
			}
			for _, n := range b.TakeNotes() {
				if strings.Contains(n, "Refused") {
					t.Errorf("long command outcome is a refusal: %s", n)
				}
			}
		})
	}

	t.Run("OwnAgentIDIsRefusedToo", func(t *testing.T) {
		reply := b.Send(t, "alice", "/status assistant")
		if !choirdtest.Refused(reply) || !strings.Contains(reply, "takes no agent id") {
			t.Errorf("reply = %q", reply)
		}
	})
	t.Run("UnboundDMIsToldSo", func(t *testing.T) {
		for _, text := range []string{"/status", "/model", "/approve", "/cores"} {
			if reply := b.Send(t, "nobody", text); !strings.Contains(reply, "No agent is bound to this DM") {
				t.Errorf("%s from an unbound DM = %q", text, reply)
			}
		}
	})
	t.Run("UnknownCommandListsTheValidOnes", func(t *testing.T) {
		reply := b.Send(t, "alice", "/frobnicate")
		if !strings.Contains(reply, "Unknown command /frobnicate") || !strings.Contains(reply, "/status") ||
			!strings.Contains(reply, "/approve [id|number]") || strings.Contains(reply, "/update_all") {
			t.Errorf("regular list = %q", reply)
		}
		reply = b.Send(t, "console", "/frobnicate")
		if !strings.Contains(reply, "/update_all") || !strings.Contains(reply, "/start <agent-id> [key=value ...]") ||
			!strings.Contains(reply, "/stop [agent-id]") {
			t.Errorf("admin list = %q", reply)
		}
		for _, text := range []string{"/help", "/start"} {
			if reply := b.Send(t, "alice", text); !strings.Contains(reply, "/inject <message>") {
				t.Errorf("%s = %q, want the list", text, reply)
			}
		}
	})
	t.Run("StartKeysAreChecked", func(t *testing.T) {
		reply := b.Send(t, "console", "/start assistant colour=blue")
		if !strings.Contains(reply, `Unknown key "colour"`) || !strings.Contains(reply, "voice_profile, git_identity") {
			t.Errorf("unknown key: %q", reply)
		}
		if reply := b.Send(t, "console", "/start assistant dm=bob"); !strings.Contains(reply, "binds the agent to this DM") {
			t.Errorf("dm key: %q", reply)
		}
		if reply := b.Send(t, "console", "/start assistant llm"); !strings.Contains(reply, "is not key=value") {
			t.Errorf("malformed: %q", reply)
		}
		if reply := b.Send(t, "console", "/start ghost"); !strings.Contains(reply, `agent "ghost" is not in config.json`) {
			t.Errorf("unknown agent: %q", reply)
		}
	})
}

func TestDMStartRefusesADMBoundToAnotherLiveAgent(t *testing.T) {
	t.Parallel()
	b := choirdtest.SetupCommands(t)
	b.D.StandIn(t, "assistant", admin.StartOverrides{}) // holds DM alice
	// alice is regular; the binding rule is an admin DM's, so the
	// console DM takes alice's place here: bind console by starting
	// helper on it directly, then try to start assistant from it.
	d := b.D
	cfg := d.Snapshot().Config
	if _, err := session.CreateSession(context.Background(), d.Pool(), cfg, "helper", admin.StartOverrides{DM: "console"}, d.ConfigVersion(),
		"process"); err != nil {
		t.Fatal(err)
	}
	reply := b.Send(t, "console", "/start assistant")
	if !strings.Contains(reply, "this DM is bound to helper, which is running") {
		t.Errorf("reply = %q", reply)
	}
}

func TestDMSessionCommands(t *testing.T) {
	t.Parallel()
	b := choirdtest.SetupCommands(t)
	ctx := context.Background()
	agent := b.D.StandIn(t, "assistant", admin.StartOverrides{})
	q := seam.Queries(b.D.Pool())

	t.Run("CoresCancelCompact", func(t *testing.T) {
		n := func(v int64) *int64 { return &v }
		for _, st := range []rpc.ReportStatusRequest{
			{Lane: "core:research", State: "CORE_REASONING", Step: "search", Steps: 3, Progress: "found 3\nsources",
				BudgetRemaining: wire.Budget{Steps: n(47), ToolCalls: n(190), TimeMS: n(60_000)}},
			{Lane: "core:old", State: "CORE_COMPLETED", Steps: 9},
			{Lane: "edge", State: "EDGE_IDLE", BudgetRemaining: wire.Budget{ToolCalls: n(1900), Tokens: n(4_000_000)}},
		} {
			if _, err := agent.Client.ReportStatus(ctx, st); err != nil {
				t.Fatal(err)
			}
		}
		reply := b.Send(t, "alice", "/cores")
		if want := "Core jobs of assistant:\nCore job research: reasoning, 3 steps, at search\n  Last: found 3\nsources\n" +
			"  Budget left: 47 steps, 190 tool calls, 1m0s\nFinished: old (completed)"; reply != want {
			t.Errorf("/cores = %q, want %q", reply, want)
		}
		reply = b.Send(t, "alice", "/cancel old")
		if !strings.Contains(reply, `no running core job "old"`) || !strings.Contains(reply, "running: research") {
			t.Errorf("/cancel of a finished job = %q", reply)
		}
		if reply = b.Send(t, "alice", "/cancel research"); !strings.Contains(reply, "Cancel sent") {
			t.Fatalf("/cancel = %q", reply)
		}
		if p := agent.Next(t, rpc.PushCancel); p.Cancel.Scope != rpc.CancelCore || p.Cancel.JobName != "research" {
			t.Errorf("cancel push = %+v", p.Cancel)
		}
		b.Send(t, "alice", "/cancel edge")
		if p := agent.Next(t, rpc.PushCancel); p.Cancel.Scope != rpc.CancelEdge {
			t.Errorf("edge cancel push = %+v", p.Cancel)
		}
		if reply = b.Send(t, "alice", "/compact"); !strings.Contains(reply, "Compaction requested") {
			t.Fatalf("/compact = %q", reply)
		}
		agent.Next(t, rpc.PushCompact)
		reply = b.Send(t, "alice", "/status")
		for _, want := range []string{"\ncore job old: completed after 9 steps\n",
			"\ncore job research: reasoning, 3 steps, at search, budget left 47 steps, 190 tool calls, 1m0s\n  last: found 3 sources",
			"\nedge: idle, budget left 1900 tool calls, 4000000 tokens"} {
			if !strings.Contains(reply, want) {
				t.Errorf("/status = %q, want %q in it", reply, want)
			}
		}
	})

	t.Run("ModelSetReachesDynamicConfig", func(t *testing.T) {
		latest, err := q.ConfigVersionLatest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first, err := agent.Client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var dc rpc.DynamicConfig
		if err := json.Unmarshal(first.Config, &dc); err != nil || dc.LLM != "local" {
			t.Fatalf("first fetch: llm %q, %v", dc.LLM, err)
		}
		if up, _ := agent.Client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: latest}); len(up.Config) != 0 {
			t.Fatalf("an up-to-date agent got the config again")
		}
		reply := b.Send(t, "alice", "/model llm nope")
		if !strings.Contains(reply, `no model "nope"`) || !strings.Contains(reply, "models: big, local") {
			t.Errorf("unknown model = %q", reply)
		}
		if reply = b.Send(t, "alice", "/model llm big"); !strings.Contains(reply, "now uses model big") {
			t.Fatalf("/model llm big = %q", reply)
		}
		agent.Next(t, rpc.PushConfigChanged)
		got, err := agent.Client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: latest})
		if err != nil {
			t.Fatal(err)
		}
		dc = rpc.DynamicConfig{}
		if err := json.Unmarshal(got.Config, &dc); err != nil || dc.LLM != "big" || got.ConfigVersion != latest {
			t.Fatalf("after /model llm big: version %d, llm %q, %v (%s)", got.ConfigVersion, dc.LLM, err, got.Config)
		}
		if again, _ := agent.Client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: latest}); len(again.Config) != 0 {
			t.Errorf("the override was returned twice")
		}
		if reply = b.Send(t, "alice", "/voice loud"); !strings.Contains(reply, "voice profiles: bright, calm") {
			t.Errorf("unknown voice = %q", reply)
		}
		b.Send(t, "alice", "/voice calm")
		got, _ = agent.Client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: latest})
		dc = rpc.DynamicConfig{}
		if err := json.Unmarshal(got.Config, &dc); err != nil || dc.VoiceProfile != "calm" || dc.LLM != "big" {
			t.Errorf("after /voice calm: %+v %v", dc, err)
		}
		reply = b.Send(t, "alice", "/model")
		if !strings.Contains(reply, "model: big (switched for this session)") || !strings.Contains(reply, "voice profile: calm") {
			t.Errorf("/model = %q", reply)
		}
		// The helper is not running: its defaults, and no override.
		if reply = b.Send(t, "console", "/model helper"); !strings.Contains(reply, "not running") {
			t.Errorf("/model helper = %q", reply)
		}
		if reply = b.Send(t, "console", "/model helper llm big"); !strings.Contains(reply, "no live session") {
			t.Errorf("/model helper llm big = %q", reply)
		}
	})

	t.Run("RedeliveredCommandRunsOnce", func(t *testing.T) {
		before, err := q.SessionDynamicState(ctx, uuid.MustParse(agent.SessionID))
		if err != nil {
			t.Fatal(err)
		}
		cmd := b.Command(t, "alice", "/model llm local")
		if reply := b.Run(t, cmd); !strings.Contains(reply, "now uses model local") {
			t.Fatalf("first = %q", reply)
		}
		if reply := b.Run(t, cmd); !strings.Contains(reply, "already received") {
			t.Errorf("redelivered = %q", reply)
		}
		after, _ := q.SessionDynamicState(ctx, uuid.MustParse(agent.SessionID))
		if after.OverrideRev != before.OverrideRev+1 {
			t.Errorf("override rev %d -> %d: the command ran %d times", before.OverrideRev, after.OverrideRev,
				after.OverrideRev-before.OverrideRev)
		}
		// A command that only reads runs again.
		read := b.Command(t, "alice", "/model")
		if r1, r2 := b.Run(t, read), b.Run(t, read); r1 != r2 || strings.Contains(r2, "already received") {
			t.Errorf("read twice: %q, %q", r1, r2)
		}
	})

	t.Run("EventsOfAFreshSession", func(t *testing.T) {
		if reply := b.Send(t, "alice", "/events"); !strings.Contains(reply, "has no events yet") {
			t.Errorf("/events = %q", reply)
		}
		if reply := b.Send(t, "alice", "/events 9999"); !strings.Contains(reply, "n is a number from 1 to 500") {
			t.Errorf("/events 9999 = %q", reply)
		}
	})
}

func TestDMApprovalSelection(t *testing.T) {
	t.Parallel()
	b := choirdtest.SetupCommands(t)
	ctx := context.Background()
	assistant := b.D.StandIn(t, "assistant", admin.StartOverrides{})
	helper := b.D.StandIn(t, "helper", admin.StartOverrides{})
	d := b.D
	status := func(id string) string {
		t.Helper()
		a, err := d.Approvals().Show(ctx, control.Scope{Admin: true}, id)
		if err != nil {
			t.Fatal(err)
		}
		return a.Status
	}

	t.Run("NoneIsPending", func(t *testing.T) {
		if reply := b.Send(t, "alice", "/approve"); reply != "No approval is pending." {
			t.Errorf("reply = %q", reply)
		}
	})
	// helper's approval is pending throughout: alice never sees it.
	other := choirdtest.RequestApproval(t, helper, "helper deletes logs")
	t.Run("OnlyOneIsPicked", func(t *testing.T) {
		id := choirdtest.RequestApproval(t, assistant, "assistant runs tests")
		if reply := b.Send(t, "alice", "/approve"); !strings.HasPrefix(reply, "Approved: assistant runs tests") {
			t.Errorf("reply = %q", reply)
		}
		if s := status(id); s != "approved" {
			t.Errorf("status = %s", s)
		}
		if s := status(other); s != "pending" {
			t.Errorf("helper's approval is %s", s)
		}
	})
	t.Run("AlwaysOnlyWhereTheKindRemembers", func(t *testing.T) {
		id := choirdtest.RequestApproval(t, assistant, "assistant runs tests once")
		reply := b.Send(t, "alice", "/always "+id)
		if !strings.Contains(reply, "is for its one request only") || !strings.Contains(reply, "/approve") {
			t.Errorf("reply = %q, want a refusal naming /approve", reply)
		}
		if s := status(id); s != "pending" {
			t.Errorf("status after a refused /always = %s, want pending", s)
		}
		if reply := b.Send(t, "alice", "/reject "+id); !strings.HasPrefix(reply, "Rejected") {
			t.Errorf("reply = %q", reply)
		}
	})
	t.Run("SeveralGiveANumberedList", func(t *testing.T) {
		ids := []string{choirdtest.RequestApproval(t, assistant, "one"), choirdtest.RequestApproval(t, assistant, "two"), choirdtest.RequestApproval(t, assistant, "three")}
		reply := b.Send(t, "alice", "/reject")
		if !strings.Contains(reply, "3 approvals are pending") || !strings.Contains(reply, "2. assistant: two") ||
			strings.Contains(reply, "helper") {
			t.Fatalf("reply = %q", reply)
		}
		if reply = b.Send(t, "alice", "/reject 2"); !strings.HasPrefix(reply, "Rejected: two") {
			t.Errorf("/reject 2 = %q", reply)
		}
		if status(ids[1]) != "rejected" || status(ids[0]) != "pending" || status(ids[2]) != "pending" {
			t.Errorf("statuses: %s %s %s", status(ids[0]), status(ids[1]), status(ids[2]))
		}
		reply = b.Send(t, "alice", "/approve 2")
		if !strings.Contains(reply, "Number 2 (two) is no longer pending: it was already rejected by telegram:alice") {
			t.Errorf("stale number = %q", reply)
		}
		if reply = b.Send(t, "alice", "/approve 7"); !strings.Contains(reply, "there is no number 7") {
			t.Errorf("out of range = %q", reply)
		}
		if reply = b.Send(t, "bob", "/approve 1"); !strings.Contains(reply, "No numbered list was shown in this chat") {
			t.Errorf("another DM's list = %q", reply)
		}
		if reply = b.Send(t, "alice", "/approve 3"); !strings.HasPrefix(reply, "Approved: three") {
			t.Errorf("/approve 3 = %q", reply)
		}
		// /approvals shows a fresh list, which numbers anew.
		reply = b.Send(t, "alice", "/approvals")
		if !strings.Contains(reply, "1. assistant: one") || strings.Contains(reply, "2.") {
			t.Errorf("/approvals = %q", reply)
		}
		if reply = b.Send(t, "alice", "/approve 1"); !strings.HasPrefix(reply, "Approved: one") {
			t.Errorf("/approve 1 = %q", reply)
		}
	})
	t.Run("ByIDAndMalformed", func(t *testing.T) {
		if reply := b.Send(t, "alice", "/approve "+other); !choirdtest.Refused(reply) || !strings.Contains(reply, "belongs to agent helper") {
			t.Errorf("another agent's approval = %q", reply)
		}
		if reply := b.Send(t, "alice", "/approve not-an-id"); !strings.Contains(reply, "neither an approval id nor a number") {
			t.Errorf("malformed = %q", reply)
		}
		if reply := b.Send(t, "alice", "/approve 00000000-0000-4000-8000-000000000000"); !strings.Contains(reply, "no such approval") {
			t.Errorf("unknown id = %q", reply)
		}
		// The admin DM decides any agent's, and a second decision is
		// answered with the first one's outcome.
		if reply := b.Send(t, "console", "/approve "+other); !strings.HasPrefix(reply, "Approved: helper deletes logs") {
			t.Errorf("admin = %q", reply)
		}
		if reply := b.Send(t, "console", "/reject "+other); !strings.HasPrefix(reply, "already approved") {
			t.Errorf("second decision = %q", reply)
		}
	})
	t.Run("ReplyToTheRequestMessage", func(t *testing.T) {
		id := choirdtest.RequestApproval(t, assistant, "reply target")
		choirdtest.RequestApproval(t, assistant, "bystander")
		// The notification's Telegram message id, as the delivery worker
		// records it after sending.
		if _, err := d.Pool().Exec(ctx, `UPDATE choir_control.outbox SET sent_ids = '{4242}' WHERE approval_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		cmd := b.Command(t, "alice", "/approve")
		cmd.ReplyToMessageID = 4242
		if reply := b.Run(t, cmd); !strings.HasPrefix(reply, "Approved: reply target") {
			t.Errorf("reply-to = %q", reply)
		}
		cmd = b.Command(t, "alice", "/reject")
		cmd.ReplyToMessageID = 99
		if reply := b.Run(t, cmd); !strings.Contains(reply, "not an approval request") {
			t.Errorf("reply to another message = %q", reply)
		}
	})
}

func TestDMUpdateAllReportsEachAgent(t *testing.T) {
	t.Parallel()
	b := choirdtest.SetupCommands(t)
	reply := b.Send(t, "console", "/update_all")
	if !strings.Contains(reply, "Updating 2 agents") {
		t.Fatalf("reply = %q", reply)
	}
	notes := b.TakeNotes()
	want := []string{"[1/2] assistant: failed", "[2/2] helper: failed", "update-all done: 0 redeployed, 0 built, 0 skipped, 2 failed."}
	if len(notes) != len(want) {
		t.Fatalf("notes = %q", notes)
	}
	for i, w := range want {
		if !strings.Contains(notes[i], w) {
			t.Errorf("note %d = %q, want %q", i, notes[i], w)
		}
	}
	// The spec's spelling, for a front-end that keeps the hyphen.
	alias := b.Command(t, "console", "/update_all")
	alias.Name = "update-all"
	if reply := b.Run(t, alias); !strings.Contains(reply, "Updating 2 agents") {
		t.Errorf("/update-all alias = %q", reply)
	}
	b.TakeNotes()
}
