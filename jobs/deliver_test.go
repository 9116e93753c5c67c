package jobs_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/jobs"
)

const (
	testToken  = "4242:delivery-test-token"
	testAgent  = "courier"
	testChat   = int64(5551)
	otherChat  = int64(5552)
	gatewayTG  = "tg"
	testDMName = "owner"
)

// deliveryBundle is a delivery worker on real Postgres, sending through the
// real gateway to the fake Telegram server.
type deliveryBundle struct {
	pool   *pgxpool.Pool
	srv    *telegramtest.Server
	tg     *telegramtest.Bot
	limits gateway.SendLimits
	ws     string
	// other is a second configured workspace, "other", that the agent
	// of ws must not reach.
	other   string
	clients []*jobs.Client
}

// testWorkspace is the name of the bundle's workspace, b.ws.
const testWorkspace = "main"

// workspaces is the configured workspaces, for the worker.
func (b *deliveryBundle) workspaces() map[string]string {
	return map[string]string{testWorkspace: b.ws, "other": b.other}
}

// fileParams queues the file .choirtmp/send/name of the bundle's workspace.
func (b *deliveryBundle) fileParams(messageID, caption, kind, name string) jobs.OutboundParams {
	p := b.params(messageID, caption, testChat)
	p.Kind, p.Workspace, p.FilePath = kind, testWorkspace, ".choirtmp/send/"+name
	return p
}

func setupDelivery(t *testing.T, limits gateway.SendLimits) *deliveryBundle {
	t.Helper()
	ctx := context.Background()
	b := &deliveryBundle{pool: dbtest.NewPool(t), srv: telegramtest.NewServer(t), limits: limits, ws: t.TempDir(),
		other: t.TempDir()}
	b.tg = b.srv.AddBot(testToken, "courier_bot")
	if _, err := db.New(b.pool).AgentUpsert(ctx, db.AgentUpsertParams{AgentID: testAgent, Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for _, ws := range []string{b.ws, b.other} {
		if err := os.MkdirAll(filepath.Join(ws, ".choirtmp", "send"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// start starts a River client with the delivery worker, as a fresh choird
// process would: its own gateway and limiter.
func (b *deliveryBundle) start(t *testing.T, more ...func(*river.Workers)) *jobs.Client {
	t.Helper()
	gw, err := gateway.New(gateway.Options{
		Gateways: map[string]config.Gateway{gatewayTG: {Type: config.GatewayTelegram, Secret: "tg-token"}},
		Secrets:  config.Secrets{"tg-token": testToken},
		APIURL:   b.srv.URL(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	workers := river.NewWorkers()
	if err := jobs.AddDeliveryWorker(workers, jobs.DeliveryDeps{Pool: b.pool, Sender: gw,
		Limiter: gateway.NewSendLimiter(b.limits), Workspaces: b.workspaces}); err != nil {
		t.Fatal(err)
	}
	for _, add := range more {
		add(workers)
	}
	name, qc := jobs.DeliveryQueue()
	client, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{
		Queues: map[string]river.QueueConfig{name: qc,
			jobs.QueueControl: {MaxWorkers: 2, FetchPollInterval: 50 * time.Millisecond}},
		Workers:       workers,
		TestOnly:      true,
		FetchCooldown: time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		client.Stop(ctx) //nolint:errcheck
	})
	b.clients = append(b.clients, client)
	return client
}

func (b *deliveryBundle) params(messageID, text string, chat int64) jobs.OutboundParams {
	return jobs.OutboundParams{AgentID: testAgent, MessageID: messageID, Gateway: gatewayTG, DM: testDMName,
		ChatID: strconv.FormatInt(chat, 10), Kind: jobs.OutboundText, Text: text}
}

// enqueue queues messages in one transaction through client.
func (b *deliveryBundle) enqueue(t *testing.T, client *jobs.Client, ps ...jobs.OutboundParams) []jobs.OutboundQueued {
	t.Helper()
	ctx := context.Background()
	var out []jobs.OutboundQueued
	err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		for _, p := range ps {
			q, err := jobs.EnqueueOutboundTx(ctx, tx, client, p)
			if err != nil {
				return err
			}
			out = append(out, q)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (b *deliveryBundle) row(t *testing.T, id int64) db.ChoirControlOutbox {
	t.Helper()
	r, err := db.New(b.pool).OutboxGetByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// waitRow waits until the row reaches status; the deadline only guards
// against a hang.
func (b *deliveryBundle) waitRow(t *testing.T, id int64, status string) db.ChoirControlOutbox {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := b.row(t, id)
		if r.Status == status {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox row %d is %s (%q), want %s", id, r.Status, r.LastError, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

type jobState struct {
	State    string
	Attempt  int
	Metadata map[string]any
}

// jobsOf returns the deliver_outbound jobs of an outbox row.
func (b *deliveryBundle) jobsOf(t *testing.T, outboxID int64) []jobState {
	t.Helper()
	rows, err := b.pool.Query(context.Background(), `SELECT state, attempt, metadata FROM river_job
		WHERE kind = 'deliver_outbound' AND (args->>'outbox_id')::bigint = $1 ORDER BY id`, outboxID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (jobState, error) {
		var j jobState
		var md []byte
		err := r.Scan(&j.State, &j.Attempt, &md)
		if err == nil {
			err = json.Unmarshal(md, &j.Metadata)
		}
		return j, err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func (b *deliveryBundle) waitJob(t *testing.T, outboxID int64, state string) jobState {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		js := b.jobsOf(t, outboxID)
		if len(js) > 0 && js[len(js)-1].State == state {
			return js[len(js)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs of outbox row %d = %+v, want the last %s", outboxID, js, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func texts(ms []telegramtest.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Text)
	}
	return out
}

func messageIDs(ms []telegramtest.Message) []int64 {
	var out []int64
	for _, m := range ms {
		out = append(out, m.MessageID)
	}
	return out
}

// threeParts is a text the gateway sends as three messages, each
// starting "part N".
var threeParts = "part 1 " + strings.Repeat("a", 3000) + "\npart 2 " + strings.Repeat("b", 3000) +
	"\npart 3 " + strings.Repeat("c", 3000)

// unlimited keeps pacing out of tests about something else.
var unlimited = gateway.SendLimits{}

func TestDeliverOutbound(t *testing.T) {
	t.Parallel()

	t.Run("TextIsSentAndRecorded", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		client := b.start(t)
		q := b.enqueue(t, client, b.params("m1", "hello there", testChat))[0]
		if !q.Created || q.Row.Status != "pending" {
			t.Fatalf("queued = %+v", q)
		}
		row := b.waitRow(t, q.Row.OutboxID, "sent")
		sent := b.tg.SentTo(testChat)
		if len(sent) != 1 || sent[0].Text != "hello there" {
			t.Fatalf("sent = %+v", sent)
		}
		if !slices.Equal(row.SentIds, messageIDs(sent)) || row.SentAt == nil || row.Attempts != 1 {
			t.Errorf("row = %+v, want sent_ids %v", row, messageIDs(sent))
		}
		b.waitJob(t, q.Row.OutboxID, "completed")
	})

	t.Run("LongTextIsSplitInOrder", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		client := b.start(t)
		var lines []string
		for i := range 300 {
			lines = append(lines, fmt.Sprintf("line %03d %s", i, strings.Repeat("x", 40)))
		}
		text := strings.Join(lines, "\n")
		q := b.enqueue(t, client, b.params("long", text, testChat))[0]
		row := b.waitRow(t, q.Row.OutboxID, "sent")
		sent := b.tg.SentTo(testChat)
		if len(sent) < 4 || !slices.Equal(row.SentIds, messageIDs(sent)) {
			t.Fatalf("%d messages, row sent_ids %v", len(sent), row.SentIds)
		}
		if got := strings.Join(texts(sent), "\n"); got != text {
			t.Errorf("parts joined differ from the text (%d vs %d bytes)", len(got), len(text))
		}
	})

	t.Run("EnqueueTwiceQueuesOnce", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		client := b.start(t)
		first := b.enqueue(t, client, b.params("same", "only once", testChat))[0]
		second := b.enqueue(t, client, b.params("same", "only once", testChat))[0]
		if second.Created || second.Row.OutboxID != first.Row.OutboxID {
			t.Errorf("second enqueue = %+v, want the first row, not created", second)
		}
		b.waitRow(t, first.Row.OutboxID, "sent")
		if js := b.jobsOf(t, first.Row.OutboxID); len(js) != 1 {
			t.Errorf("%d jobs for one message, want 1", len(js))
		}
		// Queued again after delivery: still the same row, still sent.
		third := b.enqueue(t, client, b.params("same", "only once", testChat))[0]
		if third.Created || third.Row.Status != "sent" {
			t.Errorf("enqueue after delivery = %+v", third)
		}
		if n := len(b.tg.Sent()); n != 1 {
			t.Errorf("%d messages sent, want 1", n)
		}
	})

	t.Run("JobRunTwiceSendsOnce", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		client := b.start(t)
		q := b.enqueue(t, client, b.params("twice", "just once", testChat))[0]
		b.waitRow(t, q.Row.OutboxID, "sent")
		// A second job for the same row, as a duplicated or replayed job
		// would be.
		if _, err := client.Insert(context.Background(), jobs.DeliverOutboundArgs{OutboxID: q.Row.OutboxID}, nil); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			js := b.jobsOf(t, q.Row.OutboxID)
			if len(js) == 2 && js[1].State == "completed" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("jobs = %+v", js)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n := len(b.tg.Calls("sendMessage")); n != 1 {
			t.Errorf("%d sendMessage calls, want 1", n)
		}
	})

	t.Run("RetryAfterSnoozesWithoutUsingAnAttempt", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		b.tg.TooManyRequests("sendMessage", 1, 1)
		client := b.start(t)
		q := b.enqueue(t, client, b.params("flood", "after the flood", testChat))[0]
		row := b.waitRow(t, q.Row.OutboxID, "sent")
		j := b.waitJob(t, q.Row.OutboxID, "completed")
		calls := b.tg.Calls("sendMessage")
		if len(calls) != 2 || calls[0].Status != 429 || calls[1].Status != 200 {
			t.Fatalf("calls = %+v", calls)
		}
		if j.Attempt != 1 || j.Metadata["snoozes"] != float64(1) {
			t.Errorf("job = %+v, want attempt 1 after one snooze", j)
		}
		// Telegram asked for a second: the retry came no earlier.
		if gap := calls[1].At.Sub(calls[0].At); gap < time.Second {
			t.Errorf("retried after %s, retry_after was 1 s", gap)
		}
		if row.Attempts != 2 || row.LastError != "" || len(b.tg.Sent()) != 1 {
			t.Errorf("row = %+v, sent %d", row, len(b.tg.Sent()))
		}
	})

	t.Run("TransientErrorIsRetried", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		b.tg.Fail("sendMessage", 1, telegramtest.Fault{Code: 502})
		client := b.start(t)
		q := b.enqueue(t, client, b.params("bumpy", "eventually", testChat))[0]
		row := b.waitRow(t, q.Row.OutboxID, "sent")
		j := b.waitJob(t, q.Row.OutboxID, "completed")
		if j.Attempt != 2 || row.Attempts != 2 || len(b.tg.Sent()) != 1 {
			t.Errorf("job %+v, row %+v, sent %d", j, row, len(b.tg.Sent()))
		}
	})

	t.Run("BlockedChatFailsAtOnce", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		b.tg.Block(testChat)
		client := b.start(t)
		qs := b.enqueue(t, client, b.params("b1", "to a blocked chat", testChat), b.params("b2", "to a good chat", otherChat))
		row := b.waitRow(t, qs[0].Row.OutboxID, "failed")
		if !strings.Contains(row.LastError, "blocked") || row.Attempts != 1 {
			t.Errorf("failed row = %+v", row)
		}
		if j := b.waitJob(t, qs[0].Row.OutboxID, "completed"); j.Attempt != 1 {
			t.Errorf("job = %+v, want completed after one attempt", j)
		}
		b.waitRow(t, qs[1].Row.OutboxID, "sent")
	})

	t.Run("FilesAreSentThenRemoved", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		client := b.start(t)
		ogg := append([]byte("OggS\x00\x02"), make([]byte, 22)...)
		ogg = append(append(ogg, 0x01, 0x13), []byte("OpusHead\x01\x01")...)
		files := []struct {
			kind, name, method string
			data               []byte
			caption            string
		}{
			{jobs.OutboundDocument, "report.pdf", "sendDocument", []byte("%PDF-1.7 report"), "the report"},
			{jobs.OutboundPhoto, "chart.png", "sendPhoto", []byte("\x89PNG chart"), ""},
			{jobs.OutboundVoice, "reply.ogg", "sendVoice", ogg, ""},
			{jobs.OutboundVideo, "clip.mp4", "sendVideo", []byte("....ftypmp42"), "a clip"},
			{jobs.OutboundVoice, "not-opus.mp3", "sendDocument", []byte("ID3 mp3 data"), ""},
		}
		var ps []jobs.OutboundParams
		for i, f := range files {
			p := filepath.Join(b.ws, ".choirtmp", "send", f.name)
			if err := os.WriteFile(p, f.data, 0o644); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, b.fileParams(fmt.Sprintf("f%d", i), f.caption, f.kind, f.name))
		}
		qs := b.enqueue(t, client, ps...)
		for _, q := range qs {
			b.waitRow(t, q.Row.OutboxID, "sent")
		}
		sent := b.tg.SentTo(testChat)
		if len(sent) != len(files) {
			t.Fatalf("%d sent, want %d", len(sent), len(files))
		}
		for i, f := range files {
			m := sent[i]
			if m.Method != f.method || m.File == nil || string(m.File.Data) != string(f.data) || m.Text != f.caption {
				t.Errorf("file %s sent as %s %+v caption %q", f.name, m.Method, m.File, m.Text)
			}
			if (f.kind == jobs.OutboundDocument || f.kind == jobs.OutboundVideo) && m.File.Name != f.name {
				t.Errorf("file %s uploaded as %q", f.name, m.File.Name)
			}
			if _, err := os.Stat(filepath.Join(b.ws, ps[i].FilePath)); !os.IsNotExist(err) {
				t.Errorf("%s still exists after delivery: %v", f.name, err)
			}
		}
	})

	t.Run("LongCaptionFollowsTheFile", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		client := b.start(t)
		p := filepath.Join(b.ws, ".choirtmp", "send", "data.csv")
		os.WriteFile(p, []byte("a,b\n1,2\n"), 0o644) //nolint:errcheck
		caption := strings.Repeat("word ", 300)      // 1500 characters
		q := b.enqueue(t, client, b.fileParams("cap", caption, jobs.OutboundDocument, "data.csv"))[0]
		row := b.waitRow(t, q.Row.OutboxID, "sent")
		sent := b.tg.SentTo(testChat)
		if len(sent) != 2 || sent[0].Method != "sendDocument" || sent[0].Text != "" || sent[1].Method != "sendMessage" ||
			sent[1].Text != strings.TrimSpace(caption) || len(row.SentIds) != 2 {
			t.Errorf("sent = %+v, row ids %v", sent, row.SentIds)
		}
	})

	t.Run("FileOutsideTheWorkspaceIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		client := b.start(t)
		outside := filepath.Join(t.TempDir(), "secrets.json")
		os.WriteFile(outside, []byte(`{"token":"x"}`), 0o600) //nolint:errcheck
		link := filepath.Join(b.ws, ".choirtmp", "send", "innocent.txt")
		if err := os.Symlink(outside, link); err != nil {
			t.Fatal(err)
		}
		q := b.enqueue(t, client, b.fileParams("escape", "", jobs.OutboundDocument, "innocent.txt"))[0]
		row := b.waitRow(t, q.Row.OutboxID, "failed")
		if len(b.tg.Sent()) != 0 {
			t.Errorf("sent %+v", b.tg.Sent())
		}
		if _, err := os.Stat(outside); err != nil {
			t.Errorf("outside file touched: %v", err)
		}
		t.Logf("refused: %s", row.LastError)
	})

	t.Run("LinkIntoAnotherWorkspaceIsRefused", func(t *testing.T) {
		t.Parallel()
		// The agent of ws links a directory of its send directory to the
		// other workspace and queues a path that runs through the link to
		// that workspace's own send directory. The file is resolved in
		// ws's configured directory, where the link leads outside: it is
		// neither sent nor removed. (choird used to split the absolute
		// path at its last .choirtmp/send and open the rest under the
		// directory before it, which was the other workspace.)
		b := setupDelivery(t, unlimited)
		client := b.start(t)
		secret := filepath.Join(b.other, ".choirtmp", "send", "secret.txt")
		if err := os.WriteFile(secret, []byte("the other agent's file"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(b.other, filepath.Join(b.ws, ".choirtmp", "send", "sub")); err != nil {
			t.Fatal(err)
		}
		q := b.enqueue(t, client, b.fileParams("cross", "", jobs.OutboundDocument, "sub/.choirtmp/send/secret.txt"))[0]
		row := b.waitRow(t, q.Row.OutboxID, "failed")
		if len(b.tg.Sent()) != 0 {
			t.Errorf("sent %+v", b.tg.Sent())
		}
		if _, err := os.Stat(secret); err != nil {
			t.Errorf("the other workspace's file was touched: %v", err)
		}
		t.Logf("refused: %s", row.LastError)
	})

	t.Run("FIFOIsRefusedWithoutBlocking", func(t *testing.T) {
		t.Parallel()
		// A FIFO has no writer: opening it for reading without O_NONBLOCK
		// would wait forever. It is refused, and the next message of the
		// chat still goes out.
		b := setupDelivery(t, unlimited)
		client := b.start(t)
		if err := syscall.Mkfifo(filepath.Join(b.ws, ".choirtmp", "send", "pipe.pdf"), 0o644); err != nil {
			t.Fatal(err)
		}
		qs := b.enqueue(t, client, b.fileParams("fifo", "", jobs.OutboundDocument, "pipe.pdf"),
			b.params("after", "still here", testChat))
		row := b.waitRow(t, qs[0].Row.OutboxID, "failed")
		b.waitRow(t, qs[1].Row.OutboxID, "sent")
		if !strings.Contains(row.LastError, "not a regular file") {
			t.Errorf("last error %q", row.LastError)
		}
		if sent := b.tg.SentTo(testChat); len(sent) != 1 || sent[0].Text != "still here" {
			t.Errorf("sent %+v", sent)
		}
	})

	t.Run("RowsWithAbsolutePathsStillWork", func(t *testing.T) {
		t.Parallel()
		// Rows queued before rows named their workspace hold an absolute
		// path. It is mapped onto the configured workspace that holds it,
		// and a link inside it cannot lead into another.
		b := setupDelivery(t, unlimited)
		client := b.start(t)
		ctx := context.Background()
		if err := os.WriteFile(filepath.Join(b.ws, ".choirtmp", "send", "old.txt"), []byte("queued long ago"), 0o644); err != nil {
			t.Fatal(err)
		}
		secret := filepath.Join(b.other, ".choirtmp", "send", "secret.txt")
		if err := os.WriteFile(secret, []byte("the other agent's file"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(b.other, filepath.Join(b.ws, ".choirtmp", "send", "sub")); err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for i, p := range []string{".choirtmp/send/old.txt", ".choirtmp/send/sub/.choirtmp/send/secret.txt"} {
			err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				row, err := db.New(tx).OutboxInsert(ctx, db.OutboxInsertParams{AgentID: testAgent, MessageID: fmt.Sprintf("legacy-%d", i),
					Gateway: gatewayTG, Dm: testDMName, ChatID: strconv.FormatInt(testChat, 10), Kind: jobs.OutboundDocument,
					FilePath: filepath.Join(b.ws, p)})
				if err != nil {
					return err
				}
				ids = append(ids, row.OutboxID)
				_, err = client.InsertTx(ctx, tx, jobs.DeliverOutboundArgs{OutboxID: row.OutboxID}, nil)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		b.waitRow(t, ids[0], "sent")
		b.waitRow(t, ids[1], "failed")
		if sent := b.tg.SentTo(testChat); len(sent) != 1 || sent[0].File == nil || string(sent[0].File.Data) != "queued long ago" {
			t.Errorf("sent %+v", sent)
		}
		if _, err := os.Stat(filepath.Join(b.ws, ".choirtmp", "send", "old.txt")); !os.IsNotExist(err) {
			t.Errorf("old.txt still exists after delivery: %v", err)
		}
		if _, err := os.Stat(secret); err != nil {
			t.Errorf("the other workspace's file was touched: %v", err)
		}
	})

	t.Run("EnqueueRefusesBadMessages", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		client := b.start(t)
		ctx := context.Background()
		bad := []jobs.OutboundParams{
			b.params("e1", "  ", testChat),
			func() jobs.OutboundParams {
				p := b.params("e2", "", testChat)
				p.Kind = jobs.OutboundDocument
				p.FilePath = "/etc/passwd"
				return p
			}(),
			func() jobs.OutboundParams {
				p := b.fileParams("e4", "", jobs.OutboundDocument, "../../etc/passwd")
				return p
			}(),
			func() jobs.OutboundParams {
				p := b.fileParams("e5", "", jobs.OutboundDocument, "report.pdf")
				p.Workspace = ""
				return p
			}(),
			func() jobs.OutboundParams {
				p := b.fileParams("e6", "", jobs.OutboundDocument, "report.pdf")
				p.FilePath = filepath.Join(b.ws, p.FilePath)
				return p
			}(),
			func() jobs.OutboundParams { p := b.params("e3", "x", testChat); p.Kind = "sticker"; return p }(),
		}
		for _, p := range bad {
			err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				_, err := jobs.EnqueueOutboundTx(ctx, tx, client, p)
				return err
			})
			if err == nil {
				t.Errorf("%s queued", p.MessageID)
			}
		}
		for _, bad := range []string{"../../etc/passwd", "/etc/passwd", "", "sub/../../x", ".choirtmp/send/../recv/a"} {
			if p, err := jobs.OutboundFilePath(bad); err == nil {
				t.Errorf("OutboundFilePath(%q) = %q: accepted a path leaving the send directory", bad, p)
			}
		}
		for _, good := range []string{"sub/report.pdf", ".choirtmp/send/sub/report.pdf", "./sub/report.pdf"} {
			if p, err := jobs.OutboundFilePath(good); err != nil || p != ".choirtmp/send/sub/report.pdf" {
				t.Errorf("OutboundFilePath(%q) = %q, %v", good, p, err)
			}
		}
	})

	t.Run("ChatsKeepOrderUnderPacing", func(t *testing.T) {
		t.Parallel()
		// 20 messages/s per chat keeps the test short; the pacing itself
		// is checked exactly in TestSendLimiter.
		b := setupDelivery(t, gateway.SendLimits{PerChat: 20, PerBot: 1000})
		client := b.start(t)
		var ps []jobs.OutboundParams
		for i := range 6 {
			ps = append(ps, b.params(fmt.Sprintf("a%d", i), fmt.Sprintf("a%d", i), testChat))
		}
		for i := range 3 {
			ps = append(ps, b.params(fmt.Sprintf("b%d", i), fmt.Sprintf("b%d", i), otherChat))
		}
		qs := b.enqueue(t, client, ps...)
		for _, q := range qs {
			b.waitRow(t, q.Row.OutboxID, "sent")
		}
		a, bb := texts(b.tg.SentTo(testChat)), texts(b.tg.SentTo(otherChat))
		if !slices.Equal(a, []string{"a0", "a1", "a2", "a3", "a4", "a5"}) || !slices.Equal(bb, []string{"b0", "b1", "b2"}) {
			t.Errorf("chat a got %v, chat b got %v", a, bb)
		}
		// The other chat was not held behind the first: its first message
		// went out before the first chat's last.
		all := texts(b.tg.Sent())
		if slices.Index(all, "b0") > slices.Index(all, "a5") {
			t.Errorf("chat b waited behind chat a: %v", all)
		}
		// Every run of a chat's job helps the chat's head, and a part is
		// marked only at the send gate, so two runs may both start a
		// request for the same part. The one whose gate finds the part
		// taken abandons its request before the body ends: the fake
		// answers that incomplete body 400, having read no parameter, and
		// nothing is sent. So count the calls that were answered, and
		// allow only abandoned ones besides.
		var answered int
		for _, c := range b.tg.Calls("sendMessage") {
			switch {
			case c.Status == http.StatusOK:
				answered++
			case c.Status == http.StatusBadRequest && len(c.Params) == 0:
			default:
				t.Errorf("sendMessage call %+v, neither answered nor abandoned", c)
			}
		}
		if answered != 9 {
			t.Errorf("%d sendMessage calls answered, want 9", answered)
		}
	})

	t.Run("RestartMidMessageResumes", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		// The second part is refused with a long retry_after; the first
		// process stops while the job is snoozed, and a second process
		// (new gateway, new limiter) finishes the message.
		var once sync.Once
		refused := make(chan struct{})
		b.tg.OnCall("sendMessage", func(c telegramtest.Call) {
			if strings.HasPrefix(c.Params["text"], "part 2") {
				once.Do(func() {
					b.tg.TooManyRequests("sendMessage", 1, 1)
					close(refused)
				})
			}
		})
		first := b.start(t)
		q := b.enqueue(t, first, b.params("resume", threeParts, testChat))[0]
		<-refused
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := first.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		row := b.waitRow(t, q.Row.OutboxID, "sent")
		sent := b.tg.SentTo(testChat)
		var got []string
		for _, m := range sent {
			got = append(got, m.Text[:6])
		}
		if !slices.Equal(got, []string{"part 1", "part 2", "part 3"}) || !slices.Equal(row.SentIds, messageIDs(sent)) {
			t.Errorf("sent %v, row ids %v", got, row.SentIds)
		}
	})

	t.Run("CrashAfterFirstPartDoesNotResendIt", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		ctx := context.Background()
		// The state a choird killed after recording part 1 leaves: the row
		// pending with one sent id, its job rescued to available.
		inserter, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{})
		if err != nil {
			t.Fatal(err)
		}
		q := b.enqueue(t, inserter, b.params("crashed", threeParts, testChat))[0]
		if _, err := b.pool.Exec(ctx, `UPDATE choir_control.outbox SET sent_ids = '{777}', attempts = 1
			WHERE outbox_id = $1`, q.Row.OutboxID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.pool.Exec(ctx, `UPDATE river_job SET attempt = 1, attempted_at = now() - interval '1 hour'
			WHERE kind = 'deliver_outbound' AND (args->>'outbox_id')::bigint = $1`, q.Row.OutboxID); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		row := b.waitRow(t, q.Row.OutboxID, "sent")
		sent := b.tg.SentTo(testChat)
		if len(sent) != 2 || !strings.HasPrefix(sent[0].Text, "part 2") || !strings.HasPrefix(sent[1].Text, "part 3") {
			t.Fatalf("sent %q", texts(sent))
		}
		if want := append([]int64{777}, messageIDs(sent)...); !slices.Equal(row.SentIds, want) {
			t.Errorf("sent_ids = %v, want %v", row.SentIds, want)
		}
	})

	t.Run("CrashMidSendDoesNotResendThePart", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		ctx := context.Background()
		// The state a choird killed while part 2 was on its way leaves:
		// part 1 recorded, part 2 marked as being sent by that process,
		// its job rescued. Part 2 may have reached the user: it is
		// recorded as sent (id 0) and never sent again; part 3 goes out.
		inserter, err := river.NewClient(riverpgxv5.New(b.pool), &river.Config{})
		if err != nil {
			t.Fatal(err)
		}
		q := b.enqueue(t, inserter, b.params("cut-off", threeParts, testChat))[0]
		if _, err := b.pool.Exec(ctx, `UPDATE choir_control.outbox SET sent_ids = '{777}', attempts = 1,
			attempt_part = 1, attempt_by = gen_random_uuid(), attempt_at = now() WHERE outbox_id = $1`, q.Row.OutboxID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.pool.Exec(ctx, `UPDATE river_job SET attempt = 1, attempted_at = now() - interval '1 hour'
			WHERE kind = 'deliver_outbound' AND (args->>'outbox_id')::bigint = $1`, q.Row.OutboxID); err != nil {
			t.Fatal(err)
		}
		b.start(t)
		row := b.waitRow(t, q.Row.OutboxID, "sent")
		sent := b.tg.SentTo(testChat)
		if len(sent) != 1 || !strings.HasPrefix(sent[0].Text, "part 3") {
			t.Fatalf("sent %q, want part 3 alone", texts(sent))
		}
		if want := []int64{777, 0, sent[0].MessageID}; !slices.Equal(row.SentIds, want) {
			t.Errorf("sent_ids = %v, want %v", row.SentIds, want)
		}
		if row.AttemptPart != nil || row.AttemptBy != nil {
			t.Errorf("attempt mark left: part %v by %v", row.AttemptPart, row.AttemptBy)
		}
	})

	t.Run("MarkIsClearedWithEveryOutcome", func(t *testing.T) {
		t.Parallel()
		b := setupDelivery(t, unlimited)
		// One transient failure, then success: neither leaves a mark, so
		// the retry sends the part (the failure did not reach the user).
		b.tg.Fail("sendMessage", 1, telegramtest.Fault{Code: 500})
		client := b.start(t)
		q := b.enqueue(t, client, b.params("retried", "hello once", testChat))[0]
		row := b.waitRow(t, q.Row.OutboxID, "sent")
		if n := len(b.tg.SentTo(testChat)); n != 1 {
			t.Errorf("sent %d messages, want 1", n)
		}
		if row.AttemptPart != nil || row.AttemptBy != nil || row.AttemptAt != nil {
			t.Errorf("attempt mark left: part %v by %v at %v", row.AttemptPart, row.AttemptBy, row.AttemptAt)
		}
	})
}

// BenchmarkOutboxCommitToSend measures the delivery overhead when no rate
// limit applies: from the commit of an outbox row and its job to the fake
// Telegram server (loopback) receiving sendMessage.
func BenchmarkOutboxCommitToSend(b *testing.B) {
	ctx := context.Background()
	pool := dbtest.NewPool(b)
	srv := telegramtest.NewServer(b)
	tg := srv.AddBot(testToken, "courier_bot")
	if _, err := db.New(pool).AgentUpsert(ctx, db.AgentUpsertParams{AgentID: testAgent, Config: json.RawMessage(`{}`)}); err != nil {
		b.Fatal(err)
	}
	arrived := make(chan time.Time, 1)
	tg.OnCall("sendMessage", func(telegramtest.Call) { arrived <- time.Now() })
	gw, err := gateway.New(gateway.Options{
		Gateways: map[string]config.Gateway{gatewayTG: {Type: config.GatewayTelegram, Secret: "tg-token"}},
		Secrets:  config.Secrets{"tg-token": testToken},
		APIURL:   srv.URL(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(gw.Close)
	workers := river.NewWorkers()
	if err := jobs.AddDeliveryWorker(workers, jobs.DeliveryDeps{Pool: pool, Sender: gw, Limiter: gateway.NewSendLimiter(unlimited)}); err != nil {
		b.Fatal(err)
	}
	name, qc := jobs.DeliveryQueue()
	client, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Queues: map[string]river.QueueConfig{name: qc}, Workers: workers,
		// The inserting client sends at most one insert notification per
		// queue per FetchCooldown (River's default 100 ms); an insert
		// within it waits for the delivery queue's 50 ms poll. See
		// DeliveryQueue.
		FetchCooldown: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { client.Stop(ctx) }) //nolint:errcheck

	i := 0
	deliver := func() time.Duration {
		i++
		p := jobs.OutboundParams{AgentID: testAgent, MessageID: fmt.Sprintf("bench-%d", i), Gateway: gatewayTG, DM: testDMName,
			ChatID: strconv.Itoa(i), Kind: jobs.OutboundText, Text: "pong"}
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := jobs.EnqueueOutboundTx(ctx, tx, client, p); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		committed := time.Now()
		return (<-arrived).Sub(committed)
	}
	// Warm up: River's start-up (leader election, first fetches) is not
	// what is measured.
	for range 50 {
		deliver()
	}
	var lat []time.Duration
	for b.Loop() {
		lat = append(lat, deliver())
	}
	if len(lat) > 0 {
		slices.Sort(lat)
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[min(len(lat)-1, len(lat)*99/100)].Microseconds()), "p99-µs")
		b.ReportMetric(0, "ns/op")
	}
}
