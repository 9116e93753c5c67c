package email_test

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/agent/tool/email"
	"github.com/choirhq/choir/agent/tool/tooltest"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
)

// bigMail is a message with a text body and one attachment of n bytes.
func bigMail(i, n int) []byte {
	att := base64.StdEncoding.EncodeToString(bytes.Repeat([]byte{byte('a' + i)}, n))
	var b strings.Builder
	fmt.Fprintf(&b, "From: s%d@ext.test\r\nTo: agent@choir.test\r\nSubject: big %d\r\nMessage-ID: <b%d@ext.test>\r\n"+
		"MIME-Version: 1.0\r\nContent-Type: multipart/mixed; boundary=XX\r\n\r\n--XX\r\nContent-Type: text/plain\r\n\r\n"+
		"body of %d\r\n--XX\r\nContent-Type: application/octet-stream\r\nContent-Disposition: attachment; filename=\"f%d.bin\"\r\n"+
		"Content-Transfer-Encoding: base64\r\n\r\n", i, i, i, i, i)
	for len(att) > 76 {
		b.WriteString(att[:76] + "\r\n")
		att = att[76:]
	}
	b.WriteString(att + "\r\n--XX--\r\n")
	return []byte(b.String())
}

type cappedOut struct {
	NextBeforeUID uint32   `json:"next_before_uid"`
	NotRead       []uint32 `json:"not_read"`
	Note          string   `json:"note"`
	Messages      []struct {
		UID         uint32 `json:"uid"`
		Subject     string `json:"subject"`
		Text        string `json:"text"`
		Cut         string `json:"cut"`
		Attachments []struct {
			Name    string `json:"name"`
			Path    string `json:"path"`
			Skipped string `json:"skipped"`
		} `json:"attachments"`
	} `json:"messages"`
}

// TestReceiveCapsWhatItReads delivers messages larger than the
// per-message cap, more than the page's cap in all: a message is read up
// to its cap and says so (its cut attachment is not saved as if whole);
// the messages past the page's cap are not read and are named, with the
// paging to reach them.
func TestReceiveCapsWhatItReads(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	acct := srv.Account("agent@choir.test")
	cfg := email.Config{Secret: acct.Secret, MaxMessageBytes: 40 << 10, MaxPageBytes: 100 << 10,
		AccountFunc: func() (string, config.EmailAccount, bool) { return "primary", acct, true },
		Logger:      slog.New(slog.DiscardHandler)}
	b := tooltest.Setup(t, builtin.Config{Tools: email.Tools(cfg)})
	b.Env.SecretFunc = func(name string) (string, bool) { return password, name == acct.Secret }
	var uids []uint32
	for i := 1; i <= 4; i++ {
		uids = append(uids, uint32(srv.Deliver(t, "agent@choir.test", "INBOX", bigMail(i, 45<<10))))
	}
	r := b.MustCall(t, email.NameReceive, `{"limit": 4, "mark_seen": false}`)
	out := tooltest.Output[cappedOut](t, r)
	t.Logf("%s", r.Output)
	if len(out.Messages) == 0 || len(out.Messages) >= 4 {
		t.Fatalf("read %d messages of 4 at %d bytes each under a page cap of 100 KiB", len(out.Messages), len(bigMail(1, 45<<10)))
	}
	for _, m := range out.Messages {
		if !strings.Contains(m.Cut, "bytes") || !strings.Contains(m.Cut, "cap") {
			t.Errorf("message %d over the per-message cap does not say it was cut: %+v", m.UID, m)
		}
		if m.Text != fmt.Sprintf("body of %s", strings.TrimPrefix(m.Subject, "big ")) {
			t.Errorf("message %d: text %q, want its body, which is before the cut", m.UID, m.Text)
		}
		for _, a := range m.Attachments {
			if a.Path != "" || a.Skipped == "" {
				t.Errorf("message %d: a cut attachment was saved as if whole: %+v", m.UID, a)
			}
		}
	}
	last := out.Messages[len(out.Messages)-1].UID
	if len(out.NotRead) == 0 || out.NextBeforeUID != last || !strings.Contains(out.Note, "cap") {
		t.Errorf("the messages past the page's cap: not_read %v, next_before_uid %d (want %d), note %q",
			out.NotRead, out.NextBeforeUID, last, out.Note)
	}
	// A message under the cap is read whole.
	srv.Deliver(t, "agent@choir.test", "INBOX", bigMail(9, 1000))
	r = b.MustCall(t, email.NameReceive, `{"limit": 1, "mark_seen": false}`)
	if out := tooltest.Output[cappedOut](t, r); len(out.Messages) != 1 || out.Messages[0].Cut != "" ||
		len(out.Messages[0].Attachments) != 1 || out.Messages[0].Attachments[0].Path == "" {
		t.Errorf("a small message: %s", r.Output)
	}
}

// TestAttachmentFIFORefused attaches a FIFO in the workspace: the send is
// refused at once, naming the path, instead of blocking the tool on a
// pipe nobody writes.
func TestAttachmentFIFORefused(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	b := setup(t, srv, srv.Account("agent@choir.test"), nil)
	fifo := filepath.Join(b.WS, "pipe")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan tool.Result, 1)
	go func() {
		r, _ := b.Call(t, email.NameSend, `{"to": ["agent@choir.test"], "subject": "s", "text": "t", "attachments": ["pipe"]}`)
		done <- r
	}()
	var r tool.Result
	select {
	case r = <-done:
	case <-time.After(20 * time.Second):
		// Release the blocked open, so that the test ends.
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		<-done
		t.Fatal("choir.email.send blocked on a FIFO attachment")
	}
	if r.Status != tool.StatusError || !strings.Contains(string(r.JSON()), `not a regular file`) ||
		!strings.Contains(string(r.JSON()), "pipe") {
		t.Errorf("a FIFO attachment: %s", r.JSON())
	}
	if !strings.Contains(b.log.String(), "pipe") {
		t.Errorf("the refusal is not logged:\n%s", b.log.String())
	}
	if len(srv.Sent()) != 0 {
		t.Errorf("a mail was sent")
	}
}
