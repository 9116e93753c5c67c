package outbox_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/daemon/outbox/outboxtest"
	"github.com/choirhq/choir/db"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// cutOff queues text to the harness's chat in the state a choird killed
// inside the send gate of part `part` leaves: the parts before it
// recorded, that part marked as being sent by a process that is gone, the
// job rescued. It returns the row's id.
func cutOff(t *testing.T, b *outboxtest.Bundle, messageID, text string, part int) int64 {
	t.Helper()
	ctx := context.Background()
	inserter, err := river.NewClient(riverpgxv5.New(b.Pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	q := b.Enqueue(t, inserter, b.Params(messageID, text, outboxtest.Chat))[0]
	sent := make([]int64, part)
	for i := range sent {
		sent[i] = int64(700 + i)
	}
	if _, err := b.Pool.Exec(ctx, `UPDATE choir_control.outbox SET sent_ids = $2, attempts = $3,
		attempt_part = $3, attempt_by = gen_random_uuid(), attempt_at = now() WHERE outbox_id = $1`,
		q.Row.OutboxID, sent, part); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Pool.Exec(ctx, `UPDATE river_job SET attempt = 1, attempted_at = now() - interval '1 hour'
		WHERE kind = 'deliver_outbound' AND (args->>'outbox_id')::bigint = $1`, q.Row.OutboxID); err != nil {
		t.Fatal(err)
	}
	return q.Row.OutboxID
}

// notice waits for the notice about outbox row id to be sent and returns
// its row and the message the fake Bot API got for it.
func notice(t *testing.T, b *outboxtest.Bundle, id int64) (db.ChoirControlOutbox, telegramtest.Message) {
	t.Helper()
	row := b.WaitRow(t, noticeRow(t, b, id).OutboxID, "sent")
	for _, m := range b.TG.SentTo(outboxtest.Chat) {
		if m.MessageID == row.SentIds[len(row.SentIds)-1] {
			return row, m
		}
	}
	t.Fatalf("the notice %d was recorded sent as %v, but the Bot API has no such message", row.OutboxID, row.SentIds)
	return row, telegramtest.Message{}
}

// noticeRow waits for the notice about outbox row id to be queued.
func noticeRow(t *testing.T, b *outboxtest.Bundle, id int64) db.ChoirControlOutbox {
	t.Helper()
	var row db.ChoirControlOutbox
	outboxtest.WaitFor(t, "the notice row", func() bool {
		r, err := seam.Queries(b.Pool).OutboxGetByMessageID(context.Background(), db.OutboxGetByMessageIDParams{
			AgentID: outboxtest.Agent, MessageID: outbox.NoticeMessageID(id)})
		if err != nil && !errors.Is(err, choirsql.ErrNotFound) {
			t.Fatal(err)
		}
		row = r
		return err == nil
	})
	return row
}

// countText counts the messages to the harness's chat whose text is text.
func countText(b *outboxtest.Bundle, text string) int {
	n := 0
	for _, m := range b.TG.SentTo(outboxtest.Chat) {
		if m.Text == text {
			n++
		}
	}
	return n
}

func TestUnconfirmedReply(t *testing.T) {
	t.Parallel()
	chat := outbox.Chat{Gateway: outboxtest.Gateway, DM: outboxtest.DM, ChatID: strconv.FormatInt(outboxtest.Chat, 10)}

	t.Run("CutOffReplyIsOfferedNotSent", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		id := cutOff(t, b, "cut", "the answer is 42", 0)
		b.Start(t)
		row := b.WaitRow(t, id, "sent")
		if row.UnconfirmedAt == nil || len(row.SentIds) != 1 || row.SentIds[0] != 0 {
			t.Errorf("cut-off row = sent_ids %v, unconfirmed %v; want {0}, unconfirmed", row.SentIds, row.UnconfirmedAt)
		}
		n, m := notice(t, b, id)
		if n.ResendOf == nil || *n.ResendOf != id {
			t.Errorf("notice offers %v, want %d", n.ResendOf, id)
		}
		kb := m.Keyboard()
		if len(kb) != 1 || len(kb[0]) != 1 || kb[0][0].Text != "Send again" || kb[0][0].Data != "resend:"+strconv.FormatInt(id, 10) {
			t.Errorf("notice keyboard = %+v", kb)
		}
		if !strings.Contains(m.Text, "may not have arrived") || !strings.Contains(m.Text, "the answer is 42") ||
			!strings.Contains(m.Text, "/resend "+strconv.FormatInt(id, 10)) {
			t.Errorf("notice text = %q", m.Text)
		}
		// choird sends nothing again on its own: the Bot API has the
		// notice and nothing else.
		if got := b.TG.SentTo(outboxtest.Chat); len(got) != 1 || countText(b, "the answer is 42") != 0 {
			t.Errorf("sent %q, want the notice alone", outboxtest.Texts(got))
		}
	})

	t.Run("OneNoticePerReply", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		ctx := context.Background()
		// Part 2 of three is cut off; the next process is refused part 3
		// with a long retry_after and stops, cut off inside the gate of
		// part 3 too, as a second kill would leave it.
		//
		// Every send of part 3 is refused, as Telegram refuses them all
		// until retry_after has passed: the first process's other job for
		// the chat (the notice's, whose head is this reply) may try it
		// again before the channel's wait reaches it.
		var once sync.Once
		refused := make(chan struct{})
		b.TG.OnCall("sendMessage", func(c telegramtest.Call) {
			if strings.HasPrefix(c.Params["text"], "part 3") {
				b.TG.TooManyRequests("sendMessage", 1, 60)
				once.Do(func() { close(refused) })
			}
		})
		id := cutOff(t, b, "twice", threeParts, 1)
		first := b.Start(t)
		<-refused
		noticeRow(t, b, id)
		stop, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := first.Stop(stop); err != nil {
			t.Fatal(err)
		}
		if _, err := b.Pool.Exec(ctx, `UPDATE choir_control.outbox SET attempt_part = 2, attempt_by = gen_random_uuid(),
			attempt_at = now() WHERE outbox_id = $1`, id); err != nil {
			t.Fatal(err)
		}
		// The reply's job is rescued, and the 60 s Telegram asked for
		// have passed: the notice's job, snoozed behind the reply, is due
		// too.
		if _, err := b.Pool.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now()
			WHERE kind = 'deliver_outbound' AND state NOT IN ('completed', 'discarded', 'cancelled')`); err != nil {
			t.Fatal(err)
		}
		b.Start(t)
		row := b.WaitRow(t, id, "sent")
		if want := []int64{700, 0, 0}; !slices.Equal(row.SentIds, want) {
			t.Errorf("sent_ids = %v, want %v", row.SentIds, want)
		}
		var notices int
		b.Pool.QueryRow(ctx, `SELECT count(*) FROM choir_control.outbox WHERE resend_of = $1`, id).Scan(&notices)
		if notices != 1 {
			t.Errorf("%d notices about row %d, want 1", notices, id)
		}
		n, m := notice(t, b, id)
		if n := countText(b, m.Text); n != 1 {
			t.Errorf("the notice was sent %d times, want once", n)
		}
		if n.ResendOf == nil || *n.ResendOf != id {
			t.Errorf("notice offers %v, want %d", n.ResendOf, id)
		}
	})

	t.Run("ResendSendsTheReplyOnceWhoeverAsks", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		id := cutOff(t, b, "long", threeParts, 0)
		client := b.Start(t)
		b.WaitRow(t, id, "sent")
		_, nm := notice(t, b, id)
		rs := outbox.NewResends(b.Pool)
		rs.SetJobs(client)
		// Presses and /resends at once: one UPDATE ... WHERE wins.
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() { _, errs[i] = rs.Resend(context.Background(), chat, id, "telegram:"+outboxtest.DM) })
		}
		wg.Wait()
		won := 0
		for _, err := range errs {
			switch {
			case err == nil:
				won++
			case !errors.Is(err, outbox.ErrResent):
				t.Errorf("resend: %v, want nil or ErrResent", err)
			}
		}
		if won != 1 {
			t.Fatalf("%d resends won, want 1", won)
		}
		q, err := seam.Queries(b.Pool).OutboxGetByMessageID(context.Background(), db.OutboxGetByMessageIDParams{
			AgentID: outboxtest.Agent, MessageID: outbox.ResendMessageID(id)})
		if err != nil {
			t.Fatal(err)
		}
		resent := b.WaitRow(t, q.OutboxID, "sent")
		// The resent text is exactly the reply, cut as it was.
		var parts []string
		for _, m := range b.TG.SentTo(outboxtest.Chat) {
			if m.MessageID > nm.MessageID {
				parts = append(parts, m.Text)
			}
		}
		if got := strings.Join(parts, "\n"); got != threeParts || len(resent.SentIds) != 3 || resent.Text != threeParts {
			t.Errorf("resent %d parts (%d bytes joined), row %d ids; want the reply's %d bytes in 3 parts",
				len(parts), len(got), len(resent.SentIds), len(threeParts))
		}
		// Asking again sends nothing more.
		if _, err := rs.Resend(context.Background(), chat, id, "telegram:"+outboxtest.DM); !errors.Is(err, outbox.ErrResent) {
			t.Errorf("a later resend: %v, want ErrResent", err)
		}
		if left, err := rs.Unconfirmed(context.Background(), chat); err != nil || len(left) != 0 {
			t.Errorf("unconfirmed after the resend = %d rows, %v; want none", len(left), err)
		}
	})

	t.Run("AnotherChatCannotResend", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		id := cutOff(t, b, "mine", "for the owner only", 0)
		client := b.Start(t)
		b.WaitRow(t, id, "sent")
		notice(t, b, id)
		rs := outbox.NewResends(b.Pool)
		rs.SetJobs(client)
		for _, other := range []outbox.Chat{
			{Gateway: outboxtest.Gateway, DM: "stranger", ChatID: strconv.FormatInt(outboxtest.OtherChat, 10)},
			{Gateway: outboxtest.Gateway, DM: "stranger", ChatID: chat.ChatID},
			{Gateway: outboxtest.Gateway, DM: outboxtest.DM, ChatID: strconv.FormatInt(outboxtest.OtherChat, 10)},
		} {
			if _, err := rs.Resend(context.Background(), other, id, "telegram:stranger"); !errors.Is(err, outbox.ErrNotYours) {
				t.Errorf("resend from %+v: %v, want ErrNotYours", other, err)
			}
			if rows, err := rs.Unconfirmed(context.Background(), other); err != nil || len(rows) != 0 {
				t.Errorf("%+v sees %d unconfirmed rows (%v), want none", other, len(rows), err)
			}
		}
		if row := b.Row(t, id); row.ResentAt != nil {
			t.Errorf("row resent at %v by %v", row.ResentAt, row.ResentBy)
		}
		if n := len(b.TG.Sent()); n != 1 {
			t.Errorf("%d messages sent, want the notice alone", n)
		}
	})

	t.Run("CutOffFileIsNamedNotOffered", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		ctx := context.Background()
		if err := os.WriteFile(filepath.Join(b.WS, ".choirtmp", "send", "report.pdf"), []byte("%PDF-1.7"), 0o644); err != nil {
			t.Fatal(err)
		}
		inserter, err := river.NewClient(riverpgxv5.New(b.Pool), &river.Config{})
		if err != nil {
			t.Fatal(err)
		}
		q := b.Enqueue(t, inserter, b.FileParams("file", "the report", message.Document, "report.pdf"))[0]
		if _, err := b.Pool.Exec(ctx, `UPDATE choir_control.outbox SET attempt_part = 0, attempt_by = gen_random_uuid(),
			attempt_at = now() WHERE outbox_id = $1`, q.Row.OutboxID); err != nil {
			t.Fatal(err)
		}
		client := b.Start(t)
		b.WaitRow(t, q.Row.OutboxID, "sent")
		n, m := notice(t, b, q.Row.OutboxID)
		if n.ResendOf != nil || m.Keyboard() != nil || !strings.Contains(m.Text, "report.pdf") ||
			!strings.Contains(m.Text, "ask the agent to send it again") {
			t.Errorf("file notice = %q, keyboard %+v, offers %v; want the file named, no button", m.Text, m.Keyboard(), n.ResendOf)
		}
		rs := outbox.NewResends(b.Pool)
		rs.SetJobs(client)
		if _, err := rs.Resend(ctx, chat, q.Row.OutboxID, "telegram:"+outboxtest.DM); !errors.Is(err, outbox.ErrNotText) {
			t.Errorf("resend of a file: %v, want ErrNotText", err)
		}
		if rows, err := rs.Unconfirmed(ctx, chat); err != nil || len(rows) != 0 {
			t.Errorf("unconfirmed lists %d rows (%v), want no file", len(rows), err)
		}
		if got := b.TG.SentTo(outboxtest.Chat); len(got) != 1 {
			t.Errorf("sent %q, want the notice alone", outboxtest.Texts(got))
		}
	})

	t.Run("ConfirmedReplyHasNoNotice", func(t *testing.T) {
		t.Parallel()
		b := outboxtest.Setup(t, unlimited)
		client := b.Start(t)
		q := b.Enqueue(t, client, b.Params("fine", "arrived fine", outboxtest.Chat))[0]
		row := b.WaitRow(t, q.Row.OutboxID, "sent")
		b.WaitJob(t, q.Row.OutboxID, "completed")
		if row.UnconfirmedAt != nil || row.SentIds[0] == 0 {
			t.Errorf("confirmed row = %+v", row)
		}
		_, err := seam.Queries(b.Pool).OutboxGetByMessageID(context.Background(), db.OutboxGetByMessageIDParams{
			AgentID: outboxtest.Agent, MessageID: outbox.NoticeMessageID(q.Row.OutboxID)})
		if !errors.Is(err, choirsql.ErrNotFound) {
			t.Errorf("notice about a confirmed reply: %v", err)
		}
		rs := outbox.NewResends(b.Pool)
		rs.SetJobs(client)
		if _, err := rs.Resend(context.Background(), chat, q.Row.OutboxID, "telegram:"+outboxtest.DM); !errors.Is(err, outbox.ErrConfirmed) {
			t.Errorf("resend of a confirmed reply: %v, want ErrConfirmed", err)
		}
		if n := len(b.TG.Sent()); n != 1 {
			t.Errorf("%d messages sent, want the reply alone", n)
		}
	})
}
