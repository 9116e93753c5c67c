package email_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/agent/tool/email"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
)

// TestSendRunAgainAfterARestart checks choir.email.send as a keyed tool
// (issue 31): a send under an idempotency key goes out with a Message-ID
// made of it; run again after a restart it finds that Message-ID in the
// Sent folder and sends nothing more; run again when the first run never
// sent, it sends once; and when the Sent folder cannot be searched it
// sends nothing and answers in doubt.
func TestSendRunAgainAfterARestart(t *testing.T) {
	t.Parallel()
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	srv.AddUser(t, "bob@choir.test", password)
	b := setup(t, srv, listed(srv.Account("agent@choir.test")), nil)
	def, err := b.Reg.Get(email.NameSend)
	if err != nil {
		t.Fatal(err)
	}
	if def.Idempotency(nil) != tool.IdempotencyKeyed {
		t.Fatalf("choir.email.send is %q, want keyed", def.Idempotency(nil))
	}
	send := func(ctx context.Context, subject string) (tool.Result, sendOut) {
		t.Helper()
		r, err := def.Execute(ctx, b.Env, json.RawMessage(`{"to":["bob@choir.test"],"subject":"`+subject+`","text":"hi"}`))
		if err != nil {
			t.Fatal(err)
		}
		var out sendOut
		json.Unmarshal(r.Output, &out) //nolint:errcheck // checked through its fields
		return r, out
	}
	count := func(subject string) int {
		n := 0
		for _, e := range srv.Sent() {
			if strings.Contains(string(e.Data), "Subject: "+subject) {
				n++
			}
		}
		return n
	}

	first := tool.WithCallKey(context.Background(), "ck-first")
	if r, out := send(first, "one"); r.Status != tool.StatusSuccess || out.MessageID != "<ck-first@choir.test>" {
		t.Fatalf("keyed send: %+v, message id %q", r, out.MessageID)
	}
	if r, out := send(tool.WithRerun(first), "one"); r.Status != tool.StatusSuccess || out.Status != "already_sent" {
		t.Errorf("run again after it went out: %+v %s, want already_sent", r, r.Output)
	}
	if n := count("one"); n != 1 {
		t.Errorf("the mail went out %d times, want once", n)
	}

	never := tool.WithRerun(tool.WithCallKey(context.Background(), "ck-never"))
	if r, out := send(never, "two"); r.Status != tool.StatusSuccess || out.Status != "sent" || count("two") != 1 {
		t.Errorf("run again when the first run never sent: %+v (%d sent), want sent once", out, count("two"))
	}

	noIMAP := listed(srv.Account("agent@choir.test"))
	noIMAP.IMAPHost = ""
	b2 := setup(t, srv, noIMAP, nil)
	def2, _ := b2.Reg.Get(email.NameSend)
	r, err := def2.Execute(tool.WithRerun(tool.WithCallKey(context.Background(), "ck-blind")), b2.Env,
		json.RawMessage(`{"to":["bob@choir.test"],"subject":"three","text":"hi"}`))
	if err != nil || r.Status != tool.StatusInDoubt || count("three") != 0 {
		t.Errorf("run again with no Sent folder to search: %v %+v (%d sent), want in doubt and nothing sent", err, r, count("three"))
	}
}
