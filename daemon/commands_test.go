package daemon

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/dmcmd"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/client"
)

// cmdBundle is a choird without an agent runtime, with two regular DMs
// (alice, bound to assistant; bob, bound to helper), an unbound one
// (nobody) and the admin DM console, driven through its DM command layer.
type cmdBundle struct {
	r       *choirdRun
	c       *dmcmd.Commands
	updates atomic.Int64

	mu    sync.Mutex
	notes []string
}

func setupCommands(t *testing.T) *cmdBundle {
	t.Helper()
	home := lifecycleHomeWith(t, dbtest.NewDatabase(t), func(c *config.Config) {
		c.DMs["alice"] = config.DM{Gateway: "console", UserID: "alice"}
		c.DMs["bob"] = config.DM{Gateway: "console", UserID: "bob"}
		c.DMs["nobody"] = config.DM{Gateway: "console", UserID: "nobody"}
		a := c.Agents["assistant"]
		a.Defaults.DM = "alice"
		c.Agents["assistant"] = a
		h := c.Agents["helper"]
		h.Defaults.DM, h.Defaults.Workspace = "bob", "other"
		c.Agents["helper"] = h
		c.Models["big"] = c.Models["local"]
		c.TTS = map[string]config.TTS{"eleven": {Provider: "elevenlabs", ModelID: "eleven_v2", Endpoint: "http://127.0.0.1:9"}}
		c.VoiceProfiles = map[string]config.VoiceProfile{
			"calm":   {TTS: "eleven", VoiceID: "v-calm", OutputFormat: "mp3_44100_128", VoiceSettings: config.VoiceSettings{Speed: 1}},
			"bright": {TTS: "eleven", VoiceID: "v-bright", OutputFormat: "mp3_44100_128", VoiceSettings: config.VoiceSettings{Speed: 1}},
		}
	})
	r := startChoirdWith(t, home, Options{})
	b := &cmdBundle{r: r}
	b.c = dmcmd.New(dmcmd.Options{Control: r.d.Control, Inbox: r.d.inbox, Pool: r.d.pool, Logger: r.d.logger,
		Notify: func(_ context.Context, cmd gateway.Command, text string) {
			b.mu.Lock()
			defer b.mu.Unlock()
			b.notes = append(b.notes, cmd.DM.Name+": "+text)
		}})
	t.Cleanup(func() { b.c.Wait(); r.kill(t) })
	return b
}

func dmOf(name string) gateway.DM {
	return gateway.DM{Gateway: "console", Name: name, UserID: name, Admin: name == "console"}
}

// command parses text as the gateway does and gives it a fresh update id.
func (b *cmdBundle) command(t *testing.T, dm, text string) gateway.Command {
	t.Helper()
	name, args, rest, ok := gateway.ParseCommand(text, "")
	if !ok {
		t.Fatalf("%q is not a command", text)
	}
	return gateway.Command{DM: dmOf(dm), UpdateID: b.updates.Add(1), ChatID: dmOf(dm).UserID, MessageID: 1000 + b.updates.Load(),
		Name: name, Args: args, Text: rest}
}

func (b *cmdBundle) run(t *testing.T, cmd gateway.Command) string {
	t.Helper()
	reply, err := b.c.Command(context.Background(), cmd)
	if err != nil {
		t.Fatalf("%s: %v", cmd.Name, err)
	}
	return reply
}

// send runs text from dm and returns the reply.
func (b *cmdBundle) send(t *testing.T, dm, text string) string {
	t.Helper()
	return b.run(t, b.command(t, dm, text))
}

// takeNotes waits for the long commands and returns what they sent.
func (b *cmdBundle) takeNotes() []string {
	b.c.Wait()
	b.mu.Lock()
	defer b.mu.Unlock()
	out := b.notes
	b.notes = nil
	return out
}

// fakeAgent is a session started as choird would, with the agent played by
// an rpc client that collects its pushes.
type fakeAgent struct {
	session db.ChoirControlSession
	client  *client.Client
	pushes  chan rpc.Push
}

func (b *cmdBundle) startAgent(t *testing.T, agentID string) *fakeAgent {
	t.Helper()
	return b.startAgentWith(t, agentID, StartOverrides{})
}

// startAgentWith starts a fake agent with overrides, as choirctl agent
// start or an admin's /start would.
func (b *cmdBundle) startAgentWith(t *testing.T, agentID string, o StartOverrides) *fakeAgent {
	t.Helper()
	ctx := context.Background()
	d := b.r.d
	cfg := d.Snapshot().Config
	s, err := control.CreateSession(ctx, d.pool, cfg, agentID, o, d.ConfigVersion(), "process")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := client.New(client.Options{Socket: AgentSocketPath(b.r.home), SessionID: s.Session.SessionID.String(),
		LeaseToken: s.LeaseToken})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.InitHello(ctx, helloRequest(s)); err != nil {
		t.Fatalf("INIT_HELLO: %v", err)
	}
	a := &fakeAgent{session: s.Session, client: cl, pushes: make(chan rpc.Push, 64)}
	pctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		cl.ReceivePushes(pctx, func(p rpc.Push) { a.pushes <- p }) //nolint:errcheck
	}()
	// Empty heartbeats keep the session alive however slow the host:
	// crash detection must not end it under the test.
	var base rpc.Hash
	copy(base[:], s.Session.BaseHash)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		for {
			cl.Heartbeat(pctx, rpc.HeartbeatRequest{BaseRev: s.Session.BaseRev, NewRev: s.Session.BaseRev, //nolint:errcheck
				Patches: []rpc.Event{}, ConfigVersion: d.ConfigVersion(), HashPrev: base, HashNew: base, Timestamp: time.Now()})
			select {
			case <-pctx.Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done; <-hbDone; cl.Close() })
	return a
}

// push waits for the next push of kind, skipping others.
func (a *fakeAgent) push(t *testing.T, kind rpc.PushKind) rpc.Push {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case p := <-a.pushes:
			if p.Kind == kind {
				return p
			}
		case <-deadline:
			t.Fatalf("no %s push", kind)
		}
	}
}

func (a *fakeAgent) requestApproval(t *testing.T, summary string) string {
	t.Helper()
	ctx := client.WithRequestID(context.Background(), "req-"+strings.ReplaceAll(summary, " ", "-"))
	resp, err := a.client.RequestApproval(ctx, rpc.ApprovalRequest{RequestType: "tool:choir.exec", Summary: summary,
		Payload: json.RawMessage(`{"command":"true"}`)})
	if err != nil {
		t.Fatalf("REQUEST_APPROVAL: %v", err)
	}
	return resp.ApprovalID
}

func refused(reply string) bool { return strings.HasPrefix(reply, "Refused") }

// TestDMCommandPermissions runs every command of spec 19.3 from the admin
// DM, from a regular DM on its own agent, and from a regular DM naming
// another agent.
func TestDMCommandPermissions(t *testing.T) {
	t.Parallel()
	b := setupCommands(t)
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
		{name: "schedules", admin: "/schedules assistant", own: "/schedules", other: "/schedules helper"},
		{name: "help", admin: "/help", own: "/help"},
		{name: "start", adminOnly: true, admin: "/start assistant llm=big", own: "/start assistant", other: "/start helper"},
		{name: "update", adminOnly: true, admin: "/update assistant", own: "/update", other: "/update helper"},
		{name: "update_all", adminOnly: true, admin: "/update_all", own: "/update_all", other: "/update_all"},
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
			reply := b.send(t, "console", row.admin)
			if refused(reply) || strings.Contains(reply, "Unknown command") {
				t.Errorf("admin %q refused: %s", row.admin, reply)
			}
			reply = b.send(t, "alice", row.own)
			switch {
			case row.adminOnly && (!refused(reply) || !strings.Contains(reply, "needs an admin DM")):
				t.Errorf("regular %q = %q, want a refusal saying it needs an admin DM", row.own, reply)
			case !row.adminOnly && (refused(reply) || strings.Contains(reply, "Unknown command")):
				t.Errorf("regular %q on its own agent refused: %s", row.own, reply)
			}
			if row.other != "" {
				reply = b.send(t, "alice", row.other)
				want := "this DM controls only agent assistant, not helper"
				if row.adminOnly {
					want = "needs an admin DM"
				}
				if !refused(reply) || !strings.Contains(reply, want) {
					t.Errorf("regular %q naming another agent = %q, want a refusal saying %q", row.other, reply, want)
				}
			}
			for _, n := range b.takeNotes() {
				if strings.Contains(n, "Refused") {
					t.Errorf("long command outcome is a refusal: %s", n)
				}
			}
		})
	}

	t.Run("OwnAgentIDIsRefusedToo", func(t *testing.T) {
		reply := b.send(t, "alice", "/status assistant")
		if !refused(reply) || !strings.Contains(reply, "takes no agent id") {
			t.Errorf("reply = %q", reply)
		}
	})
	t.Run("UnboundDMIsToldSo", func(t *testing.T) {
		for _, text := range []string{"/status", "/model", "/approve", "/cores"} {
			if reply := b.send(t, "nobody", text); !strings.Contains(reply, "No agent is bound to this DM") {
				t.Errorf("%s from an unbound DM = %q", text, reply)
			}
		}
	})
	t.Run("UnknownCommandListsTheValidOnes", func(t *testing.T) {
		reply := b.send(t, "alice", "/frobnicate")
		if !strings.Contains(reply, "Unknown command /frobnicate") || !strings.Contains(reply, "/status") ||
			!strings.Contains(reply, "/approve [id|number]") || strings.Contains(reply, "/update_all") {
			t.Errorf("regular list = %q", reply)
		}
		reply = b.send(t, "console", "/frobnicate")
		if !strings.Contains(reply, "/update_all") || !strings.Contains(reply, "/start <agent-id> [key=value ...]") ||
			!strings.Contains(reply, "/stop [agent-id]") {
			t.Errorf("admin list = %q", reply)
		}
		for _, text := range []string{"/help", "/start"} {
			if reply := b.send(t, "alice", text); !strings.Contains(reply, "/inject <message>") {
				t.Errorf("%s = %q, want the list", text, reply)
			}
		}
	})
	t.Run("StartKeysAreChecked", func(t *testing.T) {
		reply := b.send(t, "console", "/start assistant colour=blue")
		if !strings.Contains(reply, `Unknown key "colour"`) || !strings.Contains(reply, "voice_profile, git_identity") {
			t.Errorf("unknown key: %q", reply)
		}
		if reply := b.send(t, "console", "/start assistant dm=bob"); !strings.Contains(reply, "binds the agent to this DM") {
			t.Errorf("dm key: %q", reply)
		}
		if reply := b.send(t, "console", "/start assistant llm"); !strings.Contains(reply, "is not key=value") {
			t.Errorf("malformed: %q", reply)
		}
		if reply := b.send(t, "console", "/start ghost"); !strings.Contains(reply, `agent "ghost" is not in config.json`) {
			t.Errorf("unknown agent: %q", reply)
		}
	})
}

func TestDMStartRefusesADMBoundToAnotherLiveAgent(t *testing.T) {
	t.Parallel()
	b := setupCommands(t)
	b.startAgent(t, "assistant") // holds DM alice
	// alice is regular; the binding rule is an admin DM's, so the
	// console DM takes alice's place here: bind console by starting
	// helper on it directly, then try to start assistant from it.
	d := b.r.d
	cfg := d.Snapshot().Config
	if _, err := control.CreateSession(context.Background(), d.pool, cfg, "helper", StartOverrides{DM: "console"}, d.ConfigVersion(),
		"process"); err != nil {
		t.Fatal(err)
	}
	reply := b.send(t, "console", "/start assistant")
	if !strings.Contains(reply, "this DM is bound to helper, which is running") {
		t.Errorf("reply = %q", reply)
	}
}

func TestDMSessionCommands(t *testing.T) {
	t.Parallel()
	b := setupCommands(t)
	ctx := context.Background()
	agent := b.startAgent(t, "assistant")
	q := db.New(b.r.d.pool)

	t.Run("CoresCancelCompact", func(t *testing.T) {
		for _, st := range []rpc.ReportStatusRequest{{Lane: "core:research", State: "CORE_REASONING", Step: "search"},
			{Lane: "core:old", State: "CORE_COMPLETED"}} {
			if _, err := agent.client.ReportStatus(ctx, st); err != nil {
				t.Fatal(err)
			}
		}
		reply := b.send(t, "alice", "/cores")
		if !strings.Contains(reply, "research: CORE_REASONING, step search") || strings.Contains(reply, "old") {
			t.Errorf("/cores = %q", reply)
		}
		reply = b.send(t, "alice", "/cancel old")
		if !strings.Contains(reply, `no running core job "old"`) || !strings.Contains(reply, "running: research") {
			t.Errorf("/cancel of a finished job = %q", reply)
		}
		if reply = b.send(t, "alice", "/cancel research"); !strings.Contains(reply, "Cancel sent") {
			t.Fatalf("/cancel = %q", reply)
		}
		if p := agent.push(t, rpc.PushCancel); p.Cancel.Scope != rpc.CancelCore || p.Cancel.JobName != "research" {
			t.Errorf("cancel push = %+v", p.Cancel)
		}
		b.send(t, "alice", "/cancel edge")
		if p := agent.push(t, rpc.PushCancel); p.Cancel.Scope != rpc.CancelEdge {
			t.Errorf("edge cancel push = %+v", p.Cancel)
		}
		if reply = b.send(t, "alice", "/compact"); !strings.Contains(reply, "Compaction requested") {
			t.Fatalf("/compact = %q", reply)
		}
		agent.push(t, rpc.PushCompact)
		if reply = b.send(t, "alice", "/status"); !strings.Contains(reply, "core:research: CORE_REASONING") {
			t.Errorf("/status = %q", reply)
		}
	})

	t.Run("ModelSetReachesDynamicConfig", func(t *testing.T) {
		latest, err := q.ConfigVersionLatest(ctx)
		if err != nil {
			t.Fatal(err)
		}
		first, err := agent.client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var dc rpc.DynamicConfig
		if err := json.Unmarshal(first.Config, &dc); err != nil || dc.LLM != "local" {
			t.Fatalf("first fetch: llm %q, %v", dc.LLM, err)
		}
		if up, _ := agent.client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: latest}); len(up.Config) != 0 {
			t.Fatalf("an up-to-date agent got the config again")
		}
		reply := b.send(t, "alice", "/model llm nope")
		if !strings.Contains(reply, `no model "nope"`) || !strings.Contains(reply, "models: big, local") {
			t.Errorf("unknown model = %q", reply)
		}
		if reply = b.send(t, "alice", "/model llm big"); !strings.Contains(reply, "now uses model big") {
			t.Fatalf("/model llm big = %q", reply)
		}
		agent.push(t, rpc.PushConfigChanged)
		got, err := agent.client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: latest})
		if err != nil {
			t.Fatal(err)
		}
		dc = rpc.DynamicConfig{}
		if err := json.Unmarshal(got.Config, &dc); err != nil || dc.LLM != "big" || got.ConfigVersion != latest {
			t.Fatalf("after /model llm big: version %d, llm %q, %v (%s)", got.ConfigVersion, dc.LLM, err, got.Config)
		}
		if again, _ := agent.client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: latest}); len(again.Config) != 0 {
			t.Errorf("the override was returned twice")
		}
		if reply = b.send(t, "alice", "/voice loud"); !strings.Contains(reply, "voice profiles: bright, calm") {
			t.Errorf("unknown voice = %q", reply)
		}
		b.send(t, "alice", "/voice calm")
		got, _ = agent.client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: latest})
		dc = rpc.DynamicConfig{}
		if err := json.Unmarshal(got.Config, &dc); err != nil || dc.VoiceProfile != "calm" || dc.LLM != "big" {
			t.Errorf("after /voice calm: %+v %v", dc, err)
		}
		reply = b.send(t, "alice", "/model")
		if !strings.Contains(reply, "model: big (switched for this session)") || !strings.Contains(reply, "voice profile: calm") {
			t.Errorf("/model = %q", reply)
		}
		// The helper is not running: its defaults, and no override.
		if reply = b.send(t, "console", "/model helper"); !strings.Contains(reply, "not running") {
			t.Errorf("/model helper = %q", reply)
		}
		if reply = b.send(t, "console", "/model helper llm big"); !strings.Contains(reply, "no live session") {
			t.Errorf("/model helper llm big = %q", reply)
		}
	})

	t.Run("RedeliveredCommandRunsOnce", func(t *testing.T) {
		before, err := q.SessionDynamicState(ctx, agent.session.SessionID)
		if err != nil {
			t.Fatal(err)
		}
		cmd := b.command(t, "alice", "/model llm local")
		if reply := b.run(t, cmd); !strings.Contains(reply, "now uses model local") {
			t.Fatalf("first = %q", reply)
		}
		if reply := b.run(t, cmd); !strings.Contains(reply, "already received") {
			t.Errorf("redelivered = %q", reply)
		}
		after, _ := q.SessionDynamicState(ctx, agent.session.SessionID)
		if after.OverrideRev != before.OverrideRev+1 {
			t.Errorf("override rev %d -> %d: the command ran %d times", before.OverrideRev, after.OverrideRev,
				after.OverrideRev-before.OverrideRev)
		}
		// A command that only reads runs again.
		read := b.command(t, "alice", "/model")
		if r1, r2 := b.run(t, read), b.run(t, read); r1 != r2 || strings.Contains(r2, "already received") {
			t.Errorf("read twice: %q, %q", r1, r2)
		}
	})

	t.Run("EventsOfAFreshSession", func(t *testing.T) {
		if reply := b.send(t, "alice", "/events"); !strings.Contains(reply, "has no events yet") {
			t.Errorf("/events = %q", reply)
		}
		if reply := b.send(t, "alice", "/events 9999"); !strings.Contains(reply, "n is a number from 1 to 500") {
			t.Errorf("/events 9999 = %q", reply)
		}
	})
}

func TestDMApprovalSelection(t *testing.T) {
	t.Parallel()
	b := setupCommands(t)
	ctx := context.Background()
	assistant := b.startAgent(t, "assistant")
	helper := b.startAgent(t, "helper")
	d := b.r.d
	status := func(id string) string {
		t.Helper()
		a, err := d.ApprovalShow(ctx, Scope{Admin: true}, id)
		if err != nil {
			t.Fatal(err)
		}
		return a.Status
	}

	t.Run("NoneIsPending", func(t *testing.T) {
		if reply := b.send(t, "alice", "/approve"); reply != "No approval is pending." {
			t.Errorf("reply = %q", reply)
		}
	})
	// helper's approval is pending throughout: alice never sees it.
	other := helper.requestApproval(t, "helper deletes logs")
	t.Run("OnlyOneIsPicked", func(t *testing.T) {
		id := assistant.requestApproval(t, "assistant runs tests")
		if reply := b.send(t, "alice", "/approve"); !strings.HasPrefix(reply, "Approved: assistant runs tests") {
			t.Errorf("reply = %q", reply)
		}
		if s := status(id); s != "approved" {
			t.Errorf("status = %s", s)
		}
		if s := status(other); s != "pending" {
			t.Errorf("helper's approval is %s", s)
		}
	})
	t.Run("SeveralGiveANumberedList", func(t *testing.T) {
		ids := []string{assistant.requestApproval(t, "one"), assistant.requestApproval(t, "two"), assistant.requestApproval(t, "three")}
		reply := b.send(t, "alice", "/reject")
		if !strings.Contains(reply, "3 approvals are pending") || !strings.Contains(reply, "2. assistant: two") ||
			strings.Contains(reply, "helper") {
			t.Fatalf("reply = %q", reply)
		}
		if reply = b.send(t, "alice", "/reject 2"); !strings.HasPrefix(reply, "Rejected: two") {
			t.Errorf("/reject 2 = %q", reply)
		}
		if status(ids[1]) != "rejected" || status(ids[0]) != "pending" || status(ids[2]) != "pending" {
			t.Errorf("statuses: %s %s %s", status(ids[0]), status(ids[1]), status(ids[2]))
		}
		reply = b.send(t, "alice", "/approve 2")
		if !strings.Contains(reply, "Number 2 (two) is no longer pending: it was already rejected by telegram:alice") {
			t.Errorf("stale number = %q", reply)
		}
		if reply = b.send(t, "alice", "/approve 7"); !strings.Contains(reply, "there is no number 7") {
			t.Errorf("out of range = %q", reply)
		}
		if reply = b.send(t, "bob", "/approve 1"); !strings.Contains(reply, "No numbered list was shown in this chat") {
			t.Errorf("another DM's list = %q", reply)
		}
		if reply = b.send(t, "alice", "/approve 3"); !strings.HasPrefix(reply, "Approved: three") {
			t.Errorf("/approve 3 = %q", reply)
		}
		// /approvals shows a fresh list, which numbers anew.
		reply = b.send(t, "alice", "/approvals")
		if !strings.Contains(reply, "1. assistant: one") || strings.Contains(reply, "2.") {
			t.Errorf("/approvals = %q", reply)
		}
		if reply = b.send(t, "alice", "/approve 1"); !strings.HasPrefix(reply, "Approved: one") {
			t.Errorf("/approve 1 = %q", reply)
		}
	})
	t.Run("ByIDAndMalformed", func(t *testing.T) {
		if reply := b.send(t, "alice", "/approve "+other); !refused(reply) || !strings.Contains(reply, "belongs to agent helper") {
			t.Errorf("another agent's approval = %q", reply)
		}
		if reply := b.send(t, "alice", "/approve not-an-id"); !strings.Contains(reply, "neither an approval id nor a number") {
			t.Errorf("malformed = %q", reply)
		}
		if reply := b.send(t, "alice", "/approve 00000000-0000-4000-8000-000000000000"); !strings.Contains(reply, "no such approval") {
			t.Errorf("unknown id = %q", reply)
		}
		// The admin DM decides any agent's, and a second decision is
		// answered with the first one's outcome.
		if reply := b.send(t, "console", "/approve "+other); !strings.HasPrefix(reply, "Approved: helper deletes logs") {
			t.Errorf("admin = %q", reply)
		}
		if reply := b.send(t, "console", "/reject "+other); !strings.HasPrefix(reply, "already approved") {
			t.Errorf("second decision = %q", reply)
		}
	})
	t.Run("ReplyToTheRequestMessage", func(t *testing.T) {
		id := assistant.requestApproval(t, "reply target")
		assistant.requestApproval(t, "bystander")
		// The notification's Telegram message id, as the delivery worker
		// records it after sending.
		if _, err := d.pool.Exec(ctx, `UPDATE choir_control.outbox SET sent_ids = '{4242}' WHERE approval_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		cmd := b.command(t, "alice", "/approve")
		cmd.ReplyToMessageID = 4242
		if reply := b.run(t, cmd); !strings.HasPrefix(reply, "Approved: reply target") {
			t.Errorf("reply-to = %q", reply)
		}
		cmd = b.command(t, "alice", "/reject")
		cmd.ReplyToMessageID = 99
		if reply := b.run(t, cmd); !strings.Contains(reply, "not an approval request") {
			t.Errorf("reply to another message = %q", reply)
		}
	})
}

func TestDMUpdateAllReportsEachAgent(t *testing.T) {
	t.Parallel()
	b := setupCommands(t)
	reply := b.send(t, "console", "/update_all")
	if !strings.Contains(reply, "Updating 2 agents") {
		t.Fatalf("reply = %q", reply)
	}
	notes := b.takeNotes()
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
	alias := b.command(t, "console", "/update_all")
	alias.Name = "update-all"
	if reply := b.run(t, alias); !strings.Contains(reply, "Updating 2 agents") {
		t.Errorf("/update-all alias = %q", reply)
	}
	b.takeNotes()
}
