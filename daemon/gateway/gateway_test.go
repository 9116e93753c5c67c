package gateway_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/logbuf"
	"github.com/choirhq/choir/sql/seam"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

const (
	token      = "7001:gateway-test-token"
	otherToken = "7002:other-gateway-token"
	ownerID    = int64(100) // admin DM "owner" on gateway tg
	friendID   = int64(200) // regular DM "friend" on gateway tg
	elsewhere  = int64(300) // DM "other" on gateway tg2 only
	strangerID = int64(999)
)

// pgInbox is an Inbox on the real inbox table. before runs ahead of the
// insert and may fail or block; after runs once the row is written.
type pgInbox struct {
	pool   *pgxpool.Pool
	before func(ctx context.Context, msg gateway.InboundMessage) error
	after  func(msg gateway.InboundMessage)
}

func (i *pgInbox) Receive(ctx context.Context, msg gateway.InboundMessage) error {
	if i.before != nil {
		if err := i.before(ctx, msg); err != nil {
			return err
		}
	}
	if err := inboxInsert(ctx, i.pool, msg); err != nil {
		return err
	}
	if i.after != nil {
		i.after(msg)
	}
	return nil
}

// inboxInsert writes msg as an inbox row of kind message with no agent, as
// choird's inbox does, returning gateway.ErrDuplicate for an update the
// inbox already holds.
func inboxInsert(ctx context.Context, pool *pgxpool.Pool, msg gateway.InboundMessage) error {
	atts := msg.Attachments
	if atts == nil {
		atts = []gateway.Attachment{}
	}
	raw, err := json.Marshal(atts)
	if err != nil {
		return fmt.Errorf("encode attachments: %w", err)
	}
	_, err = seam.Queries(pool).InboxInsert(ctx, db.InboxInsertParams{Gateway: msg.DM.Gateway, UpdateID: msg.UpdateID,
		Dm: msg.DM.Name, ChatID: msg.ChatID, UserID: msg.DM.UserID, Kind: "message", Text: msg.Text, Attachments: raw})
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("gateway %s update %d: %w", msg.DM.Gateway, msg.UpdateID, gateway.ErrDuplicate)
	}
	if err != nil {
		return fmt.Errorf("insert inbox row for gateway %s update %d: %w", msg.DM.Gateway, msg.UpdateID, err)
	}
	return nil
}

type recorder[T any] struct {
	mu   sync.Mutex
	seen []T
}

func (r *recorder[T]) add(v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, v)
}

func (r *recorder[T]) all() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.seen)
}

type commands struct{ recorder[gateway.Command] }

func (c *commands) Command(_ context.Context, cmd gateway.Command) (string, error) {
	c.add(cmd)
	return fmt.Sprintf("ran /%s for %s (admin %v)", cmd.Name, cmd.DM.Name, cmd.DM.Admin), nil
}

type approvals struct{ recorder[gateway.Decision] }

func (a *approvals) Decide(_ context.Context, d gateway.Decision) (string, error) {
	a.add(d)
	if d.Approve {
		return "Approved", nil
	}
	return "Rejected", nil
}

// workspaces binds every DM to one directory, except those in unbound.
type workspaces struct {
	dir     string
	unbound map[string]bool
}

func (w *workspaces) WorkspaceDir(_ context.Context, dm gateway.DM) (string, error) {
	if w.unbound[dm.Name] {
		return "", gateway.ErrNotBound
	}
	return w.dir, nil
}

type testBundle struct {
	pool  *pgxpool.Pool
	srv   *telegramtest.Server
	tg    *telegramtest.Bot
	tg2   *telegramtest.Bot
	inbox *pgInbox
	cmds  *commands
	apps  *approvals
	ws    *workspaces
	logs  *logbuf.Buffer
	opts  gateway.Options
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.NewPool(t), srv: telegramtest.NewServer(t), cmds: &commands{}, apps: &approvals{},
		ws: &workspaces{dir: t.TempDir(), unbound: map[string]bool{}}, logs: &logbuf.Buffer{}}
	b.tg = b.srv.AddBot(token, "choir_test_bot")
	b.tg2 = b.srv.AddBot(otherToken, "choir_other_bot")
	b.inbox = &pgInbox{pool: b.pool}
	b.opts = gateway.Options{
		Gateways: map[string]config.Gateway{
			"tg":      {Type: config.GatewayTelegram, Secret: "tg-token"},
			"tg2":     {Type: config.GatewayTelegram, Secret: "tg2-token"},
			"console": {Type: config.GatewayConsole},
		},
		DMs: map[string]config.DM{
			"owner":   {Gateway: "tg", UserID: "100", Admin: true},
			"friend":  {Gateway: "tg", UserID: "200"},
			"other":   {Gateway: "tg2", UserID: "300"},
			"console": {Gateway: "console", UserID: "operator", Admin: true},
		},
		Secrets:    config.Secrets{"tg-token": token, "tg2-token": otherToken},
		APIURL:     b.srv.URL(),
		Inbox:      b.inbox,
		Workspaces: b.ws,
		Commands:   b.cmds,
		Approvals:  b.apps,
		Limiter:    gateway.NewSendLimiter(gateway.SendLimits{}),
		Logger:     slog.New(slog.NewJSONHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		// Long polls end at once on cancel; a short timeout only keeps
		// an idle test from sitting in one.
		PollTimeout: 5 * time.Second,
		RetryBase:   10 * time.Millisecond,
	}
	return b
}

// run starts a gateway, as one choird process would, and returns a func
// that stops it (like a kill: the context ends) and waits for it.
func (b *testBundle) run(t *testing.T) (*gateway.Gateway, func()) {
	t.Helper()
	g, err := gateway.New(b.opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := g.Run(ctx); err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			<-done
			g.Close()
		})
	}
	t.Cleanup(stop)
	return g, stop
}

type inboxRow struct {
	Gateway, DM, ChatID, UserID, Text string
	UpdateID                          int64
	Attachments                       []gateway.Attachment
}

func (b *testBundle) rows(t *testing.T) []inboxRow {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT gateway, dm, chat_id, user_id, text, update_id, attachments
		FROM choir_control.inbox ORDER BY inbox_id`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (inboxRow, error) {
		var ir inboxRow
		var atts []byte
		err := r.Scan(&ir.Gateway, &ir.DM, &ir.ChatID, &ir.UserID, &ir.Text, &ir.UpdateID, &atts)
		if err == nil {
			err = json.Unmarshal(atts, &ir.Attachments)
		}
		return ir, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// waitRows waits until the inbox holds n rows; the deadline guards only
// against a hang.
func (b *testBundle) waitRows(t *testing.T, n int) []inboxRow {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		rs := b.rows(t)
		if len(rs) >= n {
			return rs
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d inbox rows, want %d", len(rs), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestGateway(t *testing.T) {
	t.Parallel()

	t.Run("MessageFromADMReachesTheInbox", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t)
		id := b.tg.SendText(ownerID, "hello agent")
		rs := b.waitRows(t, 1)
		want := inboxRow{Gateway: "tg", DM: "owner", ChatID: "100", UserID: "100", Text: "hello agent", UpdateID: id,
			Attachments: []gateway.Attachment{}}
		if fmt.Sprint(rs[0]) != fmt.Sprint(want) {
			t.Errorf("row = %+v, want %+v", rs[0], want)
		}
		b.tg.WaitConfirmed(t, id)
	})

	t.Run("StrangerIsDroppedWithoutReply", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t)
		stranger := b.tg.SendText(strangerID, "let me in")
		// A DM of the other bot is a stranger to this one.
		b.tg.SendText(elsewhere, "wrong bot")
		b.tg.SendText(ownerID, "after")
		rs := b.waitRows(t, 1)
		b.tg.WaitConfirmed(t, stranger+2)
		if rs = b.rows(t); len(rs) != 1 || rs[0].Text != "after" {
			t.Errorf("rows = %+v", rs)
		}
		if calls := b.tg.Calls("sendMessage"); len(calls) != 0 {
			t.Errorf("stranger got replies: %+v", calls)
		}
		if !strings.Contains(b.logs.String(), `"user_id":"999"`) {
			t.Errorf("no log line for the stranger:\n%s", b.logs)
		}
	})

	t.Run("EachBotHasItsOwnDMs", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t)
		b.tg2.SendText(elsewhere, "via the other bot")
		rs := b.waitRows(t, 1)
		if rs[0].Gateway != "tg2" || rs[0].DM != "other" {
			t.Errorf("row = %+v", rs[0])
		}
	})

	t.Run("DuplicateUpdateIsANoOp", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		// The row a previous process wrote before it died, leaving the
		// update unconfirmed.
		id := b.tg.SendText(ownerID, "once")
		if err := inboxInsert(context.Background(), b.pool, gateway.InboundMessage{
			DM: gateway.DM{Gateway: "tg", Name: "owner", UserID: "100"}, UpdateID: id, ChatID: "100", Text: "once"}); err != nil {
			t.Fatal(err)
		}
		b.run(t)
		b.tg.WaitConfirmed(t, id)
		if rs := b.rows(t); len(rs) != 1 {
			t.Errorf("%d rows, want 1", len(rs))
		}
		if strings.Contains(b.logs.String(), "retrying") {
			t.Errorf("a duplicate was treated as a failure:\n%s", b.logs)
		}
	})

	t.Run("KilledBeforeTheInboxWriteTheUpdateComesBack", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		received := make(chan struct{})
		var once sync.Once
		b.inbox.before = func(ctx context.Context, _ gateway.InboundMessage) error {
			once.Do(func() { close(received) })
			<-ctx.Done() // choird dies while writing
			return ctx.Err()
		}
		_, stop := b.run(t)
		id := b.tg.SendText(ownerID, "do not lose me")
		<-received
		stop()
		if rs := b.rows(t); len(rs) != 0 {
			t.Fatalf("rows after the kill = %+v", rs)
		}
		if !slices.Contains(b.tg.Pending(), id) {
			t.Fatalf("update %d was confirmed without being stored (pending %v)", id, b.tg.Pending())
		}
		// The next choird.
		b.inbox.before = nil
		b.run(t)
		rs := b.waitRows(t, 1)
		b.tg.WaitConfirmed(t, id)
		if rs = b.rows(t); len(rs) != 1 || rs[0].Text != "do not lose me" {
			t.Errorf("rows = %+v", rs)
		}
	})

	t.Run("KilledAfterTheInboxWriteTheUpdateIsStoredOnce", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		wrote := make(chan struct{})
		var once sync.Once
		b.inbox.after = func(gateway.InboundMessage) { once.Do(func() { close(wrote) }) }
		_, stop := b.run(t)
		first := b.tg.SendText(ownerID, "first")
		<-wrote
		stop() // before or after the offset moved: either way, stored once
		b.inbox.after = nil
		b.run(t)
		b.tg.SendText(ownerID, "second")
		b.waitRows(t, 2)
		b.tg.WaitConfirmed(t, first+1)
		rs := b.rows(t)
		if len(rs) != 2 || rs[0].Text != "first" || rs[1].Text != "second" {
			t.Errorf("rows = %+v", rs)
		}
	})

	t.Run("InboxFailureIsRetriedInOrder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		var mu sync.Mutex
		failures := 2
		b.inbox.before = func(context.Context, gateway.InboundMessage) error {
			mu.Lock()
			defer mu.Unlock()
			if failures > 0 {
				failures--
				return errors.New("database unavailable")
			}
			return nil
		}
		b.run(t)
		b.tg.SendText(ownerID, "one")
		b.tg.SendText(ownerID, "two")
		b.waitRows(t, 2)
		if rs := b.rows(t); rs[0].Text != "one" || rs[1].Text != "two" {
			t.Errorf("rows = %+v", rs)
		}
	})

	t.Run("CommandsReachTheHookWithTheDM", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t)
		b.tg.SendText(friendID, "/status")
		b.tg.SendText(ownerID, "/model@choir_test_bot llm fast")
		b.tg.SendText(ownerID, "/inject look at\nthis")
		last := b.tg.SendText(ownerID, "/status@someone_else")
		b.tg.WaitConfirmed(t, last)
		got := b.cmds.all()
		if len(got) != 3 {
			t.Fatalf("commands = %+v", got)
		}
		if c := got[0]; c.Name != "status" || c.DM.Name != "friend" || c.DM.Admin || c.ChatID != "200" || len(c.Args) != 0 {
			t.Errorf("first = %+v", c)
		}
		if c := got[1]; c.Name != "model" || !slices.Equal(c.Args, []string{"llm", "fast"}) || !c.DM.Admin {
			t.Errorf("second = %+v", c)
		}
		if c := got[2]; c.Name != "inject" || c.Text != "look at\nthis" {
			t.Errorf("third = %+v", c)
		}
		sent := b.tg.WaitSent(t, 3)
		if sent[0].ChatID != "200" || sent[0].Text != "ran /status for friend (admin false)" {
			t.Errorf("reply = %+v", sent[0])
		}
		if rs := b.rows(t); len(rs) != 0 {
			t.Errorf("commands reached the inbox: %+v", rs)
		}
	})

	t.Run("CommandInReplyNamesTheMessage", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t)
		id := b.tg.InjectUpdate("message", map[string]any{"message_id": 9, "date": 0, "text": "/approve",
			"entities": []map[string]any{{"type": "bot_command", "offset": 0, "length": 8}},
			"from":     map[string]any{"id": ownerID, "is_bot": false, "first_name": "o"},
			"chat":     map[string]any{"id": ownerID, "type": "private"},
			"reply_to_message": map[string]any{"message_id": 7, "date": 0, "text": "Approve?",
				"chat": map[string]any{"id": ownerID, "type": "private"}}})
		b.tg.WaitConfirmed(t, id)
		if got := b.cmds.all(); len(got) != 1 || got[0].Name != "approve" || got[0].ReplyToMessageID != 7 {
			t.Errorf("commands = %+v", got)
		}
	})

	t.Run("CallbacksResolveApprovals", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		g, _ := b.run(t)
		id := uuid.NewString()
		msgID, err := g.SendApproval(context.Background(), "tg", "100", "Delete the branch?", id)
		if err != nil {
			t.Fatal(err)
		}
		kb := b.tg.Sent()[0].Keyboard()
		if len(kb) != 1 || kb[0][0].Text != "Approve" || kb[0][1].Text != "Reject" {
			t.Fatalf("keyboard = %+v", kb)
		}
		b.tg.PressButton(ownerID, msgID, kb[0][0].Data)
		b.tg.PressButton(friendID, msgID, "\freject|"+id)
		answers := b.tg.WaitAnswers(t, 2)
		ds := b.apps.all()
		if len(ds) != 2 || !ds[0].Approve || ds[0].ApprovalID != id || ds[0].DM.Name != "owner" || ds[0].MessageID != msgID ||
			ds[1].Approve || ds[1].DM.Name != "friend" {
			t.Errorf("decisions = %+v", ds)
		}
		if answers[0].Text != "Approved" || answers[1].Text != "Rejected" {
			t.Errorf("answers = %+v", answers)
		}
		if err := g.ClearButtons(context.Background(), "tg", "100", msgID); err != nil {
			t.Fatal(err)
		}
		if e := b.tg.Edits(); len(e) != 1 || e[0].MessageID != msgID {
			t.Errorf("edits = %+v", e)
		}
	})

	t.Run("MalformedCallbacksExecuteNothing", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t)
		for _, data := range []string{"approve:42", "launch:" + uuid.NewString(), "", "\fapprove"} {
			b.tg.PressButton(ownerID, 1, data)
		}
		answers := b.tg.WaitAnswers(t, 4)
		for _, a := range answers {
			if !strings.Contains(a.Text, "nothing was done") {
				t.Errorf("answer = %q", a.Text)
			}
		}
		// A stranger's press gets no answer at all.
		last, _ := b.tg.PressButton(strangerID, 1, "approve:"+uuid.NewString())
		b.tg.WaitConfirmed(t, last)
		if len(b.tg.Answers()) != 4 || len(b.apps.all()) != 0 {
			t.Errorf("answers %+v, decisions %+v", b.tg.Answers(), b.apps.all())
		}
	})

	t.Run("InboundFilesAreStoredInTheWorkspace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t)
		files := []telegramtest.File{
			{Kind: telegramtest.Document, Name: "../../notes.txt", MIME: "text/plain", Data: []byte("my notes"), Caption: "read this"},
			{Kind: telegramtest.Photo, Data: []byte("jpeg bytes")},
			{Kind: telegramtest.Voice, MIME: "audio/ogg", Data: []byte("OggS voice")},
			{Kind: telegramtest.Video, Name: "clip.mp4", Data: []byte("mp4 bytes")},
		}
		var ids []int64
		for _, f := range files {
			ids = append(ids, b.tg.SendFile(ownerID, f))
		}
		rs := b.waitRows(t, len(files))
		for i, f := range files {
			r := rs[i]
			if len(r.Attachments) != 1 {
				t.Fatalf("row %d attachments = %+v", i, r.Attachments)
			}
			a := r.Attachments[0]
			if a.Kind != string(f.Kind) || a.Size != int64(len(f.Data)) || !strings.HasPrefix(a.Path, ".choirtmp/recv/") ||
				strings.Contains(strings.TrimPrefix(a.Path, ".choirtmp/recv/"), "/") || r.Text != f.Caption {
				t.Errorf("row %d = %+v", i, r)
			}
			data, err := os.ReadFile(filepath.Join(b.ws.dir, a.Path))
			if err != nil || string(data) != string(f.Data) {
				t.Errorf("stored file %s = %q, %v", a.Path, data, err)
			}
			if want := fmt.Sprintf("tg-%d-", ids[i]); !strings.Contains(a.Path, want) {
				t.Errorf("path %s lacks %s", a.Path, want)
			}
		}
		if n := len(b.tg.Calls("sendMessage")); n != 0 {
			t.Errorf("%d replies to good files", n)
		}
	})

	t.Run("FileOverTheLimitIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t)
		b.tg.SendFile(ownerID, telegramtest.File{Kind: telegramtest.Document, Name: "huge.iso",
			Size: gateway.MaxDownloadBytes + 1})
		sent := b.tg.WaitSent(t, 1)
		if !strings.Contains(sent[0].Text, "huge.iso") || !strings.Contains(sent[0].Text, "20 MB") {
			t.Errorf("reply = %q", sent[0].Text)
		}
		if len(b.rows(t)) != 0 || len(b.tg.Calls("getFile")) != 0 {
			t.Errorf("refused file was processed")
		}
		if entries, _ := os.ReadDir(filepath.Join(b.ws.dir, gateway.RecvDir)); len(entries) != 0 {
			t.Errorf("recv holds %v", entries)
		}
	})

	t.Run("FileWithoutAnAgentIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.ws.unbound["friend"] = true
		b.run(t)
		b.tg.SendFile(friendID, telegramtest.File{Kind: telegramtest.Document, Name: "a.txt", Data: []byte("a")})
		sent := b.tg.WaitSent(t, 1)
		if !strings.Contains(sent[0].Text, "No agent is running") || len(b.rows(t)) != 0 {
			t.Errorf("reply = %q, rows %+v", sent[0].Text, b.rows(t))
		}
	})

	t.Run("RecvLinkCannotLeadOutOfTheWorkspace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		outside := t.TempDir()
		if err := os.Symlink(outside, filepath.Join(b.ws.dir, ".choirtmp")); err != nil {
			t.Fatal(err)
		}
		b.run(t)
		b.tg.SendFile(ownerID, telegramtest.File{Kind: telegramtest.Document, Name: "x.txt", Data: []byte("x")})
		sent := b.tg.WaitSent(t, 1)
		if !strings.Contains(sent[0].Text, "not stored") || len(b.rows(t)) != 0 {
			t.Errorf("reply = %q, rows %+v", sent[0].Text, b.rows(t))
		}
		if entries, _ := os.ReadDir(outside); len(entries) != 0 {
			t.Errorf("wrote outside the workspace: %v", entries)
		}
	})

	t.Run("UnsupportedMessagesAreAnswered", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t)
		b.tg.InjectUpdate("message", map[string]any{"message_id": 1, "date": 0,
			"from":    map[string]any{"id": ownerID, "is_bot": false, "first_name": "o"},
			"chat":    map[string]any{"id": ownerID, "type": "private"},
			"sticker": map[string]any{"file_id": "s", "file_unique_id": "s", "width": 1, "height": 1, "type": "regular"}})
		sent := b.tg.WaitSent(t, 1)
		if !strings.Contains(sent[0].Text, "not supported") || len(b.rows(t)) != 0 {
			t.Errorf("reply = %q", sent[0].Text)
		}
	})

	t.Run("UndecodableUpdateIsSkipped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t)
		// An empty photo array panics telebot's decoder.
		id := b.tg.InjectUpdate("message", map[string]any{"message_id": 1, "date": 0, "photo": []any{},
			"from": map[string]any{"id": ownerID, "is_bot": false, "first_name": "o"},
			"chat": map[string]any{"id": ownerID, "type": "private"}})
		b.tg.SendText(ownerID, "still alive")
		b.waitRows(t, 1)
		b.tg.WaitConfirmed(t, id)
		if !strings.Contains(b.logs.String(), "undecodable update skipped") {
			t.Errorf("no log line for the undecodable update")
		}
	})

	t.Run("GroupChatsAreDropped", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.run(t)
		id := b.tg.InjectUpdate("message", map[string]any{"message_id": 1, "date": 0, "text": "hi all",
			"from": map[string]any{"id": ownerID, "is_bot": false, "first_name": "o"},
			"chat": map[string]any{"id": -5, "type": "group", "title": "g"}})
		b.tg.WaitConfirmed(t, id)
		if len(b.rows(t)) != 0 || len(b.tg.Sent()) != 0 {
			t.Errorf("group message handled")
		}
	})

	t.Run("SetDMsChangesTheAllowlist", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		g, _ := b.run(t)
		first := b.tg.SendText(strangerID, "before")
		b.tg.WaitConfirmed(t, first)
		g.SetDMs(map[string]config.DM{"newcomer": {Gateway: "tg", UserID: "999"}})
		b.tg.SendText(strangerID, "after")
		b.tg.SendText(ownerID, "owner is gone")
		last := b.tg.SendText(strangerID, "last")
		b.tg.WaitConfirmed(t, last)
		rs := b.rows(t)
		if len(rs) != 2 || rs[0].Text != "after" || rs[0].DM != "newcomer" || rs[1].Text != "last" {
			t.Errorf("rows = %+v", rs)
		}
	})

	t.Run("TypingRepeatsUntilCancelled", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.opts.TypingInterval = 10 * time.Millisecond
		g, _ := b.run(t)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			g.Typing(ctx, "tg", "100")
		}()
		waitFor(t, "three chat actions", func() bool { return len(b.tg.ChatActions()) >= 3 })
		cancel()
		<-done
		n := len(b.tg.ChatActions())
		for _, a := range b.tg.ChatActions() {
			if a.Action != "typing" || a.ChatID != "100" {
				t.Errorf("action = %+v", a)
			}
		}
		// One request may still have been in flight at the cancel; five
		// intervals later there must be no more than that one.
		time.Sleep(50 * time.Millisecond)
		if extra := len(b.tg.ChatActions()) - n; extra > 1 {
			t.Errorf("typing went on after cancel: %d more actions", extra)
		}
	})

	t.Run("SendTextSplitsAndPaces", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		g, _ := b.run(t)
		text := strings.Repeat("word ", 2000)
		ids, err := g.SendText(context.Background(), "tg", "100", text)
		if err != nil {
			t.Fatal(err)
		}
		sent := b.tg.Sent()
		if len(ids) != 3 || len(sent) != 3 || sent[2].MessageID != ids[2] {
			t.Errorf("ids %v, sent %d", ids, len(sent))
		}
		if _, err := g.SendText(context.Background(), "console", "x", "hi"); err == nil {
			t.Error("sent through a console gateway")
		}
	})

	t.Run("EditTextReplacesTheTextInPlace", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		g, err := gateway.New(b.opts)
		if err != nil {
			t.Fatal(err)
		}
		ctx := context.Background()
		ids, err := g.SendText(ctx, "tg", "100", "job build: reasoning")
		if err != nil {
			t.Fatal(err)
		}
		if err := g.EditText(ctx, "tg", "100", ids[0], "job build: 3 steps"); err != nil {
			t.Fatal(err)
		}
		// Unchanged: Telegram refuses it, the gateway takes it as done.
		if err := g.EditText(ctx, "tg", "100", ids[0], "job build: 3 steps"); err != nil {
			t.Errorf("unchanged edit: %v", err)
		}
		b.tg.TooManyRequests("editMessageText", 1, 1)
		if err := g.EditText(ctx, "tg", "100", ids[0], "job build: completed"); err != nil {
			t.Errorf("edit after a 429: %v", err)
		}
		if text, _ := b.tg.MessageText(100, ids[0]); text != "job build: completed" {
			t.Errorf("text = %q", text)
		}
		b.tg.DeleteMessage(100, ids[0])
		if err := g.EditText(ctx, "tg", "100", ids[0], "again"); !errors.Is(err, gateway.ErrMessageGone) {
			t.Errorf("edit of a deleted message: %v, want ErrMessageGone", err)
		}
		if err := g.EditText(ctx, "tg", "100", ids[0], strings.Repeat("x", gateway.MaxMessageLength+1)); err == nil {
			t.Error("an edit over 4096 characters was sent")
		}
		if n := len(b.tg.Sent()); n != 1 {
			t.Errorf("%d messages sent, want the one edited", n)
		}
		if e := b.tg.TextEdits(); len(e) != 2 {
			t.Errorf("text edits = %+v, want two", e)
		}
	})

	t.Run("TokenNeverAppearsInLogsOrErrors", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		dead := telegramtest.NewServer(t)
		dead.Close()
		b.opts.APIURL = dead.URL()
		g, stop := b.run(t)
		waitFor(t, "an unreachable-bot log line", func() bool {
			return strings.Count(b.logs.String(), "telegram bot unreachable") >= 4
		})
		_, err := g.Send(context.Background(), message.Part{Gateway: "tg", ChatID: "100", Kind: message.Text, Text: "x"})
		stop()
		if err == nil {
			t.Fatal("send to a dead server succeeded")
		}
		for _, s := range []string{b.logs.String(), err.Error()} {
			if strings.Contains(s, token) || strings.Contains(s, otherToken) {
				t.Errorf("token leaked: %s", s)
			}
		}
		if !strings.Contains(err.Error(), "<token>") {
			t.Errorf("error lost its context: %v", err)
		}
	})

	t.Run("MissingTokenIsAConfigError", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.opts.Secrets = config.Secrets{"tg-token": token}
		if _, err := gateway.New(b.opts); err == nil || !strings.Contains(err.Error(), "tg2-token") {
			t.Errorf("err = %v", err)
		}
	})

	t.Run("RunNeedsTheHooks", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.opts.Inbox = nil
		g, err := gateway.New(b.opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := g.Run(context.Background()); err == nil {
			t.Error("run without an inbox succeeded")
		}
	})
}

// BenchmarkUpdateToInbox measures the gateway's ingress overhead: from an
// update queued at the fake server (loopback, long poll waiting) to
// Inbox.Receive returning after its row is committed in Postgres.
func BenchmarkUpdateToInbox(b *testing.B) {
	bb := setupBench(b)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		bb.tg.SendText(ownerID, "ping")
		<-bb.received
		lat = append(lat, time.Since(start))
	}
	reportPercentiles(b, lat)
}

type benchBundle struct {
	tg       *telegramtest.Bot
	received chan struct{}
}

func setupBench(b *testing.B) *benchBundle {
	pool := dbtest.NewPool(b)
	srv := telegramtest.NewServer(b)
	bb := &benchBundle{tg: srv.AddBot(token, "choir_test_bot"), received: make(chan struct{}, 1)}
	g, err := gateway.New(gateway.Options{
		Gateways:   map[string]config.Gateway{"tg": {Type: config.GatewayTelegram, Secret: "tg-token"}},
		DMs:        map[string]config.DM{"owner": {Gateway: "tg", UserID: "100", Admin: true}},
		Secrets:    config.Secrets{"tg-token": token},
		APIURL:     srv.URL(),
		Inbox:      &pgInbox{pool: pool, after: func(gateway.InboundMessage) { bb.received <- struct{}{} }},
		Workspaces: &workspaces{dir: b.TempDir()},
		Commands:   &commands{},
		Approvals:  &approvals{},
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); g.Run(ctx) }() //nolint:errcheck
	b.Cleanup(func() { cancel(); <-done; g.Close() })
	// Warm up: getMe done, first long poll in place.
	bb.tg.SendText(ownerID, "warm up")
	<-bb.received
	return bb
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		return float64(lat[min(len(lat)-1, int(p*float64(len(lat))))].Microseconds())
	}
	b.ReportMetric(pct(0.50), "p50-µs")
	b.ReportMetric(pct(0.99), "p99-µs")
	b.ReportMetric(0, "ns/op")
}
