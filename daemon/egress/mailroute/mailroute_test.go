package mailroute_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/egress"
	"github.com/choirhq/choir/daemon/egress/mailroute"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/mailbox"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
	"github.com/choirhq/choir/sql/seam"
)

const (
	password = "choird-held mail password"
	agentBox = "agent@choir.test"
)

type testBundle struct {
	pool *pgxpool.Pool
	mail *mailboxtest.Server
	h    *mailroute.Handler
	// sessions are the sessions of ada (bound to "primary"), gil (bound
	// to "gated", which needs approval) and bob (no account).
	sessions map[string]uuid.UUID
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.NewPool(t), mail: mailboxtest.Start(t), sessions: map[string]uuid.UUID{}}
	b.mail.AddUser(t, agentBox, password)
	b.mail.AddUser(t, "bob@choir.test", "bob-pw")
	primary := b.mail.Account(agentBox)
	primary.Secret, primary.AllowedRecipients = "mail-primary", []string{"@choir.test"}
	gated := primary
	gated.RequireApproval = true
	cfg := &config.Config{EmailAccounts: map[string]config.EmailAccount{"primary": primary, "gated": gated}}
	secrets := config.Secrets{"mail-primary": password}
	b.h = mailroute.New(mailroute.Options{Pool: b.pool, Config: func() (*config.Config, config.Secrets) { return cfg, secrets }})
	ctx := context.Background()
	q := seam.Queries(b.pool)
	for agent, email := range map[string]string{"ada": "primary", "gil": "gated", "bob": ""} {
		if _, err := q.AgentUpsert(ctx, db.AgentUpsertParams{AgentID: agent, Config: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		tok := make([]byte, 32)
		rand.Read(tok)
		s, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: agent, LeaseTokenHash: tok, BaseHash: make([]byte, 32),
			ResourceBindings: json.RawMessage(fmt.Sprintf(`{"email":%q}`, email))})
		if err != nil {
			t.Fatal(err)
		}
		b.sessions[agent] = s.SessionID
	}
	return b
}

// route is the mail route of account as agent's session reaches it,
// once the egress gateway has authenticated the connection.
func (b *testBundle) route(t *testing.T, agent, account string) mailbox.Remote {
	t.Helper()
	caller := egress.Caller{AgentID: agent, SessionID: b.sessions[agent].String()}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b.h.ServeHTTP(w, r.WithContext(egress.WithCaller(r.Context(), caller)))
	}))
	t.Cleanup(srv.Close)
	return mailbox.Remote{URL: srv.URL + mailroute.Prefix + account, Client: srv.Client()}
}

// mail is a plain-text mail from agentBox, as a compromised agent could
// write it, with the envelope it names.
func mail(id, from, subject, text string, to ...string) mailbox.Submission {
	raw := fmt.Sprintf("From: %s\r\nTo: %s\r\nSubject: %s\r\nMessage-ID: <%s>\r\nDate: %s\r\n"+
		"MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n\r\n%s\r\n",
		from, strings.Join(to, ", "), subject, id, time.Now().Format(time.RFC1123Z), text)
	return mailbox.Submission{MessageID: id, From: agentBox, Recipients: to, Raw: []byte(raw)}
}

// code is the route's error code of err, or "".
func code(err error) string {
	var me *mailbox.Error
	if errors.As(err, &me) {
		return me.Code
	}
	return ""
}

// sent counts the mails the SMTP server accepted with subject.
func (b *testBundle) sent(subject string) int {
	n := 0
	for _, e := range b.mail.Sent() {
		if strings.Contains(string(e.Data), "Subject: "+subject+"\r\n") {
			n++
		}
	}
	return n
}

func TestRouteSendsOnlyForTheBoundAccount(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()

	t.Run("SessionNotBound", func(t *testing.T) {
		for _, c := range []struct{ agent, account string }{{"bob", "primary"}, {"ada", "gated"}, {"ada", "nope"}} {
			_, err := b.route(t, c.agent, c.account).Send(ctx, mail("nb-"+c.agent+"@choir.test", agentBox, "unbound", "hi", "bob@choir.test"))
			if code(err) != "not_bound" {
				t.Errorf("%s sending from %s: %v, want not_bound", c.agent, c.account, err)
			}
		}
		if _, err := b.route(t, "bob", "primary").Check(ctx, mailbox.CheckQuery{}); code(err) != "not_bound" {
			t.Errorf("bob checking primary: %v, want not_bound", err)
		}
		if n := b.sent("unbound"); n != 0 {
			t.Errorf("%d mails went out for sessions not bound to the account", n)
		}
	})

	t.Run("PolicyIsEnforcedAgain", func(t *testing.T) {
		r := b.route(t, "ada", "primary")
		cases := map[string]struct {
			sub  mailbox.Submission
			code string
		}{
			"RecipientOutside": {mail("p1@choir.test", agentBox, "outside", "hi", "bob@choir.test", "eve@evil.test"), "recipient_not_allowed"},
			"FromHeader":       {mail("p2@choir.test", "ceo@choir.test", "outside", "hi", "bob@choir.test"), "sender_not_allowed"},
			"MessageIDHeader": {func() mailbox.Submission {
				s := mail("p3@choir.test", agentBox, "outside", "hi", "bob@choir.test")
				s.MessageID = "other@choir.test"
				return s
			}(), "invalid_input"},
			"EnvelopeSender": {func() mailbox.Submission {
				s := mail("p4@choir.test", agentBox, "outside", "hi", "bob@choir.test")
				s.From = "ceo@choir.test"
				return s
			}(), "sender_not_allowed"},
		}
		for name, c := range cases {
			if _, err := r.Send(ctx, c.sub); code(err) != c.code {
				t.Errorf("%s: %v, want %s", name, err, c.code)
			}
		}
		if n := b.sent("outside"); n != 0 {
			t.Errorf("%d mails outside the account's policy went out", n)
		}
	})

	t.Run("PasswordReachesTheServers", func(t *testing.T) {
		r := b.route(t, "ada", "primary")
		got, err := r.Send(ctx, mail("pw-1@choir.test", agentBox, "hello bob", "from choird", "bob@choir.test"))
		if err != nil || got.Status != mailbox.StatusSent || got.MessageID != "<pw-1@choir.test>" {
			t.Fatalf("send: %+v %v", got, err)
		}
		b.mail.Deliver(t, agentBox, "INBOX", []byte("From: bob@choir.test\r\nTo: agent@choir.test\r\nSubject: for the agent\r\n\r\nread me\r\n"))
		page, err := r.Fetch(ctx, mailbox.Query{Subject: "for the agent", MarkSeen: true})
		if err != nil || page.Matching != 1 || len(page.Messages) != 1 || !strings.Contains(string(page.Messages[0].Raw), "read me") {
			t.Fatalf("fetch: %+v %v", page, err)
		}
		sum, err := r.Check(ctx, mailbox.CheckQuery{Newest: 5})
		if err != nil || len(sum.Folders) < 2 || len(sum.Newest) != 1 || sum.Newest[0].Header.Subject != "for the agent" {
			t.Fatalf("check: %+v %v", sum, err)
		}
		if _, err := r.Fetch(ctx, mailbox.Query{Folder: "Nope"}); code(err) != mailbox.CodeFolder {
			t.Errorf("fetch of a missing folder: %v, want %s", err, mailbox.CodeFolder)
		}
	})
}

func TestRouteSendsEachMailOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := b.route(t, "ada", "primary")

	t.Run("RepeatedRequestIsSentOnce", func(t *testing.T) {
		sub := mail("once@choir.test", agentBox, "once", "hi", "bob@choir.test")
		first, err := r.Send(ctx, sub)
		if err != nil || first.Status != mailbox.StatusSent {
			t.Fatalf("first: %+v %v", first, err)
		}
		again, err := r.Send(ctx, sub)
		if err != nil || again.Status != mailbox.StatusAlreadySent || again.MessageID != first.MessageID {
			t.Fatalf("again: %+v %v, want already_sent %s", again, err, first.MessageID)
		}
		if n := b.sent("once"); n != 1 {
			t.Errorf("the mail went out %d times, want once", n)
		}
	})

	// A row left 'sending' by a crash: the Sent folder says whether the
	// mail went.
	claim := func(t *testing.T, id string) {
		t.Helper()
		if _, err := seam.Queries(b.pool).MailSendClaim(ctx, db.MailSendClaimParams{AgentID: "ada", MessageID: id, Account: "primary",
			SessionID: b.sessions["ada"], Recipients: []string{"bob@choir.test"}}); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("CutShortAndSentIsNotSentAgain", func(t *testing.T) {
		sub := mail("crash-sent@choir.test", agentBox, "crash sent", "hi", "bob@choir.test")
		claim(t, sub.MessageID)
		b.mail.Deliver(t, agentBox, mailboxtest.SentFolder, sub.Raw)
		got, err := r.Send(ctx, sub)
		if err != nil || got.Status != mailbox.StatusAlreadySent || b.sent("crash sent") != 0 {
			t.Errorf("after a crash, found in Sent: %+v %v (%d sent), want already_sent and nothing sent", got, err, b.sent("crash sent"))
		}
	})
	t.Run("CutShortAndNotSentIsSentOnce", func(t *testing.T) {
		sub := mail("crash-unsent@choir.test", agentBox, "crash unsent", "hi", "bob@choir.test")
		claim(t, sub.MessageID)
		got, err := r.Send(ctx, sub)
		if err != nil || got.Status != mailbox.StatusSent || b.sent("crash unsent") != 1 {
			t.Errorf("after a crash, not in Sent: %+v %v (%d sent), want sent once", got, err, b.sent("crash unsent"))
		}
	})
}

func TestRouteSendsOnlyTheApprovedMail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := b.route(t, "gil", "gated")
	payload := `{"account":"gated","from":"agent@choir.test","to":["Bob <bob@choir.test>"],"cc":null,"bcc":null,` +
		`"subject":"approved","text":"the approved words","html":"","in_reply_to":"","attachments":null}`
	approval := func(t *testing.T, status string) string {
		t.Helper()
		var id string
		if err := b.pool.QueryRow(ctx, `INSERT INTO choir_control.pending_approvals
			(session_id, agent_id, request_id, request_type, payload, expires_at, status, resolved_at, resolved_by)
			VALUES ($1, 'gil', $2, 'choir.email.send', $3, now() + interval '1 hour', $4,
			        CASE WHEN $4 = 'pending' THEN NULL ELSE now() END, CASE WHEN $4 = 'pending' THEN NULL ELSE 'test' END)
			RETURNING approval_id::text`, b.sessions["gil"], uuid.NewString(), payload, status).Scan(&id); err != nil {
			t.Fatal(err)
		}
		return id
	}
	with := func(sub mailbox.Submission, id string) mailbox.Submission { sub.ApprovalID = id; return sub }

	if _, err := r.Send(ctx, mail("a0@choir.test", agentBox, "approved", "the approved words", "bob@choir.test")); code(err) != "approval_required" {
		t.Errorf("no approval: %v, want approval_required", err)
	}
	pending := approval(t, "pending")
	if _, err := r.Send(ctx, with(mail("a1@choir.test", agentBox, "approved", "the approved words", "bob@choir.test"), pending)); code(err) != "approval_not_granted" {
		t.Errorf("pending approval: %v, want approval_not_granted", err)
	}
	granted := approval(t, "approved")
	for name, sub := range map[string]mailbox.Submission{
		"OtherSubject":   mail("a2@choir.test", agentBox, "other", "the approved words", "bob@choir.test"),
		"OtherText":      mail("a3@choir.test", agentBox, "approved", "other words", "bob@choir.test"),
		"MoreRecipients": mail("a4@choir.test", agentBox, "approved", "the approved words", "bob@choir.test", "agent@choir.test"),
	} {
		if _, err := r.Send(ctx, with(sub, granted)); code(err) != "approval_mismatch" {
			t.Errorf("%s: %v, want approval_mismatch", name, err)
		}
	}
	if _, err := b.route(t, "ada", "primary").Send(ctx, with(mail("a5@choir.test", agentBox, "approved", "x", "bob@choir.test"), granted)); err != nil {
		t.Errorf("an account that needs no approval: %v", err)
	}
	if n := b.sent("approved"); n != 1 {
		t.Fatalf("%d mails went out before the approved one, want only ada's", n)
	}
	got, err := r.Send(ctx, with(mail("a6@choir.test", agentBox, "approved", "the approved words", "bob@choir.test"), granted))
	if err != nil || got.Status != mailbox.StatusSent {
		t.Fatalf("the approved mail: %+v %v", got, err)
	}
	again, err := r.Send(ctx, with(mail("a7@choir.test", agentBox, "approved", "the approved words", "bob@choir.test"), granted))
	if err != nil || again.Status != mailbox.StatusAlreadySent || again.MessageID != "<a6@choir.test>" {
		t.Errorf("a second mail under the approval: %+v %v, want already_sent as <a6@choir.test>", again, err)
	}
	if n := b.sent("approved"); n != 2 {
		t.Errorf("%d mails went out, want ada's and the approved one", n)
	}
}
