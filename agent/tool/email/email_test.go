package email_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/email"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
	"github.com/choirhq/choir/rpc"
)

const password = "correct horse battery staple"

type bundle struct {
	*tooltest.Bundle
	srv  *mailboxtest.Server
	acct config.EmailAccount
	log  *logbuf.Buffer
}

// listed is acct allowed to send to the test servers' domain, so that a
// send needs no approval.
func listed(acct config.EmailAccount) config.EmailAccount {
	acct.AllowedRecipients = []string{"@choir.test"}
	return acct
}

// setup is an agent whose session leased acct, with password as the
// account's secret.
func setup(t *testing.T, srv *mailboxtest.Server, acct config.EmailAccount, ap *approvals) *bundle {
	t.Helper()
	logs := &logbuf.Buffer{}
	cfg := email.Config{Secret: acct.Secret,
		AccountFunc: func() (string, config.EmailAccount, bool) { return "primary", acct, true },
		Logger:      slog.New(slog.NewJSONHandler(logs, nil))}
	if ap != nil {
		cfg.Approvals, cfg.Decisions = ap, ap.decisions
	}
	b := tooltest.Setup(t, builtin.Config{Tools: email.Tools(cfg)})
	b.Env.SecretFunc = func(name string) (string, bool) {
		if name == acct.Secret {
			return password, true
		}
		return "", false
	}
	return &bundle{Bundle: b, srv: srv, acct: acct, log: logs}
}

type sendOut struct {
	Status      string `json:"status"`
	MessageID   string `json:"message_id"`
	ApprovalID  string `json:"approval_id"`
	Attachments []struct {
		Path string `json:"path"`
		Size int64  `json:"size"`
	} `json:"attachments"`
}

type recvOut struct {
	Matching      int    `json:"matching"`
	NextBeforeUID uint32 `json:"next_before_uid"`
	Messages      []struct {
		UID         uint32   `json:"uid"`
		From        string   `json:"from"`
		To          []string `json:"to"`
		Subject     string   `json:"subject"`
		Text        string   `json:"text"`
		Seen        bool     `json:"seen"`
		Attachments []struct {
			Name string `json:"name"`
			Size int    `json:"size"`
			Path string `json:"path"`
		} `json:"attachments"`
	} `json:"messages"`
}

type checkOut struct {
	Folders []struct {
		Name     string `json:"name"`
		Messages uint32 `json:"messages"`
		Unseen   uint32 `json:"unseen"`
	} `json:"folders"`
	Newest []struct {
		UID     uint32 `json:"uid"`
		Subject string `json:"subject"`
		From    string `json:"from"`
		Seen    bool   `json:"seen"`
	} `json:"newest"`
}

func TestSendAndReceive(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	srv.AddUser(t, "bob@choir.test", password)
	b := setup(t, srv, listed(srv.Account("agent@choir.test")), nil)

	pdf := bytes.Repeat([]byte("%PDF-1.4 report\x00\x01\x02"), 500)
	tooltest.WriteFile(t, filepath.Join(b.WS, "out", "report.pdf"), string(pdf), 0o644)
	r := b.MustCall(t, email.NameSend, `{"to": ["Agent <agent@choir.test>"], "cc": ["bob@choir.test"],
		"subject": "Quarterly report", "text": "Hello,\nthe report is attached.", "html": "<p>Hello, <b>the report</b></p>",
		"attachments": ["out/report.pdf"]}`)
	so := tooltest.Output[sendOut](t, r)
	if r.Status != tool.StatusSuccess || so.Status != "sent" || so.MessageID == "" || len(so.Attachments) != 1 || so.Attachments[0].Size != int64(len(pdf)) {
		t.Fatalf("send: %+v %s", r, r.Output)
	}
	if sent := srv.Sent(); len(sent) != 1 || sent[0].From != "agent@choir.test" || len(sent[0].To) != 2 {
		t.Fatalf("the SMTP server got %+v", sent)
	}

	r = b.MustCall(t, email.NameReceive, `{"unseen": true, "from": "agent@choir.test", "subject": "Quarterly"}`)
	ro := tooltest.Output[recvOut](t, r)
	if r.Status != tool.StatusSuccess || ro.Matching != 1 || len(ro.Messages) != 1 {
		t.Fatalf("receive: %+v %s", r, r.Output)
	}
	m := ro.Messages[0]
	if m.Subject != "Quarterly report" || m.Text != "Hello,\nthe report is attached." || len(m.Attachments) != 1 {
		t.Fatalf("message: %+v", m)
	}
	a := m.Attachments[0]
	if a.Name != "report.pdf" || a.Path != fmt.Sprintf("mail/INBOX/%d/report.pdf", m.UID) || a.Size != len(pdf) {
		t.Fatalf("attachment: %+v", a)
	}
	if got := tooltest.ReadFile(t, filepath.Join(b.WS, a.Path)); got != string(pdf) {
		t.Errorf("saved attachment differs from the one sent (%d bytes, want %d)", len(got), len(pdf))
	}

	// An account with a smaller limit keeps the attachment out of the
	// workspace and says why.
	small := srv.Account("agent@choir.test")
	small.MaxAttachmentBytes = 100
	sb := setup(t, srv, small, nil)
	r = sb.MustCall(t, email.NameReceive, `{"subject": "Quarterly", "mark_seen": false}`)
	if !strings.Contains(string(r.Output), fmt.Sprintf(`"skipped":"%d bytes, over the account's limit of 100"`, len(pdf))) {
		t.Errorf("an attachment over the limit: %s", r.Output)
	}

	// Read now: unseen finds nothing, and check counts it read.
	r = b.MustCall(t, email.NameReceive, `{"unseen": true}`)
	if ro := tooltest.Output[recvOut](t, r); ro.Matching != 0 {
		t.Errorf("unseen after reading: %s", r.Output)
	}
	r = b.MustCall(t, email.NameCheck, `{}`)
	co := tooltest.Output[checkOut](t, r)
	// INBOX holds the mail to itself; Sent the server's copy of what it sent.
	if r.Status != tool.StatusSuccess || len(co.Folders) != 2 || co.Folders[0].Messages != 1 || co.Folders[0].Unseen != 0 ||
		co.Folders[1].Name != mailboxtest.SentFolder || co.Folders[1].Messages != 1 ||
		len(co.Newest) != 1 || co.Newest[0].Subject != "Quarterly report" || !co.Newest[0].Seen {
		t.Errorf("check: %s", r.Output)
	}

	// bob got it too, over IMAP with his own login.
	bob := setup(t, srv, srv.Account("bob@choir.test"), nil)
	r = bob.MustCall(t, email.NameCheck, `{"newest": 1}`)
	if co := tooltest.Output[checkOut](t, r); len(co.Folders) != 2 || co.Folders[0].Unseen != 1 || co.Folders[1].Messages != 0 {
		t.Errorf("bob's check: %s", r.Output)
	}
}

func rawMail(i int) []byte {
	return []byte(fmt.Sprintf("From: Sender %d <s%d@ext.test>\r\nTo: agent@choir.test\r\nSubject: note %d\r\n"+
		"Message-ID: <n%d@ext.test>\r\nContent-Type: text/html; charset=utf-8\r\n\r\n<html><body><p>body of %d</p><script>x()</script></body></html>\r\n", i, i, i, i, i))
}

func TestReceivePages(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	b := setup(t, srv, srv.Account("agent@choir.test"), nil)
	for i := 1; i <= 5; i++ {
		srv.Deliver(t, "agent@choir.test", "INBOX", rawMail(i))
	}
	var subjects []string
	before := uint32(0)
	for page := 0; page < 5; page++ {
		in := `{"limit": 2, "mark_seen": false}`
		if before != 0 {
			in = fmt.Sprintf(`{"limit": 2, "mark_seen": false, "before_uid": %d}`, before)
		}
		ro := tooltest.Output[recvOut](t, b.MustCall(t, email.NameReceive, in))
		for _, m := range ro.Messages {
			subjects = append(subjects, m.Subject)
			if m.Seen || m.Text != fmt.Sprintf("body of %s", strings.TrimPrefix(m.Subject, "note ")) {
				t.Errorf("message %+v: want unseen, with its HTML body as text", m)
			}
		}
		if before = ro.NextBeforeUID; before == 0 {
			break
		}
	}
	if got := strings.Join(subjects, ","); got != "note 5,note 4,note 3,note 2,note 1" {
		t.Errorf("pages gave %s", got)
	}
}

// TestSharedAccount is one shared account used by two agents at once: each
// has its own workspace and session, both send from it and read it.
func TestSharedAccount(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "team@choir.test", password)
	acct := listed(srv.Account("team@choir.test"))
	acct.Sharing = config.EmailShared
	one, two := setup(t, srv, acct, nil), setup(t, srv, acct, nil)
	var wg sync.WaitGroup
	for i, b := range []*bundle{one, two} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r, err := b.Call(t, email.NameSend, fmt.Sprintf(`{"to": ["team@choir.test"], "subject": "from agent %d", "text": "hi"}`, i+1))
			if err != nil || r.Status != tool.StatusSuccess {
				t.Errorf("agent %d send: %v %+v", i+1, err, r)
			}
		}()
	}
	wg.Wait()
	for _, b := range []*bundle{one, two} {
		ro := tooltest.Output[recvOut](t, b.MustCall(t, email.NameReceive, `{"mark_seen": false, "subject": "from agent"}`))
		if ro.Matching != 2 {
			t.Errorf("an agent sees %d of the 2 mails sent", ro.Matching)
		}
	}
}

type problem struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Fix     string `json:"fix"`
}

// TestBadInput: each mistake is a result with status error naming it, and
// a log line; the call returns, nothing panics, nothing is sent.
func TestBadInput(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	acct := srv.Account("agent@choir.test")
	acct.AllowedRecipients = []string{"@choir.test", "boss@corp.test"}
	acct.MaxAttachmentBytes = 1000
	b := setup(t, srv, acct, nil)
	tooltest.WriteFile(t, filepath.Join(b.WS, "big.bin"), strings.Repeat("x", 1001), 0o644)
	outside := filepath.Join(t.TempDir(), "secret.txt")
	tooltest.WriteFile(t, outside, "private", 0o644)
	if err := os.Symlink(outside, filepath.Join(b.WS, "link.txt")); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadPort := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	send := func(extra string) string {
		return `{"to": ["bob@choir.test"], "subject": "s", "text": "t"` + extra + `}`
	}
	cases := []struct {
		name, tool, input, code string
		acct                    func(*config.EmailAccount)
		secret                  string
	}{
		{"MissingSecret", email.NameSend, send(""), email.CodeMissingSecret, nil, "-"},
		{"WrongPasswordSMTP", email.NameSend, send(""), "auth_failed", nil, "wrong"},
		{"WrongPasswordIMAP", email.NameReceive, `{}`, "auth_failed", nil, "wrong"},
		{"UnreachableSMTP", email.NameSend, send(""), "server_unreachable", func(a *config.EmailAccount) { a.SMTPPort = deadPort }, ""},
		{"UnreachableIMAP", email.NameCheck, `{}`, "server_unreachable", func(a *config.EmailAccount) { a.IMAPPort = deadPort }, ""},
		{"AttachmentOutside", email.NameSend, send(`, "attachments": ["../secret.txt"]`), email.CodeAttachmentOutside, nil, ""},
		{"AttachmentAbsolute", email.NameSend, send(`, "attachments": ["` + outside + `"]`), email.CodeAttachmentOutside, nil, ""},
		{"AttachmentSymlinkOut", email.NameSend, send(`, "attachments": ["link.txt"]`), email.CodeAttachmentOutside, nil, ""},
		{"AttachmentTooBig", email.NameSend, send(`, "attachments": ["big.bin"]`), email.CodeAttachmentTooLarge, nil, ""},
		{"AttachmentMissing", email.NameSend, send(`, "attachments": ["nope.txt"]`), email.CodeAttachmentUnusable, nil, ""},
		{"RecipientForbidden", email.NameSend, `{"to": ["bob@choir.test"], "bcc": ["eve@evil.test"], "subject": "s", "text": "t"}`, email.CodeRecipientForbidden, nil, ""},
		{"InvalidAddress", email.NameSend, `{"to": ["not an address"], "subject": "s", "text": "t"}`, email.CodeInvalidAddress, nil, ""},
		{"UnknownFolder", email.NameReceive, `{"folder": "Nope"}`, email.CodeFolder, nil, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := acct
			if c.acct != nil {
				c.acct(&a)
			}
			cb := setup(t, srv, a, nil)
			cb.WS = b.WS
			cb.Env.Workspace = b.WS
			switch c.secret {
			case "-":
				cb.Env.SecretFunc = nil
			case "wrong":
				cb.Env.SecretFunc = func(string) (string, bool) { return "wrong password", true }
			}
			r, err := cb.Call(t, c.tool, c.input)
			if err != nil {
				t.Fatalf("call returned an error instead of a result: %v", err)
			}
			p := tooltest.Output[problem](t, r)
			if r.Status != tool.StatusError || p.Error != c.code || p.Message == "" {
				t.Fatalf("got %+v %s, want error %s", r, r.Output, c.code)
			}
			if c.code != email.CodeInvalidAddress && c.code != email.CodeFolder && p.Fix == "" {
				t.Errorf("no fix in %s", r.Output)
			}
			if !strings.Contains(cb.log.String(), `"code":"`+c.code+`"`) {
				t.Errorf("no log line with code %s: %s", c.code, cb.log.String())
			}
			if strings.Contains(string(r.Output)+cb.log.String(), password) {
				t.Errorf("the password leaked into the result or the log")
			}
		})
	}
	if sent := srv.Sent(); len(sent) != 0 {
		t.Errorf("refused sends reached the server: %+v", sent)
	}
}

// approvals stands in for choird's REQUEST_APPROVAL as the agent sees it:
// a request ID seen before is a replay, answered with the first response
// (pending) whatever was decided since; the decision arrives as a push,
// which the test hands to decisions.
type approvals struct {
	mu        sync.Mutex
	first     map[string]rpc.ApprovalResponse
	reqs      []rpc.ApprovalRequest
	decisions *email.Decisions
}

func (a *approvals) RequestApproval(_ context.Context, id string, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := req.Validate(); err != nil {
		return rpc.ApprovalResponse{}, err
	}
	if !rpc.ValidID(id) {
		return rpc.ApprovalResponse{}, fmt.Errorf("request id %q is not valid", id)
	}
	if r, ok := a.first[id]; ok {
		return r, nil
	}
	r := rpc.ApprovalResponse{ApprovalID: fmt.Sprintf("approval-%d", len(a.first)+1), Status: rpc.ApprovalPending}
	a.first[id] = r
	a.reqs = append(a.reqs, req)
	return r, nil
}

// set decides every approval filed so far, as the approval_resolved pushes
// would.
func (a *approvals) set(s rpc.ApprovalStatus) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, r := range a.first {
		a.decisions.Resolve(r.ApprovalID, s)
	}
}

// TestNoRecipientsNeedsApproval: an account that may send to anyone sends
// nothing without a person's approval, require_approval or not.
func TestNoRecipientsNeedsApproval(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	ap := &approvals{first: map[string]rpc.ApprovalResponse{}, decisions: email.NewDecisions()}
	b := setup(t, srv, srv.Account("agent@choir.test"), ap)
	in := `{"to": ["anyone@choir.test"], "subject": "unlisted", "text": "t"}`
	if so := tooltest.Output[sendOut](t, b.MustCall(t, email.NameSend, in)); so.Status != "pending_approval" || len(srv.Sent()) != 0 {
		t.Fatalf("first call: %+v, %d sent", so, len(srv.Sent()))
	}
	unapproved := setup(t, srv, srv.Account("agent@choir.test"), nil)
	r := unapproved.MustCall(t, email.NameSend, in)
	if p := tooltest.Output[problem](t, r); p.Error != email.CodeApprovalNeeded || !strings.Contains(p.Fix, "allowed_recipients") ||
		len(srv.Sent()) != 0 {
		t.Fatalf("with no approval channel: %s, %d sent", r.Output, len(srv.Sent()))
	}
}

func TestRequireApproval(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	acct := listed(srv.Account("agent@choir.test"))
	acct.RequireApproval = true
	ap := &approvals{first: map[string]rpc.ApprovalResponse{}, decisions: email.NewDecisions()}
	b := setup(t, srv, acct, ap)
	in := `{"to": ["agent@choir.test"], "subject": "needs a yes", "text": "t"}`

	so := tooltest.Output[sendOut](t, b.MustCall(t, email.NameSend, in))
	if so.Status != "pending_approval" || so.ApprovalID == "" || len(srv.Sent()) != 0 || len(ap.reqs) != 1 ||
		ap.reqs[0].RequestType != email.NameSend || !strings.Contains(ap.reqs[0].Summary, "needs a yes") {
		t.Fatalf("first call: %+v, %d sent, requests %+v", so, len(srv.Sent()), ap.reqs)
	}
	// Asked again while pending: the same approval, still nothing sent.
	if so2 := tooltest.Output[sendOut](t, b.MustCall(t, email.NameSend, in)); so2.ApprovalID != so.ApprovalID || len(ap.reqs) != 1 {
		t.Fatalf("second call filed another approval: %+v", so2)
	}
	ap.set(rpc.ApprovalApproved)
	if so := tooltest.Output[sendOut](t, b.MustCall(t, email.NameSend, in)); so.Status != "sent" || len(srv.Sent()) != 1 {
		t.Fatalf("after approval: %+v, %d sent", so, len(srv.Sent()))
	}
	if so := tooltest.Output[sendOut](t, b.MustCall(t, email.NameSend, in)); so.Status != "already_sent" || len(srv.Sent()) != 1 {
		t.Fatalf("again after sending: %+v, %d sent", so, len(srv.Sent()))
	}

	// The same input with an attachment that changed after the approval
	// is another mail: it needs its own approval.
	tooltest.WriteFile(t, filepath.Join(b.WS, "a.txt"), "v1", 0o644)
	withFile := `{"to": ["agent@choir.test"], "subject": "file", "text": "t", "attachments": ["a.txt"]}`
	b.MustCall(t, email.NameSend, withFile)
	ap.set(rpc.ApprovalApproved)
	tooltest.WriteFile(t, filepath.Join(b.WS, "a.txt"), "v2 changed", 0o644)
	if so := tooltest.Output[sendOut](t, b.MustCall(t, email.NameSend, withFile)); so.Status != "pending_approval" || len(srv.Sent()) != 1 {
		t.Fatalf("a changed attachment: %+v, %d sent", so, len(srv.Sent()))
	}

	other := `{"to": ["agent@choir.test"], "subject": "a no", "text": "t"}`
	b.MustCall(t, email.NameSend, other)
	ap.set(rpc.ApprovalRejected)
	r := b.MustCall(t, email.NameSend, other)
	if p := tooltest.Output[problem](t, r); p.Error != email.CodeApprovalRejected || len(srv.Sent()) != 1 {
		t.Fatalf("rejected: %s, %d sent", r.Output, len(srv.Sent()))
	}
}

// TestSecretScope: the account's secret reaches the email tools and no
// other tool: no other tool declares it, a tool that asks for it gets
// nothing, and choir.exec's shell finds it in no environment, file or
// process it can read.
func TestSecretScope(t *testing.T) {
	t.Parallel()
	const secretValue = "pw-7f3c9e1d-only-for-mail"
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", secretValue)
	acct := srv.Account("agent@choir.test")
	probe := &probeTool{}
	cfg := email.Config{Secret: acct.Secret, AccountFunc: func() (string, config.EmailAccount, bool) { return "primary", acct, true }}
	b := tooltest.Setup(t, builtin.Config{Tools: append(email.Tools(cfg), probe)})
	b.Env.SecretFunc = func(name string) (string, bool) {
		if name == acct.Secret {
			return secretValue, true
		}
		return "", false
	}

	for _, name := range b.Reg.Names() {
		d, _ := b.Reg.Get(name)
		declares := strings.Contains(strings.Join(d.Runtime().SecretResources, ","), acct.Secret)
		if declares != strings.HasPrefix(name, "choir.email.") {
			t.Errorf("%s declares secret_resources %v", name, d.Runtime().SecretResources)
		}
	}
	// The email tools can use it...
	if r := b.MustCall(t, email.NameCheck, `{"newest": 0}`); r.Status != tool.StatusSuccess {
		t.Fatalf("check with the secret: %+v", r)
	}
	// ...another Go tool asking for it by name gets nothing...
	b.MustCall(t, "test.probe", `{}`)
	if probe.got != "" || probe.ok {
		t.Errorf("the probe tool obtained the mail secret: %q", probe.got)
	}
	// ...and a shell finds it nowhere it can look.
	// Files: every file written since the secret came into play, in the
	// places a process writes to. The script carries the secret only in
	// base64, so that its own command line cannot be what is found.
	tooltest.WriteFile(t, filepath.Join(b.WS, ".marker"), "", 0o644)
	b.MustCall(t, email.NameSend, `{"to": ["agent@choir.test"], "subject": "s", "text": "t"}`)
	script := `printf %s '` + base64.StdEncoding.EncodeToString([]byte(secretValue)) + `' | base64 -d > .pattern
echo "environments and command lines holding it: $( (env; for p in /proc/[0-9]*; do cat $p/environ $p/cmdline 2>/dev/null; echo; done) |
  tr '\0' '\n' | grep -c -F -f .pattern)"
find . /tmp /dev/shm /run /var/tmp ${HOME:-/root} -xdev -type f -newer .marker -size -10M 2>/dev/null | grep -v '/\.pattern$' |
  head -n 20000 | xargs -r grep -a -l -s -F -f .pattern 2>/dev/null | sed 's/^/file holding it: /'; echo done`
	r := b.MustCall(t, tool.NameExec, fmt.Sprintf(`{"command": %q}`, script))
	out := tooltest.Output[struct {
		Output string `json:"output"`
	}](t, r).Output
	if out != "environments and command lines holding it: 0\ndone\n" {
		t.Errorf("choir.exec found the secret (or did not finish): %q", out)
	}
	// The search does find a copy where there is one: in a file, and in
	// an environment.
	tooltest.WriteFile(t, filepath.Join(b.WS, "control.txt"), secretValue, 0o644)
	control := strings.Replace(script, `echo "environments`, `export LEAKED="$(cat .pattern)"; echo "environments`, 1)
	r = b.MustCall(t, tool.NameExec, fmt.Sprintf(`{"command": %q}`, control))
	if !strings.Contains(string(r.Output), "file holding it: ./control.txt") || strings.Contains(string(r.Output), "holding it: 0") {
		t.Errorf("the search missed a copy of the secret: %s", r.Output)
	}
}

type probeTool struct {
	got string
	ok  bool
}

func (p *probeTool) Spec() tool.Spec {
	return tool.Spec{LLM: tool.LLMView{Name: "test.probe", Description: "asks for the mail secret",
		Parameters: json.RawMessage(`{"type": "object"}`)},
		Runtime: tool.Runtime{TimeoutMS: 1000, SideEffect: tool.SideEffectRead, Version: "1.0"}}
}

func (p *probeTool) Execute(_ context.Context, env tool.Env, _ json.RawMessage) (tool.Result, error) {
	p.got, p.ok = env.Secret("mail-secret")
	return tool.SuccessResult("probed", nil), nil
}

// TestRealService sends to and reads from a real account when one is in
// the environment: CHOIR_TEST_EMAIL_ADDRESS, _PASSWORD, _SMTP_HOST,
// _SMTP_PORT, _IMAP_HOST, _IMAP_PORT.
func TestRealService(t *testing.T) {
	addr := os.Getenv("CHOIR_TEST_EMAIL_ADDRESS")
	pw := os.Getenv("CHOIR_TEST_EMAIL_PASSWORD")
	if addr == "" || pw == "" {
		t.Skip("skipped: no real email account in the environment (set CHOIR_TEST_EMAIL_ADDRESS, _PASSWORD, _SMTP_HOST, _SMTP_PORT, _IMAP_HOST, _IMAP_PORT)")
	}
	port := func(k string) int {
		var n int
		fmt.Sscan(os.Getenv(k), &n)
		return n
	}
	acct := config.EmailAccount{SMTPHost: os.Getenv("CHOIR_TEST_EMAIL_SMTP_HOST"), SMTPPort: port("CHOIR_TEST_EMAIL_SMTP_PORT"),
		IMAPHost: os.Getenv("CHOIR_TEST_EMAIL_IMAP_HOST"), IMAPPort: port("CHOIR_TEST_EMAIL_IMAP_PORT"),
		Sharing: config.EmailExclusive, Secret: "real", EmailPolicy: config.EmailPolicy{Address: addr}}
	cfg := email.Config{Secret: "real", AccountFunc: func() (string, config.EmailAccount, bool) { return "real", acct, true }}
	b := tooltest.Setup(t, builtin.Config{Tools: email.Tools(cfg)})
	b.Env.SecretFunc = func(string) (string, bool) { return pw, true }
	subject := fmt.Sprintf("choir real-service test %d", os.Getpid())
	if r := b.MustCall(t, email.NameSend, fmt.Sprintf(`{"to": [%q], "subject": %q, "text": "test"}`, addr, subject)); r.Status != tool.StatusSuccess {
		t.Fatalf("send: %+v %s", r, r.Output)
	}
	if r := b.MustCall(t, email.NameCheck, `{}`); r.Status != tool.StatusSuccess {
		t.Fatalf("check: %+v %s", r, r.Output)
	}
}

// TestReplyIDsBracketed: in_reply_to as choir.email.receive shows it (a
// bare Message-ID) goes out in angle brackets, as RFC 5322 wants and as
// the mail watch's loop guard reads it; one given bracketed is kept.
func TestReplyIDsBracketed(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	b := setup(t, srv, listed(srv.Account("agent@choir.test")), nil)
	for i, id := range []string{"ck-1@choir.test", "<n2@ext.test>"} {
		b.MustCall(t, email.NameSend, fmt.Sprintf(`{"to": ["bob@choir.test"], "subject": "re", "text": "t", "in_reply_to": %q}`, id))
		want := "<" + strings.Trim(id, "<>") + ">"
		data := string(srv.Sent()[i].Data)
		if !strings.Contains(data, "In-Reply-To: "+want+"\r\n") || !strings.Contains(data, "References: "+want+"\r\n") {
			t.Errorf("in_reply_to %q sent as:\n%s", id, data)
		}
	}
}
