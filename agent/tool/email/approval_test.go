package email_test

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

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
