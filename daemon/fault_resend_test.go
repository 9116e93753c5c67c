package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/sql/seam"
)

// The send gate's kill point. A trigger, installed in the test's database
// only, makes the statement that marks a part of a "cut-" message as being
// sent (the gate's commit, OutboxAttemptBegin) wait for an advisory lock
// the test holds. choird is then inside the send gate: its request to the
// Bot API is on the wire but for its last bytes, which it writes only once
// the mark has committed. The test kills choird there, then lets the
// statement go on: it commits the mark, as the gate's commit would have
// just before the kill, and choird never writes the last bytes. That is
// exactly the state a kill between the gate's commit and the request's
// last byte leaves.
const gateHoldKey = 31004

const gateHoldTrigger = `
CREATE FUNCTION public.hold_send_gate() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF NEW.message_id LIKE 'cut-%' AND NEW.attempt_part IS NOT NULL AND OLD.attempt_part IS NULL THEN
        PERFORM pg_advisory_xact_lock(31004);
    END IF;
    RETURN NEW;
END;
$$;
CREATE TRIGGER hold_send_gate AFTER UPDATE ON choir_control.outbox
    FOR EACH ROW EXECUTE FUNCTION public.hold_send_gate();`

// The Telegram side: alice's regular DM gets the replies; bob's is
// another regular DM.
const (
	gateToken = "4343:resend-test-token"
	gateAlice = int64(4301)
	gateBob   = int64(4302)
)

// gateEnv is choird as a process, with a Telegram gateway to the fake Bot
// API, and the database it runs on.
type gateEnv struct {
	pool   *pgxpool.Pool
	bot    *telegramtest.Bot
	choird *choirdtest.Process
	ins    *river.Client[pgx.Tx]
}

func newGateEnv(t *testing.T) *gateEnv {
	t.Helper()
	url := dbtest.NewDatabase(t)
	e := &gateEnv{pool: dbtest.Connect(t, url)}
	srv := telegramtest.NewServer(t)
	e.bot = srv.AddBot(gateToken, "gate_bot")
	e.choird = choirdtest.StartProcess(t, choirdtest.WithTwoAgents(choirdtest.Options{DatabaseURL: url,
		Edit: func(c *config.Config, s config.Secrets) {
			c.Gateways["tg"] = config.Gateway{Type: config.GatewayTelegram, Secret: "tg-bot"}
			s["tg-bot"] = gateToken
			c.DMs["alice"] = config.DM{Gateway: "tg", UserID: strconv.FormatInt(gateAlice, 10)}
			c.DMs["bob"] = config.DM{Gateway: "tg", UserID: strconv.FormatInt(gateBob, 10)}
		},
		Daemon: daemon.Options{TelegramAPIURL: srv.URL()}}))
	if _, err := seam.Queries(e.pool).AgentUpsert(t.Context(), db.AgentUpsertParams{AgentID: "assistant",
		Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.pool.Exec(t.Context(), gateHoldTrigger); err != nil {
		t.Fatal(err)
	}
	ins, err := river.NewClient(riverpgxv5.New(e.pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	e.ins = ins
	return e
}

// reply queues a reply of assistant to alice, as SEND_OUTBOUND does.
func (e *gateEnv) reply(t *testing.T, messageID, text string) int64 {
	t.Helper()
	var q outbox.Queued
	err := pgx.BeginFunc(t.Context(), e.pool, func(tx pgx.Tx) error {
		var err error
		q, err = outbox.EnqueueTx(t.Context(), tx, e.ins, outbox.Params{AgentID: "assistant", MessageID: messageID,
			Gateway: "tg", DM: "alice", ChatID: strconv.FormatInt(gateAlice, 10), Kind: message.Text, Text: text})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return q.Row.OutboxID
}

// killInGate queues a reply whose message id starts "cut-", kills choird
// inside the reply's send gate, restarts it, and returns the reply's
// outbox id.
func (e *gateEnv) killInGate(t *testing.T, messageID, text string) int64 {
	t.Helper()
	ctx := t.Context()
	hold, err := e.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Release()
	if _, err := hold.Exec(ctx, "SELECT pg_advisory_lock($1)", gateHoldKey); err != nil {
		t.Fatal(err)
	}
	id := e.reply(t, messageID, text)
	choirdtest.WaitFor(t, "choird inside the send gate", e.choird.Logs, func() bool {
		var waiting bool
		e.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND objid::bigint = $1 AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`,
			gateHoldKey).Scan(&waiting)
		return waiting
	})
	abandoned := len(abandonedSends(e.bot))
	if err := e.choird.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The Bot API saw the request cut off before its end: it read no
	// parameter of it, and sent nothing.
	e.wait(t, "the cut-off request at the Bot API", func() bool { return len(abandonedSends(e.bot)) > abandoned })
	if _, err := hold.Exec(ctx, "SELECT pg_advisory_unlock($1)", gateHoldKey); err != nil {
		t.Fatal(err)
	}
	// The mark commits: choird died inside the gate, after its commit.
	choirdtest.WaitFor(t, "the send gate's mark", e.choird.Logs, func() bool {
		var marked bool
		e.pool.QueryRow(ctx, `SELECT attempt_part = 0 AND attempt_by IS NOT NULL FROM choir_control.outbox
			WHERE outbox_id = $1`, id).Scan(&marked)
		return marked
	})
	if n := countTo(e.bot, gateAlice, text); n != 0 {
		t.Fatalf("the Bot API has %q %d times: the kill missed the gate", text, n)
	}
	// The dead choird's delivery job is rescued, as River's rescuer does
	// once it has run longer than RescueStuckJobsAfter (a minute).
	if _, err := e.pool.Exec(ctx, `UPDATE river_job SET state = 'available', scheduled_at = now()
		WHERE kind = 'deliver_outbound' AND state = 'running'`); err != nil {
		t.Fatal(err)
	}
	e.choird = e.choird.Restart(t)
	return id
}

// noticeFor waits for the notice about reply id at alice's chat and
// returns it.
func (e *gateEnv) noticeFor(t *testing.T, id int64) telegramtest.Message {
	t.Helper()
	data := "resend:" + strconv.FormatInt(id, 10)
	var found telegramtest.Message
	e.wait(t, "the notice about reply "+strconv.FormatInt(id, 10), func() bool {
		for _, m := range e.bot.SentTo(gateAlice) {
			if kb := m.Keyboard(); len(kb) == 1 && len(kb[0]) == 1 && kb[0][0].Data == data && kb[0][0].Text == "Send again" {
				found = m
				return true
			}
		}
		return false
	})
	return found
}

func (e *gateEnv) wait(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := e.bot.Wait(ctx, cond); err != nil {
		t.Fatalf("waited for %s: %v; alice got %q\n%s", what, err, texts(e.bot.SentTo(gateAlice)), e.choird.Logs.String())
	}
}

// press presses a button as user from and waits for its answer.
func (e *gateEnv) press(t *testing.T, from, messageID int64, data string) string {
	t.Helper()
	_, cb := e.bot.PressButton(from, messageID, data)
	var answer string
	e.wait(t, "the answer to "+cb, func() bool {
		for _, a := range e.bot.Answers() {
			if a.CallbackID == cb {
				answer = a.Text
				return true
			}
		}
		return false
	})
	return answer
}

// command sends a command as alice and waits for the reply that starts
// with want.
func (e *gateEnv) command(t *testing.T, text, want string) {
	t.Helper()
	before := len(e.bot.SentTo(gateAlice))
	e.bot.SendText(gateAlice, text)
	e.wait(t, "the reply to "+text, func() bool {
		for _, m := range e.bot.SentTo(gateAlice)[before:] {
			if strings.HasPrefix(m.Text, want) {
				return true
			}
		}
		return false
	})
}

// abandonedSends are the sendMessage requests the Bot API could not read
// to their end.
func abandonedSends(b *telegramtest.Bot) []telegramtest.Call {
	var out []telegramtest.Call
	for _, c := range b.Calls("sendMessage") {
		if c.Status == http.StatusBadRequest && len(c.Params) == 0 {
			out = append(out, c)
		}
	}
	return out
}

func countTo(b *telegramtest.Bot, chat int64, text string) int {
	n := 0
	for _, m := range b.SentTo(chat) {
		if m.Text == text {
			n++
		}
	}
	return n
}

func texts(ms []telegramtest.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Text)
	}
	return out
}

// TestFaultChoirdKilledInSendGate: choird killed inside a reply's send
// gate does not send the reply again on its own when it comes back: it
// tells the DM, once, that the reply may not have arrived, with a [Send
// again] button. The button, or /resend, sends it once, whoever presses
// how often; a press from another DM's chat sends nothing; a reply whose
// send was confirmed never gets a notice.
func TestFaultChoirdKilledInSendGate(t *testing.T) {
	t.Parallel()
	e := newGateEnv(t)
	const plain, first, second = "a reply that arrived", "the first reply, cut off", "the second reply, cut off"

	e.reply(t, "plain-1", plain)
	e.wait(t, "the confirmed reply", func() bool { return countTo(e.bot, gateAlice, plain) == 1 })

	id1 := e.killInGate(t, "cut-1", first)
	n1 := e.noticeFor(t, id1)
	if !strings.Contains(n1.Text, "may not have arrived") || !strings.Contains(n1.Text, first) {
		t.Errorf("notice = %q", n1.Text)
	}
	if n := countTo(e.bot, gateAlice, first); n != 0 {
		t.Errorf("choird sent the cut-off reply %d times on its own", n)
	}
	data := "resend:" + strconv.FormatInt(id1, 10)

	// Bob presses alice's button in his own chat: nothing is sent.
	if a := e.press(t, gateBob, n1.MessageID, data); !strings.Contains(a, "no such reply") {
		t.Errorf("bob's press answered %q", a)
	}
	if a := e.press(t, gateAlice, n1.MessageID, data); a != "Sending it again" {
		t.Errorf("alice's press answered %q", a)
	}
	e.wait(t, "the reply sent again", func() bool { return countTo(e.bot, gateAlice, first) == 1 })
	if a := e.press(t, gateAlice, n1.MessageID, data); a != "already sent again" {
		t.Errorf("alice's second press answered %q", a)
	}

	id2 := e.killInGate(t, "cut-2", second)
	n2 := e.noticeFor(t, id2)
	e.command(t, "/resend", fmt.Sprintf("Sending reply %d again", id2))
	e.wait(t, "the reply /resend sent again", func() bool { return countTo(e.bot, gateAlice, second) == 1 })
	e.command(t, "/resend", "No reply to this chat is waiting to be sent again")
	if a := e.press(t, gateAlice, n2.MessageID, "resend:"+strconv.FormatInt(id2, 10)); a != "already sent again" {
		t.Errorf("a press after /resend answered %q", a)
	}

	// Every row is delivered: a resend queued twice would be sent by now.
	choirdtest.WaitFor(t, "an empty outbox", e.choird.Logs, func() bool {
		var pending int
		e.pool.QueryRow(t.Context(), `SELECT count(*) FROM choir_control.outbox WHERE status = 'pending'`).Scan(&pending)
		return pending == 0
	})
	var resends int
	e.pool.QueryRow(t.Context(), `SELECT count(*) FROM choir_control.outbox WHERE message_id LIKE 'resend:%'`).Scan(&resends)
	if resends != 2 {
		t.Errorf("%d resends queued, want 2", resends)
	}
	for text, want := range map[string]int{plain: 1, first: 1, second: 1} {
		if n := countTo(e.bot, gateAlice, text); n != want {
			t.Errorf("alice got %q %d times, want %d", text, n, want)
		}
	}
	notices := 0
	for _, m := range e.bot.SentTo(gateAlice) {
		if strings.Contains(m.Text, "may not have arrived") {
			notices++
		}
	}
	if notices != 2 {
		t.Errorf("%d notices, want 2 (one per cut-off reply, none for the confirmed one)", notices)
	}
	if got := e.bot.SentTo(gateBob); len(got) != 0 {
		t.Errorf("bob got %q", texts(got))
	}
}
