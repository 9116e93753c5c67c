package email_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/email"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
	"github.com/choirhq/choir/rpc"
)

// TestApprovalPayloadIsTheWholeMail: what a person is asked to approve
// holds every byte that will be sent: all recipients (a Bcc too, however
// many come before it), the plain and the HTML body, and each
// attachment's path, size and digest; the summary cuts nothing either.
func TestApprovalPayloadIsTheWholeMail(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	acct := srv.Account("agent@choir.test")
	acct.RequireApproval = true
	ap := &approvals{first: map[string]rpc.ApprovalResponse{}, decisions: email.NewDecisions()}
	b := setup(t, srv, acct, ap)
	tooltest.WriteFile(t, filepath.Join(b.WS, "plan.txt"), "the plan", 0o644)
	to := make([]string, 30)
	for i := range to {
		to[i] = "friend" + strings.Repeat("x", 20) + string(rune('a'+i%26)) + "@choir.test"
	}
	in, _ := json.Marshal(map[string]any{"to": to, "bcc": []string{"hidden@choir.test"}, "subject": "s",
		"text": "plain body", "html": "<p>html body</p>", "attachments": []string{"plan.txt"}})
	b.MustCall(t, email.NameSend, string(in))
	if len(ap.reqs) != 1 {
		t.Fatalf("%d approval requests", len(ap.reqs))
	}
	var p struct {
		To, Bcc     []string
		Text, HTML  string
		Attachments []struct {
			Path   string
			Size   int64
			SHA256 string
		}
	}
	if err := json.Unmarshal(ap.reqs[0].Payload, &p); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("the plan"))
	if len(p.To) != 30 || len(p.Bcc) != 1 || p.Text != "plain body" || p.HTML != "<p>html body</p>" ||
		len(p.Attachments) != 1 || p.Attachments[0].SHA256 != hex.EncodeToString(sum[:]) || p.Attachments[0].Size != 8 {
		t.Errorf("the approval payload is not the whole mail: %s", ap.reqs[0].Payload)
	}
	if s := ap.reqs[0].Summary; strings.HasSuffix(s, "...") || !strings.Contains(s, "31 recipient(s), 1 of them by Bcc") {
		t.Errorf("summary %q", s)
	}
}

// TestApprovedMailSendsExactlyWhatWasApproved: the input Choir rebuilds
// from an approved payload (tool.ApprovalInput) sends, under that
// approval, exactly the approved mail and asks nobody again; once sent,
// the model's own call of the first input sends nothing more; and an
// attachment changed since the approval sends nothing.
func TestApprovedMailSendsExactlyWhatWasApproved(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	acct := srv.Account("agent@choir.test")
	acct.RequireApproval = true
	ap := &approvals{first: map[string]rpc.ApprovalResponse{}, decisions: email.NewDecisions()}
	b := setup(t, srv, acct, ap)
	tooltest.WriteFile(t, filepath.Join(b.WS, "plan.txt"), "the plan", 0o644)
	in := `{"to": ["Bob <agent@choir.test>"], "cc": ["agent@choir.test"], "subject": "the plan", "text": "t",
		"html": "<p>t</p>", "attachments": ["plan.txt"]}`
	first := tooltest.Output[sendOut](t, b.MustCall(t, email.NameSend, in))
	if first.Status != "pending_approval" || len(ap.reqs) != 1 {
		t.Fatalf("first call: %+v", first)
	}
	approved := tool.Approved{ID: first.ApprovalID, Tool: email.NameSend, Payload: ap.reqs[0].Payload}
	def, err := b.Reg.Get(email.NameSend)
	if err != nil {
		t.Fatal(err)
	}
	rebuilt, err := def.ApprovedInput(approved.Payload)
	if err != nil {
		t.Fatal(err)
	}
	run := func(input json.RawMessage) sendOut {
		t.Helper()
		if err := def.Validate(input); err != nil {
			t.Fatalf("the rebuilt input %s: %v", input, err)
		}
		r, err := def.Execute(tool.WithApproved(context.Background(), approved), b.Env, input)
		if err != nil {
			t.Fatal(err)
		}
		return tooltest.Output[sendOut](t, r)
	}

	// Changed since the approval: not the approved mail.
	tooltest.WriteFile(t, filepath.Join(b.WS, "plan.txt"), "another plan", 0o644)
	if so := run(rebuilt); so.Status != "pending_approval" || len(srv.Sent()) != 0 {
		t.Fatalf("with the attachment changed: %+v, %d sent", so, len(srv.Sent()))
	}
	tooltest.WriteFile(t, filepath.Join(b.WS, "plan.txt"), "the plan", 0o644)
	asked := len(ap.reqs)
	if so := run(rebuilt); so.Status != "sent" || so.ApprovalID != first.ApprovalID || len(srv.Sent()) != 1 || len(ap.reqs) != asked {
		t.Fatalf("under its approval: %+v, %d sent, %d more requests", so, len(srv.Sent()), len(ap.reqs)-asked)
	}
	if env := srv.Sent()[0]; len(env.To) != 2 || !strings.Contains(string(env.Data), "Subject: the plan") {
		t.Errorf("sent %+v", env)
	}
	ap.set(rpc.ApprovalApproved)
	if so := tooltest.Output[sendOut](t, b.MustCall(t, email.NameSend, in)); so.Status != "already_sent" || len(srv.Sent()) != 1 {
		t.Fatalf("the model's own call after the approved send: %+v, %d sent", so, len(srv.Sent()))
	}
}
