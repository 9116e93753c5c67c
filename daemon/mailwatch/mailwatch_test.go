package mailwatch_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emersion/go-imap/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/mailwatch"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
	"github.com/choirhq/choir/sql/seam"
)

const password = "pw-watch-3d9a"

type bundle struct {
	pool   *pgxpool.Pool
	srv    *mailboxtest.Server
	cfg    *config.Config
	target mailwatch.Target
	pushes atomic.Int32
	logs   *logbuf.Buffer
	// idleLook is the watchers' Options.IdleLook.
	idleLook time.Duration
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	acct := srv.Account("agent@choir.test")
	acct.Wake, acct.WakeFrom = true, []string{"bob@ext.test"}
	cfg := &config.Config{EmailAccounts: map[string]config.EmailAccount{"primary": acct},
		DMs: map[string]config.DM{"dm-1": {Gateway: "main", UserID: "42"}}}
	b := &bundle{pool: pool, srv: srv, cfg: cfg, logs: &logbuf.Buffer{}}
	b.target = b.addSession(t, ctx, "mailer", "dm-1")
	return b
}

// addSession starts a live session of agentID holding the account.
func (b *bundle) addSession(t *testing.T, ctx context.Context, agentID, dm string) mailwatch.Target {
	t.Helper()
	if _, err := seam.Queries(b.pool).AgentUpsert(ctx, db.AgentUpsertParams{AgentID: agentID, Config: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	token := make([]byte, 32)
	_, _ = rand.Read(token)
	var sid uuid.UUID
	if err := b.pool.QueryRow(ctx, `INSERT INTO choir_control.sessions (agent_id, lease_token_hash, resource_bindings, hello_at)
		VALUES ($1, $2, jsonb_build_object('dm', $3::text, 'email', 'primary'), now()) RETURNING session_id`,
		agentID, token, dm).Scan(&sid); err != nil {
		t.Fatal(err)
	}
	return mailwatch.Target{AgentID: agentID, SessionID: sid, DM: dm, Account: "primary"}
}

func (b *bundle) watcher() *mailwatch.Watcher {
	return mailwatch.New(mailwatch.Options{Pool: b.pool,
		ConfigFunc: func() (*config.Config, config.Secrets) { return b.cfg, config.Secrets{"mail-secret": password} },
		PushFunc:   func(context.Context, string) bool { b.pushes.Add(1); return true },
		Logger:     slog.New(slog.NewTextHandler(b.logs, nil)), IdleLook: b.idleLook})
}

// run runs a new watcher (a new choird) until the returned stop is called.
func (b *bundle) run() (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	w := b.watcher()
	done := make(chan struct{})
	go func() { defer close(done); w.Run(ctx) }()
	return func() { cancel(); <-done }
}

// waitLog waits until the log holds want n times.
func (b *bundle) waitLog(t *testing.T, want string, n int) {
	t.Helper()
	b.waitFor(t, fmt.Sprintf("%d of %q", n, want), func() bool { return strings.Count(b.logs.String(), want) >= n })
}

// waitFor waits, generously, until cond holds, or fails the test.
func (b *bundle) waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s; log:\n%s", what, b.logs.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type notice struct {
	updateID int64
	text     string
	dm, kind string
}

func (b *bundle) notices(t *testing.T) []notice { return b.noticesOf(t, b.target) }

func (b *bundle) noticesOf(t *testing.T, tg mailwatch.Target) []notice {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT update_id, text, dm, kind FROM choir_control.inbox
		WHERE gateway = $1 AND agent_id = $2 ORDER BY inbox_id`, tg.Gateway(), tg.AgentID)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []notice
	for rows.Next() {
		var n notice
		if err := rows.Scan(&n.updateID, &n.text, &n.dm, &n.kind); err != nil {
			t.Fatal(err)
		}
		out = append(out, n)
	}
	return out
}

// waitNotices waits, generously, until the inbox holds n notices.
func (b *bundle) waitNotices(t *testing.T, n int) []notice {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := b.notices(t)
		if len(got) >= n || time.Now().After(deadline) {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func mail(subject string) []byte { return mailFrom("Bob <bob@ext.test>", subject) }

// mailFrom is a message from from, with the header lines extra.
func mailFrom(from, subject string, extra ...string) []byte {
	h := "From: " + from + "\r\nTo: agent@choir.test\r\nSubject: " + subject + "\r\n"
	for _, e := range extra {
		h += e + "\r\n"
	}
	return []byte(h + "\r\nhello\r\n")
}

// TestIdleWakeOnce: mail arriving after the watch's first look becomes one
// inbox notice for the agent, pushed, while mail that was there before is
// not announced; a second watch (choird restarted) announces nothing twice,
// and announces the mail that came while none watched and the next, once.
func TestIdleWakeOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("old news"))

	stop := b.run()
	b.waitLog(t, "mail watch ready", 1)
	uid := b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("first"))
	got := b.waitNotices(t, 1)
	if len(got) != 1 || got[0].kind != mailwatch.Kind || got[0].dm != "dm-1" || !strings.Contains(got[0].text, "Subject: first") ||
		uint32(got[0].updateID) != uint32(uid) || uint32(got[0].updateID) == uint32(old) {
		t.Fatalf("notices %+v, want uid %d's alone", got, uid)
	}
	// The watch stores the notice, then pushes it.
	b.waitFor(t, "the notice pushed", func() bool { return b.pushes.Load() > 0 })
	if !strings.Contains(b.logs.String(), `msg="mail watch ready" agent_id=mailer email_account=primary folder=INBOX idle=true`) {
		t.Errorf("the watch did not IDLE:\n%s", b.logs.String())
	}
	stop()

	// choird restarts: a new watcher looks at the folder again.
	b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("second"))
	stop = b.run()
	defer stop()
	b.waitLog(t, "mail watch ready", 2)
	b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("third"))
	got = b.waitNotices(t, 3)
	stop()
	if len(got) != 3 || !strings.Contains(got[1].text, "Subject: second") || !strings.Contains(got[2].text, "Subject: third") {
		t.Fatalf("after the restart: %+v", got)
	}
	seen := map[int64]bool{}
	for _, n := range got {
		if seen[n.updateID] {
			t.Errorf("uid announced twice: %+v", n)
		}
		seen[n.updateID] = true
	}
}

// TestSharedAccountWakesEachAgent: two agents hold one shared account with
// wake; a new message is announced to each of them, once.
func TestSharedAccountWakesEachAgent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	acct := b.cfg.EmailAccounts["primary"]
	acct.Sharing = config.EmailShared
	b.cfg.EmailAccounts["primary"] = acct
	b.cfg.DMs["dm-2"] = config.DM{Gateway: "main", UserID: "43"}
	other := b.addSession(t, context.Background(), "helper", "dm-2")

	defer b.run()()
	b.waitLog(t, "mail watch ready", 2)
	b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("for both"))
	deadline := time.Now().Add(2 * time.Minute)
	one, two := b.noticesOf(t, b.target), b.noticesOf(t, other)
	for (len(one) == 0 || len(two) == 0) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		one, two = b.noticesOf(t, b.target), b.noticesOf(t, other)
	}
	if len(one) != 1 || len(two) != 1 {
		t.Fatalf("notices: mailer %+v, helper %+v; want one each", one, two)
	}
	if two[0].dm != "dm-2" || one[0].dm != "dm-1" {
		t.Errorf("each notice goes to its agent's DM: %+v %+v", one[0], two[0])
	}
}

// TestPollWhenAsked: an account with poll_seconds is polled instead of
// IDLEd, and its mail announced all the same.
func TestPollWhenAsked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	acct := b.cfg.EmailAccounts["primary"]
	acct.PollSeconds = 1
	b.cfg.EmailAccounts["primary"] = acct
	defer b.run()()
	b.waitLog(t, "mail watch ready", 1)
	b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("polled"))
	got := b.waitNotices(t, 1)
	if len(got) != 1 || !strings.Contains(got[0].text, "Subject: polled") {
		t.Fatalf("notices: %+v", got)
	}
	if !strings.Contains(b.logs.String(), "idle=false") {
		t.Errorf("the watch did not poll:\n%s", b.logs.String())
	}
}

// TestWatchFailuresAreLogged: a wrong password, a missing secret and an
// unreachable server each give a log line naming the problem, and the
// watch keeps trying instead of ending choird.
func TestWatchFailuresAreLogged(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, want string
		edit       func(*config.EmailAccount)
		secrets    config.Secrets
	}{
		{"WrongPassword", "code=auth_failed", nil, config.Secrets{"mail-secret": "wrong"}},
		{"MissingSecret", `is not in secrets.json`, nil, config.Secrets{}},
		{"Unreachable", "code=server_unreachable", func(a *config.EmailAccount) { a.IMAPPort = 1 }, config.Secrets{"mail-secret": password}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t)
			if c.edit != nil {
				a := b.cfg.EmailAccounts["primary"]
				c.edit(&a)
				b.cfg.EmailAccounts["primary"] = a
			}
			w := mailwatch.New(mailwatch.Options{Pool: b.pool,
				ConfigFunc: func() (*config.Config, config.Secrets) { return b.cfg, c.secrets },
				Logger:     slog.New(slog.NewTextHandler(b.logs, nil))})
			ctx, cancel := context.WithCancel(context.Background())
			var wg sync.WaitGroup
			wg.Add(1)
			go func() { defer wg.Done(); w.Run(ctx) }()
			stop := func() { cancel(); wg.Wait() }
			defer stop()
			b.waitLog(t, "mail watch failed; retrying", 1)
			stop()
			logs := b.logs.String()
			if !strings.Contains(logs, "mail watch failed; retrying") || !strings.Contains(logs, c.want) {
				t.Errorf("logs do not name the problem (%s):\n%s", c.want, logs)
			}
			if strings.Contains(logs, password) {
				t.Error("the password is in the log")
			}
		})
	}
}

// TestMailBetweenLookAndIdle: a message that arrives after the watch looked
// at the folder and before its IDLE began is announced all the same, on the
// first IDLE and on a later one, each once.
func TestMailBetweenLookAndIdle(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.srv.DeliverOnIdle(t, "agent@choir.test", "INBOX", mail("first"))
	second := b.srv.DeliverOnIdle(t, "agent@choir.test", "INBOX", mail("second"))
	defer b.run()()

	got := b.waitNotices(t, 2)
	if len(got) != 2 {
		t.Fatalf("notices %+v, want the two messages delivered as IDLE began; log:\n%s", got, b.logs.String())
	}
	uids := []imap.UID{<-first, <-second}
	for i, n := range got {
		if uint32(n.updateID) != uint32(uids[i]) || !strings.Contains(n.text, []string{"Subject: first", "Subject: second"}[i]) {
			t.Errorf("notice %d: %+v, want uid %d", i, n, uids[i])
		}
	}
}

// TestForgetfulIdleLooksAgain: on a server whose IDLE never reports mail
// that arrived just before it began, the watch still announces that mail,
// once, at its next look (Options.IdleLook) rather than never.
func TestForgetfulIdleLooksAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.ForgetfulIdle()
	b.idleLook = 200 * time.Millisecond
	b.srv.DeliverOnIdle(t, "agent@choir.test", "INBOX", mail("unreported"))
	defer b.run()()
	got := b.waitNotices(t, 1)
	if len(got) != 1 || !strings.Contains(got[0].text, "Subject: unreported") {
		t.Fatalf("notices %+v; log:\n%s", got, b.logs.String())
	}
	// Mail reported while IDLE is announced too, and the first not again.
	b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("next"))
	if got = b.waitNotices(t, 2); len(got) != 2 || !strings.Contains(got[1].text, "Subject: next") {
		t.Fatalf("notices %+v", got)
	}
}

// TestOtherUIDValidityIsNoMark: a notice stored under another UIDVALIDITY
// of the folder, even a greater one, is no mark for this one: mail that
// came while choird was down is announced after the restart.
func TestOtherUIDValidityIsNoMark(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	// imapmemserver numbers its mailboxes' UIDVALIDITY from 1: this folder
	// is 1, and a notice of UID 9 under UIDVALIDITY 2 is from an older
	// incarnation of the folder (a server's may go down as well as up).
	if _, err := b.pool.Exec(ctx, `INSERT INTO choir_control.inbox (gateway, update_id, dm, agent_id, chat_id, user_id, kind, text)
		VALUES ($1, $2, 'dm-1', 'mailer', '42', '', 'mail', 'an older folder')`, b.target.Gateway(), int64(2)<<32|9); err != nil {
		t.Fatal(err)
	}
	stop := b.run()
	b.waitLog(t, "mail watch ready", 1)
	b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("first"))
	b.waitNotices(t, 2)
	stop()
	b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("while down"))
	defer b.run()()
	got := b.waitNotices(t, 3)
	if len(got) != 3 || !strings.Contains(got[1].text, "Subject: first") || !strings.Contains(got[2].text, "Subject: while down") ||
		got[2].updateID != 1<<32|2 {
		t.Fatalf("notices %+v", got)
	}
}

// TestMarkOutlivesChoird: mail that arrives while choird is down, before
// the agent was ever told of any, is announced after the restart, once;
// mail that was there before the first watch is not.
func TestMarkOutlivesChoird(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("old news"))
	stop := b.run()
	b.waitLog(t, "mail watch ready", 1)
	stop()
	uid := b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("while down"))
	stop = b.run()
	defer stop()
	got := b.waitNotices(t, 1)
	b.waitLog(t, "mail watch ready", 2)
	stop()
	// A third watch finds nothing new.
	defer b.run()()
	b.waitLog(t, "mail watch ready", 3)
	if got = b.notices(t); len(got) != 1 || uint32(got[0].updateID) != uint32(uid) || !strings.Contains(got[0].text, "Subject: while down") {
		t.Fatalf("notices %+v, want uid %d's alone", got, uid)
	}
}
