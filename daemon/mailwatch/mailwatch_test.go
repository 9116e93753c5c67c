package mailwatch_test

import (
	"context"
	"crypto/rand"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/mailwatch"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/mailbox/mailboxtest"
)

const password = "pw"

type bundle struct {
	pool   *pgxpool.Pool
	srv    *mailboxtest.Server
	cfg    *config.Config
	target mailwatch.Target
	pushes atomic.Int32
}

func setup(t *testing.T) *bundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	srv := mailboxtest.Start(t)
	srv.AddUser(t, "agent@choir.test", password)
	acct := srv.Account("agent@choir.test")
	acct.Wake = true
	cfg := &config.Config{EmailAccounts: map[string]config.EmailAccount{"primary": acct},
		DMs: map[string]config.DM{"dm-1": {Gateway: "main", UserID: "42"}}}
	if _, err := db.New(pool).AgentUpsert(ctx, db.AgentUpsertParams{AgentID: "mailer", Config: []byte(`{}`)}); err != nil {
		t.Fatal(err)
	}
	token := make([]byte, 32)
	_, _ = rand.Read(token)
	var sid uuid.UUID
	if err := pool.QueryRow(ctx, `INSERT INTO choir_control.sessions (agent_id, lease_token_hash, resource_bindings, hello_at)
		VALUES ('mailer', $1, '{"dm": "dm-1", "email": "primary"}', now()) RETURNING session_id`, token).Scan(&sid); err != nil {
		t.Fatal(err)
	}
	return &bundle{pool: pool, srv: srv, cfg: cfg,
		target: mailwatch.Target{AgentID: "mailer", SessionID: sid, DM: "dm-1", Account: "primary"}}
}

func (b *bundle) watcher() *mailwatch.Watcher {
	return mailwatch.New(mailwatch.Options{Pool: b.pool,
		ConfigFunc: func() (*config.Config, config.Secrets) { return b.cfg, config.Secrets{"mail-secret": password} },
		PushFunc:   func(context.Context, string) bool { b.pushes.Add(1); return true },
		Logger:     slog.New(slog.NewTextHandler(testWriter{}, nil))})
}

type testWriter struct{}

func (testWriter) Write(p []byte) (int, error) { return len(p), nil }

type notice struct {
	updateID int64
	text     string
	dm, kind string
}

func (b *bundle) notices(t *testing.T) []notice {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT update_id, text, dm, kind FROM choir_control.inbox
		WHERE gateway = $1 ORDER BY inbox_id`, b.target.Gateway())
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

func mail(subject string) []byte {
	return []byte("From: Bob <bob@ext.test>\r\nTo: agent@choir.test\r\nSubject: " + subject + "\r\n\r\nhello\r\n")
}

// TestIdleWakeOnce: mail arriving while the watch IDLEs becomes one inbox
// notice for the agent, pushed; a second watch (choird restarted) announces
// nothing twice, and announces the next message once.
func TestIdleWakeOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	old := b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("old news"))

	ctx, cancel := context.WithCancel(context.Background())
	w := b.watcher()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); w.Run(ctx) }()

	// The watch is IDLE once it has looked at the folder; mail delivered
	// before that is also past its baseline only if it came after the
	// first look, so deliver until the first notice shows up.
	var got []notice
	deadline := time.Now().Add(2 * time.Minute)
	for len(got) == 0 && time.Now().Before(deadline) {
		b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("first"))
		got = b.waitNoticesBrief(t)
	}
	if len(got) == 0 {
		t.Fatal("no notice for new mail")
	}
	for _, n := range got {
		if n.kind != mailwatch.Kind || n.dm != "dm-1" || !strings.Contains(n.text, "Subject: first") ||
			strings.Contains(n.text, "old news") || uint32(n.updateID) == uint32(old) {
			t.Errorf("notice %+v", n)
		}
	}
	if b.pushes.Load() == 0 {
		t.Error("the notice was not pushed")
	}
	before := len(got)
	cancel()
	wg.Wait()

	// choird restarts: a new watcher looks at the folder again.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	w2 := b.watcher()
	wg.Add(1)
	go func() { defer wg.Done(); w2.Run(ctx2) }()
	b.srv.Deliver(t, "agent@choir.test", "INBOX", mail("second"))
	got = b.waitNotices(t, before+1)
	cancel2()
	wg.Wait()
	if len(got) != before+1 || !strings.Contains(got[before].text, "Subject: second") {
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

func (b *bundle) waitNoticesBrief(t *testing.T) []notice {
	t.Helper()
	for i := 0; i < 100; i++ {
		if got := b.notices(t); len(got) > 0 {
			return got
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}
