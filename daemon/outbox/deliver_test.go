package outbox_test

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
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/daemon/outbox/outboxtest"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/sql/seam"
)

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
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		q := b.Enqueue(t, client, b.Params("m1", "hello there", outboxtest.Chat))[0]
		if !q.Created || q.Row.Status != "pending" {
			t.Fatalf("queued = %+v", q)
		}
		row := b.WaitRow(t, q.Row.OutboxID, "sent")
		sent := b.TG.SentTo(outboxtest.Chat)
		if len(sent) != 1 || sent[0].Text != "hello there" {
			t.Fatalf("sent = %+v", sent)
		}
		if !slices.Equal(row.SentIds, outboxtest.MessageIDs(sent)) || row.SentAt == nil || row.Attempts != 1 {
			t.Errorf("row = %+v, want sent_ids %v", row, outboxtest.MessageIDs(sent))
		}
		b.WaitJob(t, q.Row.OutboxID, "completed")
	})

	t.Run("LongTextIsSplitInOrder", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		var lines []string
		for i := range 300 {
			lines = append(lines, fmt.Sprintf("line %03d %s", i, strings.Repeat("x", 40)))
		}
		text := strings.Join(lines, "\n")
		q := b.Enqueue(t, client, b.Params("long", text, outboxtest.Chat))[0]
		row := b.WaitRow(t, q.Row.OutboxID, "sent")
		sent := b.TG.SentTo(outboxtest.Chat)
		if len(sent) < 4 || !slices.Equal(row.SentIds, outboxtest.MessageIDs(sent)) {
			t.Fatalf("%d messages, row sent_ids %v", len(sent), row.SentIds)
		}
		if got := strings.Join(outboxtest.Texts(sent), "\n"); got != text {
			t.Errorf("parts joined differ from the text (%d vs %d bytes)", len(got), len(text))
		}
	})

	t.Run("EnqueueTwiceQueuesOnce", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		first := b.Enqueue(t, client, b.Params("same", "only once", outboxtest.Chat))[0]
		second := b.Enqueue(t, client, b.Params("same", "only once", outboxtest.Chat))[0]
		if second.Created || second.Row.OutboxID != first.Row.OutboxID {
			t.Errorf("second enqueue = %+v, want the first row, not created", second)
		}
		b.WaitRow(t, first.Row.OutboxID, "sent")
		if js := b.JobsOf(t, first.Row.OutboxID); len(js) != 1 {
			t.Errorf("%d jobs for one message, want 1", len(js))
		}
		// Queued again after delivery: still the same row, still sent.
		third := b.Enqueue(t, client, b.Params("same", "only once", outboxtest.Chat))[0]
		if third.Created || third.Row.Status != "sent" {
			t.Errorf("enqueue after delivery = %+v", third)
		}
		if n := len(b.TG.Sent()); n != 1 {
			t.Errorf("%d messages sent, want 1", n)
		}
	})

	t.Run("JobRunTwiceSendsOnce", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		q := b.Enqueue(t, client, b.Params("twice", "just once", outboxtest.Chat))[0]
		b.WaitRow(t, q.Row.OutboxID, "sent")
		// A second job for the same row, as a duplicated or replayed job
		// would be.
		if _, err := client.Insert(context.Background(), outbox.DeliverArgs{OutboxID: q.Row.OutboxID}, nil); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(30 * time.Second)
		for {
			js := b.JobsOf(t, q.Row.OutboxID)
			if len(js) == 2 && js[1].State == "completed" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("jobs = %+v", js)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n := len(b.TG.Calls("sendMessage")); n != 1 {
			t.Errorf("%d sendMessage calls, want 1", n)
		}
	})

	t.Run("RetryAfterSnoozesWithoutUsingAnAttempt", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		b.TG.TooManyRequests("sendMessage", 1, 1)
		client := b.Start(t)
		q := b.Enqueue(t, client, b.Params("flood", "after the flood", outboxtest.Chat))[0]
		row := b.WaitRow(t, q.Row.OutboxID, "sent")
		j := b.WaitJob(t, q.Row.OutboxID, "completed")
		calls := b.TG.Calls("sendMessage")
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
		if row.Attempts != 2 || row.LastError != "" || len(b.TG.Sent()) != 1 {
			t.Errorf("row = %+v, sent %d", row, len(b.TG.Sent()))
		}
	})

	t.Run("TransientErrorIsRetried", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		b.TG.Fail("sendMessage", 1, telegramtest.Fault{Code: 502})
		client := b.Start(t)
		q := b.Enqueue(t, client, b.Params("bumpy", "eventually", outboxtest.Chat))[0]
		row := b.WaitRow(t, q.Row.OutboxID, "sent")
		j := b.WaitJob(t, q.Row.OutboxID, "completed")
		if j.Attempt != 2 || row.Attempts != 2 || len(b.TG.Sent()) != 1 {
			t.Errorf("job %+v, row %+v, sent %d", j, row, len(b.TG.Sent()))
		}
	})

	t.Run("BlockedChatFailsAtOnce", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		b.TG.Block(outboxtest.Chat)
		client := b.Start(t)
		qs := b.Enqueue(t, client, b.Params("b1", "to a blocked chat", outboxtest.Chat), b.Params("b2", "to a good chat", outboxtest.OtherChat))
		row := b.WaitRow(t, qs[0].Row.OutboxID, "failed")
		if !strings.Contains(row.LastError, "blocked") || row.Attempts != 1 {
			t.Errorf("failed row = %+v", row)
		}
		if j := b.WaitJob(t, qs[0].Row.OutboxID, "completed"); j.Attempt != 1 {
			t.Errorf("job = %+v, want completed after one attempt", j)
		}
		b.WaitRow(t, qs[1].Row.OutboxID, "sent")
	})

	t.Run("FilesAreSentThenRemoved", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		ogg := append([]byte("OggS\x00\x02"), make([]byte, 22)...)
		ogg = append(append(ogg, 0x01, 0x13), []byte("OpusHead\x01\x01")...)
		files := []struct {
			kind, name, method string
			data               []byte
			caption            string
		}{
			{message.Document, "report.pdf", "sendDocument", []byte("%PDF-1.7 report"), "the report"},
			{message.Photo, "chart.png", "sendPhoto", []byte("\x89PNG chart"), ""},
			{message.Voice, "reply.ogg", "sendVoice", ogg, ""},
			{message.Video, "clip.mp4", "sendVideo", []byte("....ftypmp42"), "a clip"},
			{message.Voice, "not-opus.mp3", "sendDocument", []byte("ID3 mp3 data"), ""},
		}
		var ps []outbox.Params
		for i, f := range files {
			p := filepath.Join(b.WS, ".choirtmp", "send", f.name)
			if err := os.WriteFile(p, f.data, 0o644); err != nil {
				t.Fatal(err)
			}
			ps = append(ps, b.FileParams(fmt.Sprintf("f%d", i), f.caption, f.kind, f.name))
		}
		qs := b.Enqueue(t, client, ps...)
		for _, q := range qs {
			b.WaitRow(t, q.Row.OutboxID, "sent")
		}
		sent := b.TG.SentTo(outboxtest.Chat)
		if len(sent) != len(files) {
			t.Fatalf("%d sent, want %d", len(sent), len(files))
		}
		for i, f := range files {
			m := sent[i]
			if m.Method != f.method || m.File == nil || string(m.File.Data) != string(f.data) || m.Text != f.caption {
				t.Errorf("file %s sent as %s %+v caption %q", f.name, m.Method, m.File, m.Text)
			}
			if (f.kind == message.Document || f.kind == message.Video) && m.File.Name != f.name {
				t.Errorf("file %s uploaded as %q", f.name, m.File.Name)
			}
			// The file goes after the row's commit: wait for it, as the
			// row can be seen sent a moment before.
			path := filepath.Join(b.WS, ps[i].FilePath)
			deadline := time.Now().Add(30 * time.Second)
			for _, err := os.Stat(path); !os.IsNotExist(err); _, err = os.Stat(path) {
				if time.Now().After(deadline) {
					t.Errorf("%s still exists 30 s after delivery: %v", f.name, err)
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	})

	t.Run("LongCaptionFollowsTheFile", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		p := filepath.Join(b.WS, ".choirtmp", "send", "data.csv")
		os.WriteFile(p, []byte("a,b\n1,2\n"), 0o644) //nolint:errcheck
		caption := strings.Repeat("word ", 300)      // 1500 characters
		q := b.Enqueue(t, client, b.FileParams("cap", caption, message.Document, "data.csv"))[0]
		row := b.WaitRow(t, q.Row.OutboxID, "sent")
		sent := b.TG.SentTo(outboxtest.Chat)
		if len(sent) != 2 || sent[0].Method != "sendDocument" || sent[0].Text != "" || sent[1].Method != "sendMessage" ||
			sent[1].Text != strings.TrimSpace(caption) || len(row.SentIds) != 2 {
			t.Errorf("sent = %+v, row ids %v", sent, row.SentIds)
		}
	})

	t.Run("FileOutsideTheWorkspaceIsRefused", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		outside := filepath.Join(t.TempDir(), "secrets.json")
		os.WriteFile(outside, []byte(`{"token":"x"}`), 0o600) //nolint:errcheck
		link := filepath.Join(b.WS, ".choirtmp", "send", "innocent.txt")
		if err := os.Symlink(outside, link); err != nil {
			t.Fatal(err)
		}
		q := b.Enqueue(t, client, b.FileParams("escape", "", message.Document, "innocent.txt"))[0]
		row := b.WaitRow(t, q.Row.OutboxID, "failed")
		if len(b.TG.Sent()) != 0 {
			t.Errorf("sent %+v", b.TG.Sent())
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
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		secret := filepath.Join(b.Other, ".choirtmp", "send", "secret.txt")
		if err := os.WriteFile(secret, []byte("the other agent's file"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(b.Other, filepath.Join(b.WS, ".choirtmp", "send", "sub")); err != nil {
			t.Fatal(err)
		}
		q := b.Enqueue(t, client, b.FileParams("cross", "", message.Document, "sub/.choirtmp/send/secret.txt"))[0]
		row := b.WaitRow(t, q.Row.OutboxID, "failed")
		if len(b.TG.Sent()) != 0 {
			t.Errorf("sent %+v", b.TG.Sent())
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
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		if err := syscall.Mkfifo(filepath.Join(b.WS, ".choirtmp", "send", "pipe.pdf"), 0o644); err != nil {
			t.Fatal(err)
		}
		qs := b.Enqueue(t, client, b.FileParams("fifo", "", message.Document, "pipe.pdf"),
			b.Params("after", "still here", outboxtest.Chat))
		row := b.WaitRow(t, qs[0].Row.OutboxID, "failed")
		b.WaitRow(t, qs[1].Row.OutboxID, "sent")
		if !strings.Contains(row.LastError, "not a regular file") {
			t.Errorf("last error %q", row.LastError)
		}
		if sent := b.TG.SentTo(outboxtest.Chat); len(sent) != 1 || sent[0].Text != "still here" {
			t.Errorf("sent %+v", sent)
		}
	})

	t.Run("RowsWithAbsolutePathsStillWork", func(t *testing.T) {
		t.Parallel()
		// Rows queued before rows named their workspace hold an absolute
		// path. It is mapped onto the configured workspace that holds it,
		// and a link inside it cannot lead into another.
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		ctx := context.Background()
		if err := os.WriteFile(filepath.Join(b.WS, ".choirtmp", "send", "old.txt"), []byte("queued long ago"), 0o644); err != nil {
			t.Fatal(err)
		}
		secret := filepath.Join(b.Other, ".choirtmp", "send", "secret.txt")
		if err := os.WriteFile(secret, []byte("the other agent's file"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(b.Other, filepath.Join(b.WS, ".choirtmp", "send", "sub")); err != nil {
			t.Fatal(err)
		}
		var ids []int64
		for i, p := range []string{".choirtmp/send/old.txt", ".choirtmp/send/sub/.choirtmp/send/secret.txt"} {
			err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
				row, err := seam.Queries(tx).OutboxInsert(ctx, db.OutboxInsertParams{AgentID: outboxtest.Agent, MessageID: fmt.Sprintf("legacy-%d", i),
					Gateway: outboxtest.Gateway, Dm: outboxtest.DM, ChatID: strconv.FormatInt(outboxtest.Chat, 10), Kind: message.Document,
					FilePath: filepath.Join(b.WS, p)})
				if err != nil {
					return err
				}
				ids = append(ids, row.OutboxID)
				_, err = client.InsertTx(ctx, tx, outbox.DeliverArgs{OutboxID: row.OutboxID}, nil)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
		}
		b.WaitRow(t, ids[0], "sent")
		b.WaitRow(t, ids[1], "failed")
		if sent := b.TG.SentTo(outboxtest.Chat); len(sent) != 1 || sent[0].File == nil || string(sent[0].File.Data) != "queued long ago" {
			t.Errorf("sent %+v", sent)
		}
		if _, err := os.Stat(filepath.Join(b.WS, ".choirtmp", "send", "old.txt")); !os.IsNotExist(err) {
			t.Errorf("old.txt still exists after delivery: %v", err)
		}
		if _, err := os.Stat(secret); err != nil {
			t.Errorf("the other workspace's file was touched: %v", err)
		}
	})

	t.Run("EnqueueRefusesBadMessages", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		ctx := context.Background()
		bad := []outbox.Params{
			b.Params("e1", "  ", outboxtest.Chat),
			func() outbox.Params {
				p := b.Params("e2", "", outboxtest.Chat)
				p.Kind = message.Document
				p.FilePath = "/etc/passwd"
				return p
			}(),
			func() outbox.Params {
				p := b.FileParams("e4", "", message.Document, "../../etc/passwd")
				return p
			}(),
			func() outbox.Params {
				p := b.FileParams("e5", "", message.Document, "report.pdf")
				p.Workspace = ""
				return p
			}(),
			func() outbox.Params {
				p := b.FileParams("e6", "", message.Document, "report.pdf")
				p.FilePath = filepath.Join(b.WS, p.FilePath)
				return p
			}(),
			func() outbox.Params { p := b.Params("e3", "x", outboxtest.Chat); p.Kind = "sticker"; return p }(),
		}
		for _, p := range bad {
			err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
				_, err := outbox.EnqueueTx(ctx, tx, client, p)
				return err
			})
			if err == nil {
				t.Errorf("%s queued", p.MessageID)
			}
		}
		for _, bad := range []string{"../../etc/passwd", "/etc/passwd", "", "sub/../../x", ".choirtmp/send/../recv/a"} {
			if p, err := message.FilePath(bad); err == nil {
				t.Errorf("OutboundFilePath(%q) = %q: accepted a path leaving the send directory", bad, p)
			}
		}
		for _, good := range []string{"sub/report.pdf", ".choirtmp/send/sub/report.pdf", "./sub/report.pdf"} {
			if p, err := message.FilePath(good); err != nil || p != ".choirtmp/send/sub/report.pdf" {
				t.Errorf("OutboundFilePath(%q) = %q, %v", good, p, err)
			}
		}
	})

	t.Run("ChatsKeepOrderUnderPacing", func(t *testing.T) {
		t.Parallel()
		// 20 messages/s per chat keeps the test short; the pacing itself
		// is checked exactly in TestSendLimiter.
		b := outboxtest.Setup(t, gateway.SendLimits{PerChat: 20, PerBot: 1000})
		client := b.Start(t)
		var ps []outbox.Params
		for i := range 6 {
			ps = append(ps, b.Params(fmt.Sprintf("a%d", i), fmt.Sprintf("a%d", i), outboxtest.Chat))
		}
		for i := range 3 {
			ps = append(ps, b.Params(fmt.Sprintf("b%d", i), fmt.Sprintf("b%d", i), outboxtest.OtherChat))
		}
		qs := b.Enqueue(t, client, ps...)
		for _, q := range qs {
			b.WaitRow(t, q.Row.OutboxID, "sent")
		}
		a, bb := outboxtest.Texts(b.TG.SentTo(outboxtest.Chat)), outboxtest.Texts(b.TG.SentTo(outboxtest.OtherChat))
		if !slices.Equal(a, []string{"a0", "a1", "a2", "a3", "a4", "a5"}) || !slices.Equal(bb, []string{"b0", "b1", "b2"}) {
			t.Errorf("chat a got %v, chat b got %v", a, bb)
		}
		// The other chat was not held behind the first: its first message
		// went out before the first chat's last.
		all := outboxtest.Texts(b.TG.Sent())
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
		for _, c := range b.TG.Calls("sendMessage") {
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
		b := outboxtest.Setup(t, unlimited)
		// The second part is refused with a long retry_after; the first
		// process stops while the job is snoozed, and a second process
		// (new gateway, new limiter) finishes the message.
		var once sync.Once
		refused := make(chan struct{})
		b.TG.OnCall("sendMessage", func(c telegramtest.Call) {
			if strings.HasPrefix(c.Params["text"], "part 2") {
				once.Do(func() {
					b.TG.TooManyRequests("sendMessage", 1, 1)
					close(refused)
				})
			}
		})
		first := b.Start(t)
		q := b.Enqueue(t, first, b.Params("resume", threeParts, outboxtest.Chat))[0]
		<-refused
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := first.Stop(ctx); err != nil {
			t.Fatal(err)
		}
		b.Start(t)
		row := b.WaitRow(t, q.Row.OutboxID, "sent")
		sent := b.TG.SentTo(outboxtest.Chat)
		var got []string
		for _, m := range sent {
			got = append(got, m.Text[:6])
		}
		if !slices.Equal(got, []string{"part 1", "part 2", "part 3"}) || !slices.Equal(row.SentIds, outboxtest.MessageIDs(sent)) {
			t.Errorf("sent %v, row ids %v", got, row.SentIds)
		}
	})

	t.Run("CrashAfterFirstPartDoesNotResendIt", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		ctx := context.Background()
		// The state a choird killed after recording part 1 leaves: the row
		// pending with one sent id, its job rescued to available.
		inserter, err := river.NewClient(riverpgxv5.New(b.Pool), &river.Config{})
		if err != nil {
			t.Fatal(err)
		}
		q := b.Enqueue(t, inserter, b.Params("crashed", threeParts, outboxtest.Chat))[0]
		if _, err := b.Pool.Exec(ctx, `UPDATE choir_control.outbox SET sent_ids = '{777}', attempts = 1
			WHERE outbox_id = $1`, q.Row.OutboxID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Pool.Exec(ctx, `UPDATE river_job SET attempt = 1, attempted_at = now() - interval '1 hour'
			WHERE kind = 'deliver_outbound' AND (args->>'outbox_id')::bigint = $1`, q.Row.OutboxID); err != nil {
			t.Fatal(err)
		}
		b.Start(t)
		row := b.WaitRow(t, q.Row.OutboxID, "sent")
		sent := b.TG.SentTo(outboxtest.Chat)
		if len(sent) != 2 || !strings.HasPrefix(sent[0].Text, "part 2") || !strings.HasPrefix(sent[1].Text, "part 3") {
			t.Fatalf("sent %q", outboxtest.Texts(sent))
		}
		if want := append([]int64{777}, outboxtest.MessageIDs(sent)...); !slices.Equal(row.SentIds, want) {
			t.Errorf("sent_ids = %v, want %v", row.SentIds, want)
		}
	})

	t.Run("CrashMidSendDoesNotResendThePart", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		ctx := context.Background()
		// The state a choird killed while part 2 was on its way leaves:
		// part 1 recorded, part 2 marked as being sent by that process,
		// its job rescued. Part 2 may have reached the user: it is
		// recorded as sent (id 0) and never sent again; part 3 goes out.
		inserter, err := river.NewClient(riverpgxv5.New(b.Pool), &river.Config{})
		if err != nil {
			t.Fatal(err)
		}
		q := b.Enqueue(t, inserter, b.Params("cut-off", threeParts, outboxtest.Chat))[0]
		if _, err := b.Pool.Exec(ctx, `UPDATE choir_control.outbox SET sent_ids = '{777}', attempts = 1,
			attempt_part = 1, attempt_by = gen_random_uuid(), attempt_at = now() WHERE outbox_id = $1`, q.Row.OutboxID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Pool.Exec(ctx, `UPDATE river_job SET attempt = 1, attempted_at = now() - interval '1 hour'
			WHERE kind = 'deliver_outbound' AND (args->>'outbox_id')::bigint = $1`, q.Row.OutboxID); err != nil {
			t.Fatal(err)
		}
		b.Start(t)
		row := b.WaitRow(t, q.Row.OutboxID, "sent")
		// The notice that the reply may not have arrived is queued with
		// the cut-off part's record and may or may not be out yet: it is
		// not part of the reply.
		sent := slices.DeleteFunc(b.TG.SentTo(outboxtest.Chat), func(m telegramtest.Message) bool {
			return strings.HasPrefix(m.Text, "A reply may not have arrived")
		})
		if len(sent) != 1 || !strings.HasPrefix(sent[0].Text, "part 3") {
			t.Fatalf("sent %q, want part 3 alone", outboxtest.Texts(sent))
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
		b := outboxtest.Setup(t, unlimited)
		// One transient failure, then success: neither leaves a mark, so
		// the retry sends the part (the failure did not reach the user).
		b.TG.Fail("sendMessage", 1, telegramtest.Fault{Code: 500})
		client := b.Start(t)
		q := b.Enqueue(t, client, b.Params("retried", "hello once", outboxtest.Chat))[0]
		row := b.WaitRow(t, q.Row.OutboxID, "sent")
		if n := len(b.TG.SentTo(outboxtest.Chat)); n != 1 {
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
	tg := srv.AddBot(outboxtest.Token, "courier_bot")
	if _, err := seam.Queries(pool).AgentUpsert(ctx, db.AgentUpsertParams{AgentID: outboxtest.Agent, Config: json.RawMessage(`{}`)}); err != nil {
		b.Fatal(err)
	}
	arrived := make(chan time.Time, 1)
	tg.OnCall("sendMessage", func(telegramtest.Call) { arrived <- time.Now() })
	gw, err := gateway.New(gateway.Options{
		Gateways: map[string]config.Gateway{outboxtest.Gateway: {Type: config.GatewayTelegram, Secret: "tg-token"}},
		Secrets:  config.Secrets{"tg-token": outboxtest.Token},
		APIURL:   srv.URL(),
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(gw.Close)
	workers := river.NewWorkers()
	if err := outbox.AddDeliveryWorker(workers, outbox.Delivery{Pool: pool, Sender: gw, Limiter: gateway.NewSendLimiter(unlimited)}); err != nil {
		b.Fatal(err)
	}
	name, qc := outbox.DeliveryQueue()
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
		p := outbox.Params{AgentID: outboxtest.Agent, MessageID: fmt.Sprintf("bench-%d", i), Gateway: outboxtest.Gateway, DM: outboxtest.DM,
			ChatID: strconv.Itoa(i), Kind: message.Text, Text: "pong"}
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := outbox.EnqueueTx(ctx, tx, client, p); err != nil {
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
