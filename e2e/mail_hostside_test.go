package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/ctl"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// TestMailGoesThroughTheGatewayHostSide is issue 34's "the password never
// enters the agent": an agent that choird starts (the process runtime
// hands it the egress gateway) sends with choir.email.send and reads with
// choir.email.receive, and choird does the SMTP and IMAP with the
// account's password through the gateway's mail route; a session of the
// agent asking GET_SECRETS for the account's secret is refused, and the
// secret is not among those its configuration lists.
func TestMailGoesThroughTheGatewayHostSide(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const pw = "mail-pw-hostside"
	mail := mailboxtest.Start(t)
	mail.AddUser(t, "agent@choir.test", pw)
	mail.AddUser(t, "bob@choir.test", "bob-pw")
	mail.Deliver(t, "agent@choir.test", "INBOX", []byte("From: bob@choir.test\r\nTo: agent@choir.test\r\n"+
		"Subject: Lunch on Friday\r\nMessage-ID: <lunch@choir.test>\r\n\r\nShall we meet at noon?\r\n"))

	srv := llmtest.NewServer(t,
		llmtest.ToolCalls(llmtest.Call{Name: "choir.email.send",
			Arguments: `{"to":["bob@choir.test"],"subject":"Hello from the agent","text":"Sent by choird for me."}`}),
		llmtest.ToolCalls(llmtest.Call{Name: "choir.email.receive", Arguments: `{"subject":"Lunch"}`}),
		llmtest.Text("Sent, and Bob asks about lunch."), summaryStep())
	c := choirdtest.Start(t, choirdtest.Options{ModelEndpoint: srv.BaseURL(), FastHeartbeat: true, ReadyTimeout: 2 * time.Minute,
		Daemon: daemon.Options{Runtime: "process", AgentBinary: choirdtest.Binary(t, "cmd/choir-agent")},
		Edit: func(cfg *config.Config, secrets config.Secrets) {
			acct := mail.Account("agent@choir.test")
			acct.Secret, acct.AllowedRecipients = "mail-primary", []string{"@choir.test"}
			cfg.EmailAccounts = map[string]config.EmailAccount{"primary": acct}
			secrets["mail-primary"] = pw
		}})
	sc := control.Scope{Admin: true, Actor: "test"}
	if _, err := c.AgentStart(ctx, sc, "assistant", admin.StartOverrides{Email: "primary"}); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := ctl.Run(ctx, []string{"--home", c.Home, "chat", "assistant", "-m", "mail bob, then read my mail", "--quiet", "500ms"},
		&out, &errb); code != 0 {
		t.Fatalf("choirctl chat exit %d: %s", code, errb.String())
	}
	if _, err := c.AgentStop(ctx, sc, "assistant"); err != nil {
		files, _ := filepath.Glob(filepath.Join(c.Home, "logs", "archive", "*", "*"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if zr, err := gzip.NewReader(bytes.NewReader(b)); err == nil {
				b, _ = io.ReadAll(zr)
			}
			t.Logf("%s:\n%s", f, tail(string(b), 3000))
		}
		t.Fatal(err)
	}

	var sent []mailboxtest.Envelope
	for _, e := range mail.Sent() {
		if strings.Contains(string(e.Data), "Subject: Hello from the agent") {
			sent = append(sent, e)
		}
	}
	if len(sent) != 1 || sent[0].From != "agent@choir.test" || len(sent[0].To) != 1 || sent[0].To[0] != "bob@choir.test" {
		t.Fatalf("the SMTP server got %+v, want the agent's mail to bob once; the tools' results: %q", sent, toolResults(srv.Requests()))
	}
	results := toolResults(srv.Requests())
	if len(results) != 2 || !strings.Contains(results[0], `"status":"sent"`) ||
		!strings.Contains(results[1], "Shall we meet at noon?") {
		t.Fatalf("the tools' results: %q, want the mail sent and Bob's mail read", results)
	}
	var rows int
	if err := c.Pool().QueryRow(ctx, `SELECT count(*) FROM choir_control.mail_sends
		WHERE agent_id = 'assistant' AND account = 'primary' AND status = 'sent'`).Scan(&rows); err != nil || rows != 1 {
		t.Errorf("choird's record of the mails it sent: %d rows (%v), want 1", rows, err)
	}
	for _, line := range strings.Split(c.Logs.String(), "\n") {
		if strings.Contains(line, "secrets handed to agent") && strings.Contains(line, "mail-primary") {
			t.Errorf("choird handed the agent the mail secret: %s", line)
		}
	}

	// A session of the agent on the account asks for the password itself.
	si := c.StandIn(t, "assistant", admin.StartOverrides{Email: "primary"})
	if _, err := si.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"mail-primary"}}); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Errorf("GET_SECRETS of the mail secret: %v, want permission denied", err)
	}
	dc, err := si.Client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var listed rpc.DynamicConfig
	if err := json.Unmarshal(dc.Config, &listed); err != nil {
		t.Fatal(err)
	}
	if slices.Contains(listed.Secrets, "mail-primary") || len(listed.EmailAccounts) != 1 {
		t.Errorf("the dynamic configuration: secrets %v, accounts %d; want the account without its secret", listed.Secrets,
			len(listed.EmailAccounts))
	}
	si.Terminate(t, "done")
}

// toolResults are the tool results the model was shown, in order, each
// once.
func toolResults(reqs []*llmtest.Request) []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range reqs {
		for _, m := range r.Messages {
			if m.Role == "tool" && !seen[m.ToolCallID] {
				seen[m.ToolCallID] = true
				out = append(out, m.Content)
			}
		}
	}
	return out
}
