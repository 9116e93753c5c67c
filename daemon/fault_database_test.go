package daemon_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/client"
	"github.com/choirhq/choir/rpc/wire"
)

// databaseBundle is a choird with a session whose agent (the test) has
// said hello and sent a heartbeat, so that choird knows its token.
type databaseBundle struct {
	d      *choirdtest.Choird
	client *client.Client
	beat   rpc.HeartbeatRequest
}

func setupDatabase(t *testing.T) *databaseBundle {
	t.Helper()
	ctx := t.Context()
	d := choirdtest.Start(t, choirdtest.Options{})
	id, token := d.StartSession(t, "assistant")
	cl, err := client.New(client.Options{Socket: d.Socket(), SessionID: id, LeaseToken: token, Retries: -1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	if _, err := cl.InitHello(ctx, rpc.InitHelloRequest{AgentID: "assistant", SessionID: id,
		ImageVersion: "img-1", ToolManifestHash: "t1", SkillManifestHash: "s1"}); err != nil {
		t.Fatalf("INIT_HELLO: %v", err)
	}
	var rev int64
	var hash []byte
	if err := d.OwnPool(t).QueryRow(ctx, `SELECT base_rev, base_hash FROM choir_control.sessions WHERE session_id = $1`,
		id).Scan(&rev, &hash); err != nil {
		t.Fatal(err)
	}
	var base rpc.Hash
	copy(base[:], hash)
	b := &databaseBundle{d: d, client: cl, beat: rpc.HeartbeatRequest{BaseRev: rev, NewRev: rev, Patches: []rpc.Event{},
		ConfigVersion: d.ConfigVersion(), HashPrev: base, HashNew: base}}
	if _, err := cl.Heartbeat(ctx, b.heartbeat()); err != nil {
		t.Fatalf("HEARTBEAT: %v", err)
	}
	return b
}

func (b *databaseBundle) heartbeat() rpc.HeartbeatRequest {
	r := b.beat
	r.Timestamp = time.Now()
	return r
}

// superuser runs sql on the test cluster as the harness's own role, outside
// choird's database.
func superuser(t *testing.T, sql string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dbtest.ServerURL())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(context.Background(), sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// takeDatabaseAway makes Postgres refuse choird: its database takes no new
// connections, and its open ones are ended. The test's cleanup (which runs
// before choird's stop) gives the database back.
func takeDatabaseAway(t *testing.T, d *choirdtest.Choird) {
	t.Helper()
	cfg, err := pgx.ParseConfig(d.DatabaseURL)
	if err != nil {
		t.Fatal(err)
	}
	name := pgx.Identifier{cfg.Database}.Sanitize()
	superuser(t, `ALTER DATABASE `+name+` ALLOW_CONNECTIONS false`)
	t.Cleanup(func() { superuser(t, `ALTER DATABASE `+name+` ALLOW_CONNECTIONS true`) })
	superuser(t, `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '`+cfg.Database+`'`)
}

// An outage of the database is the server's, never the client's: every
// front-end answers unavailable, which says to retry.
func TestDatabaseGoneAnswersUnavailable(t *testing.T) {
	t.Parallel()
	b := setupDatabase(t)
	takeDatabaseAway(t, b.d)
	ctx := t.Context()

	t.Run("AdminCall", func(t *testing.T) {
		// The first call finds its connection ended, the second is refused
		// a new one.
		for range 2 {
			_, err := admin.NewClient(admin.SocketPath(b.d.Home)).WorkspaceList(ctx)
			var e *wire.Error
			if !errors.As(err, &e) || e.Code != wire.CodeUnavailable {
				t.Fatalf("workspace list with the database gone: %v, want unavailable", err)
			}
		}
	})
	t.Run("AgentCallAfterAuthentication", func(t *testing.T) {
		// choird knows the session's token, so a HEARTBEAT reaches its
		// handler without asking the database; the handler's write fails.
		for range 2 {
			_, err := b.client.Heartbeat(ctx, b.heartbeat())
			var e *wire.Error
			if !errors.As(err, &e) || e.Code != wire.CodeUnavailable {
				t.Fatalf("HEARTBEAT with the database gone: %v, want unavailable\n%s", err, b.d.Logs)
			}
		}
	})
	t.Run("AgentCallAuthenticated", func(t *testing.T) {
		// SEND_OUTBOUND looks the session up first.
		_, err := b.client.SendOutbound(ctx, rpc.SendOutboundRequest{MessageID: "m-gone", Kind: rpc.OutboundText, Text: "hi"})
		var e *wire.Error
		if !errors.As(err, &e) || e.Code != wire.CodeUnavailable {
			t.Fatalf("SEND_OUTBOUND with the database gone: %v, want unavailable", err)
		}
	})
}

// A database error of no named kind is choird's failure: internal, never
// the agent's bad request.
func TestSendOutboundDatabaseErrorIsInternal(t *testing.T) {
	t.Parallel()
	b := setupDatabase(t)
	if _, err := b.d.OwnPool(t).Exec(t.Context(),
		`ALTER TABLE choir_control.outbox ADD CONSTRAINT refuse_all CHECK (false) NOT VALID`); err != nil {
		t.Fatal(err)
	}
	_, err := b.client.SendOutbound(t.Context(), rpc.SendOutboundRequest{MessageID: "m-refused", Kind: rpc.OutboundText, Text: "hi"})
	var e *wire.Error
	if !errors.As(err, &e) || e.Code != wire.CodeInternal {
		t.Fatalf("SEND_OUTBOUND refused by a check constraint: %v, want internal", err)
	}
}
