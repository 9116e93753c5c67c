package mailwatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// mailModel is the model of TestMailWakesAgentOnce: told of new mail, it
// reads the message with choir.email.receive; it counts the notices it was
// given per UID, and keeps what the tool returned.
type mailModel struct {
	mu      sync.Mutex
	notices map[string]int
	read    []string
	probe   *string
}

// secretProbe is what the model runs in choir.exec after its first read:
// every environment and command line it can see, and its own environment.
const secretProbe = `for p in /proc/[0-9]*; do echo "== $p"; cat $p/environ $p/cmdline 2>/dev/null | tr '\0' '\n'; done; echo "== env"; env`

var noticeUID = regexp.MustCompile(`New mail on account primary, folder INBOX, uid (\d+)\.`)

func (m *mailModel) respond(_ context.Context, r *llmtest.Request) llmtest.Step {
	m.mu.Lock()
	defer m.mu.Unlock()
	last := r.Last()
	if u := noticeUID.FindStringSubmatch(last.Content); u != nil {
		m.notices[u[1]]++
		return llmtest.ToolCalls(llmtest.Call{Name: "choir.email.receive", Arguments: fmt.Sprintf(`{"uid": %s}`, u[1])})
	}
	if last.Role == "tool" && strings.Contains(last.Content, "hello from bob") {
		m.read = append(m.read, last.Content)
		if len(m.read) == 1 {
			args, _ := json.Marshal(map[string]any{"command": secretProbe})
			return llmtest.ToolCalls(llmtest.Call{Name: "choir.exec", Arguments: string(args)})
		}
		return llmtest.Text("You have mail from Bob.")
	}
	if last.Role == "tool" {
		c := last.Content
		m.probe = &c
		return llmtest.Text("You have mail from Bob.")
	}
	return llmtest.Text("ok")
}

func (m *mailModel) probed() (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.probe == nil {
		return "", false
	}
	return *m.probe, true
}

func (m *mailModel) state() (map[string]int, []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := map[string]int{}
	for k, v := range m.notices {
		n[k] = v
	}
	return n, append([]string(nil), m.read...)
}

// TestMailWakesAgentOnce runs the real agent on an account with wake: a
// message delivered to the IMAP server reaches the agent once, through the
// inbox, as a message that starts its turn; the agent reads it with
// choir.email.receive, whose secret choird handed it; after choird
// restarts, the message is not announced again, and the next one is, once.
func TestMailWakesAgentOnce(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", "mail-pw-5e2b")
	model := &mailModel{notices: map[string]int{}}
	llm := llmtest.NewServer(t)
	llm.SetResponder(model.respond)
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{ModelEndpoint: llm.BaseURL(),
		Daemon: daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent")},
		Edit: func(cfg *config.Config, s config.Secrets) {
			choirdtest.FastHeartbeat(cfg, s)
			acct := srv.Account("agent@choir.test")
			acct.Secret, acct.Wake, acct.WakeFrom = "mail-primary", true, []string{"@ext.test"}
			cfg.EmailAccounts = map[string]config.EmailAccount{"primary": acct}
			s["mail-primary"] = "mail-pw-5e2b"
			// The probe runs in the lane that read the mail: allowed.
			ag := cfg.Agents["assistant"]
			ag.UntrustedInput.Allow = []string{tool.NameExec}
			cfg.Agents["assistant"] = ag
		}})
	defer func() { d.StopAgents(t) }()
	if code, _, errs := choirctltest.Run(t, d.Home, "agent", "start", "assistant", "--dm", "console", "--email", "primary"); code != 0 {
		t.Fatalf("start: %s", errs)
	}
	d.WaitState(t, "assistant", admin.AgentActive)
	choirdtest.WaitFor(t, "the mail watch", d.Logs, func() bool { return strings.Contains(d.Logs.String(), "mail watch ready") })

	raw := func(subject string) []byte {
		return []byte("From: Bob <bob@ext.test>\r\nTo: agent@choir.test\r\nSubject: " + subject + "\r\n\r\nhello from bob: " + subject + "\r\n")
	}
	first := fmt.Sprint(srv.Deliver(t, "agent@choir.test", "INBOX", raw("first")))
	choirdtest.WaitFor(t, "the agent reading the first mail", d.Logs, func() bool {
		_, read := model.state()
		return len(read) == 1
	})
	if _, read := model.state(); !strings.Contains(read[0], "hello from bob: first") || !strings.Contains(read[0], `"status":"success"`) {
		t.Fatalf("choir.email.receive in the agent returned %s", read[0])
	}
	// choir.exec, in the same agent, finds the account's password in no
	// environment and no command line it can read.
	choirdtest.WaitFor(t, "the probe's result", d.Logs, func() bool { _, ok := model.probed(); return ok })
	out, _ := model.probed()
	report := choirdtest.ProbeReport(t, out, d.Workspace("main"))
	if !strings.Contains(report, "== env") || strings.Contains(report, "mail-pw-5e2b") || strings.Contains(report, "[secret:") {
		t.Errorf("choir.exec's probe found the mail password (or did not run):\n%s", report)
	}
	var delivered bool
	choirdtest.WaitFor(t, "the notice delivered", d.Logs, func() bool {
		err := d.Pool().QueryRow(context.Background(), `SELECT bool_and(delivered_at IS NOT NULL) FROM choir_control.inbox
			WHERE kind = 'mail'`).Scan(&delivered)
		return err == nil && delivered
	})

	d = d.Restart(t)
	d.WaitState(t, "assistant", admin.AgentActive)
	choirdtest.WaitFor(t, "the mail watch after the restart", d.Logs, func() bool {
		return strings.Contains(d.Logs.String(), "mail watch ready")
	})
	second := fmt.Sprint(srv.Deliver(t, "agent@choir.test", "INBOX", raw("second")))
	choirdtest.WaitFor(t, "the agent reading the second mail", d.Logs, func() bool {
		_, read := model.state()
		return len(read) == 2
	})
	notices, _ := model.state()
	if len(notices) != 2 || notices[first] != 1 || notices[second] != 1 {
		t.Errorf("notices per uid: %v, want %s and %s once each", notices, first, second)
	}
	var rows int
	if err := d.Pool().QueryRow(context.Background(), `SELECT count(*) FROM choir_control.inbox WHERE kind = 'mail'`).Scan(&rows); err != nil || rows != 2 {
		t.Errorf("%d mail notices in the inbox (%v), want 2", rows, err)
	}
	if strings.Contains(d.Logs.String(), "mail-pw-5e2b") {
		t.Error("the mail password is in choird's log")
	}
}

// approvalModel is the model of TestMailSendNeedsApproval: asked to send,
// it calls choir.email.send, and calls it again with the same input when
// told to go on; it keeps every tool result, and the result of the send
// Choir made itself once the mail was approved.
type approvalModel struct {
	mu       sync.Mutex
	results  []string
	approved string
}

const approvalSend = `{"to": ["boss@choir.test"], "subject": "Weekly report", "text": "All green."}`

func (m *approvalModel) respond(_ context.Context, r *llmtest.Request) llmtest.Step {
	m.mu.Lock()
	defer m.mu.Unlock()
	last := r.Last()
	switch {
	case last.Role == "tool":
		m.results = append(m.results, last.Content)
		return llmtest.Text("Done what I could.")
	case last.Role == "user" && (strings.Contains(last.Content, "send the weekly report") || strings.Contains(last.Content, "go ahead")):
		return llmtest.ToolCalls(llmtest.Call{Name: "choir.email.send", Arguments: approvalSend})
	case last.Role == "system" && strings.Contains(last.Content, "No new message from the user"):
		for _, msg := range r.Messages {
			if strings.Contains(msg.Content, "Choir ran the approved choir.email.send call") {
				m.approved = msg.Content
			}
		}
		return llmtest.Text("The weekly report went out.")
	}
	return llmtest.Text("ok")
}

func (m *approvalModel) approvedRun() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.approved
}

func (m *approvalModel) result(i int) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if i >= len(m.results) {
		return "", false
	}
	return m.results[i], true
}

var approvalIDRe = regexp.MustCompile(`"approval_id":"([0-9a-f-]{36})"`)

// TestMailSendNeedsApproval runs the real agent on an account with
// require_approval: the first send files an approval and sends nothing;
// once a person approved it, the agent sends it at once, with no message
// from the user, through the real REQUEST_APPROVAL and approval_resolved
// of choird; the model's own call of it afterwards sends nothing more.
func TestMailSendNeedsApproval(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", "mail-pw-71c0")
	srv.AddUser(t, "boss@choir.test", "boss-pw")
	model := &approvalModel{}
	llm := llmtest.NewServer(t)
	llm.SetResponder(model.respond)
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{ModelEndpoint: llm.BaseURL(),
		Daemon: daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent")},
		Edit: func(cfg *config.Config, s config.Secrets) {
			choirdtest.FastHeartbeat(cfg, s)
			acct := srv.Account("agent@choir.test")
			acct.Secret, acct.RequireApproval, acct.Sharing = "mail-primary", true, config.EmailShared
			acct.AllowedRecipients = []string{"@choir.test"}
			cfg.EmailAccounts = map[string]config.EmailAccount{"primary": acct}
			s["mail-primary"] = "mail-pw-71c0"
		}})
	defer func() { d.StopAgents(t) }()
	if code, _, errs := choirctltest.Run(t, d.Home, "agent", "start", "assistant", "--dm", "console", "--email", "primary"); code != 0 {
		t.Fatalf("start: %s", errs)
	}
	d.WaitState(t, "assistant", admin.AgentActive)

	d.PushText(t, "assistant", "send the weekly report")
	var first string
	choirdtest.WaitFor(t, "the first send's result", d.Logs, func() bool { var ok bool; first, ok = model.result(0); return ok })
	m := approvalIDRe.FindStringSubmatch(first)
	if m == nil || !strings.Contains(first, "pending_approval") || len(srv.Sent()) != 0 {
		t.Fatalf("first send: %s (%d sent)", first, len(srv.Sent()))
	}
	if code, out, errs := choirctltest.Run(t, d.Home, "approval", "approve", m[1]); code != 0 {
		t.Fatalf("approve: %s %s", out, errs)
	}
	choirdtest.WaitFor(t, "the approved send, unasked", d.Logs, func() bool { return model.approvedRun() != "" })
	sent := srv.Sent()
	if run := model.approvedRun(); !strings.Contains(run, `"status":"sent"`) || len(sent) != 1 || sent[0].To[0] != "boss@choir.test" {
		t.Fatalf("after approval: %s, sent %+v", run, sent)
	}
	d.PushText(t, "assistant", "go ahead")
	var second string
	choirdtest.WaitFor(t, "the second send's result", d.Logs, func() bool { var ok bool; second, ok = model.result(1); return ok })
	if !strings.Contains(second, `"status":"already_sent"`) || len(srv.Sent()) != 1 {
		t.Fatalf("the model's call after the approved send: %s, %d sent", second, len(srv.Sent()))
	}
}

// TestEmailAccountLeases: a shared account is used by two agents at once,
// neither handed its password; an exclusive one by one agent only, and the
// second is told who holds it.
func TestEmailAccountLeases(t *testing.T) {
	t.Parallel()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(cfg *config.Config, s config.Secrets) {
		solo := config.EmailAccount{SMTPHost: "127.0.0.1", SMTPPort: 2525, IMAPHost: "127.0.0.1", IMAPPort: 1143,
			Sharing: config.EmailExclusive, Secret: "mail-solo", EmailPolicy: config.EmailPolicy{Address: "solo@choir.test"}}
		team := solo
		team.Sharing, team.Secret, team.Address = config.EmailShared, "mail-team", "team@choir.test"
		cfg.EmailAccounts = map[string]config.EmailAccount{"solo": solo, "team": team}
		s["mail-solo"], s["mail-team"] = "pw-solo", "pw-team"
	}})
	ctx := context.Background()
	helper := admin.StartOverrides{Workspace: "other", DM: "second"}

	shared := helper
	shared.Email = "team"
	for _, si := range []*choirdtest.StandIn{d.StandIn(t, "assistant", admin.StartOverrides{Email: "team"}), d.StandIn(t, "helper", shared)} {
		// Both are bound to it; neither gets its password, which choird's
		// mail route uses for them.
		_, err := si.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"mail-team"}})
		if !errors.Is(err, wire.ErrPermissionDenied) || si.Hello.ResourceBindings.Email != "team" {
			t.Fatalf("%s on the shared account: %v %+v, want bound and the password refused", si.AgentID, err, si.Hello.ResourceBindings)
		}
		si.Terminate(t, "done")
	}

	d.StandIn(t, "assistant", admin.StartOverrides{Email: "solo"})
	exclusive := helper
	exclusive.Email = "solo"
	_, _, err := d.Daemon.StartSession(ctx, "helper", exclusive, "process")
	if err == nil || !strings.Contains(err.Error(), "solo") || !strings.Contains(err.Error(), "assistant") {
		t.Fatalf("a second agent on the exclusive account: %v, want it refused naming the account and its holder", err)
	}
}
