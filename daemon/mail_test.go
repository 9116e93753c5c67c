package daemon_test

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
	"github.com/choirhq/choir/rpc/admin"
)

// mailModel is the model of TestMailWakesAgentOnce: told of new mail, it
// reads the message with choir.email.receive; it counts the notices it was
// given per UID, and keeps what the tool returned.
type mailModel struct {
	mu      sync.Mutex
	notices map[string]int
	read    []string
}

var noticeUID = regexp.MustCompile(`\[new mail on primary, folder INBOX, uid (\d+)\]`)

func (m *mailModel) respond(_ context.Context, r *llmtest.Request) llmtest.Step {
	m.mu.Lock()
	defer m.mu.Unlock()
	last := r.Last()
	if last.Role == "tool" {
		m.read = append(m.read, last.Content)
		return llmtest.Text("You have mail from Bob.")
	}
	if u := noticeUID.FindStringSubmatch(last.Content); last.Role == "user" && u != nil {
		m.notices[u[1]]++
		return llmtest.ToolCalls(llmtest.Call{Name: "choir.email.receive", Arguments: fmt.Sprintf(`{"uid": %s}`, u[1])})
	}
	return llmtest.Text("ok")
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
	d := startChoird(t, choirdtest.Options{ModelEndpoint: llm.BaseURL(),
		Daemon: daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent")},
		Edit: func(cfg *config.Config, s config.Secrets) {
			fastHeartbeat(cfg, s)
			acct := srv.Account("agent@choir.test")
			acct.Secret, acct.Wake = "mail-primary", true
			cfg.EmailAccounts = map[string]config.EmailAccount{"primary": acct}
			s["mail-primary"] = "mail-pw-5e2b"
		}})
	defer func() { d.StopAgents(t) }()
	if code, _, errs := choirctl(t, d.Home, "agent", "start", "assistant", "--dm", "console", "--email", "primary"); code != 0 {
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
