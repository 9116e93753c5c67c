package e2e

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/agent/llmtest"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// Gateway overhead (issue 7, Targets), LLM excluded, Telegram's network
// replaced by the local fake:
//
//	go test ./e2e -run '^$' -bench Gateway -benchtime 300x
//
// Both report p50 and p99 in milliseconds per message.

// BenchmarkGatewayIngress measures a DM's way in: from the update queued on
// the fake Bot API server (the gateway's long poll returns it at once) to
// the user message push arriving at the agent's end of the push stream. A
// client.Client with the session's lease token stands in for the agent, so
// the figure is choird's: getUpdates, the DM lookup, the inbox INSERT, the
// push over the agent protocol. Target: p99 <= 20 ms.
func BenchmarkGatewayIngress(b *testing.B) {
	e := newTGEnv(b, llmtest.NewServer(b), nil)
	e.dumpLogsOnFailure(b)
	d := e.runChoird(b)
	agent := d.StandIn(b, "assistant", admin.StartOverrides{})
	// One message first, so that the poll loop and the push stream run.
	e.bot.SendText(userAlice, "warm-up")
	waitUser(b, agent, "warm-up")

	pool := d.Pool()
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		text := "bench " + strconv.Itoa(i)
		start := time.Now()
		e.bot.SendText(userAlice, text)
		p := waitUser(b, agent, text)
		lat = append(lat, p.At.Sub(start))
		// What the agent's heartbeat would do once its log holds the
		// message; else the inbox sweep pushes every row again after
		// 20 s, and the benchmark would measure its own backlog.
		if _, err := pool.Exec(context.Background(), `UPDATE choir_control.inbox SET delivered_at = now()
			WHERE inbox_id = $1`, p.UserMessage.InboxID); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportPercentiles(b, lat)
}

// waitUser returns when the stand-in received the user message text,
// skipping redeliveries of earlier ones.
func waitUser(b *testing.B, s *choirdtest.StandIn, text string) choirdtest.Push {
	timeout := time.After(30 * time.Second)
	for {
		select {
		case p := <-s.Pushes:
			if p.Kind == rpc.PushUserMessage && p.UserMessage.Text == text {
				return p
			}
		case <-timeout:
			b.Fatalf("message %q never pushed", text)
		}
	}
}

// BenchmarkGatewayEgress measures a reply's way out: from the commit of the
// transaction holding the outbox row and its delivery job
// (outbox.EnqueueTx) to the fake server receiving sendMessage. Every
// message goes to its own chat, 40 ms after the previous one arrived, so
// neither the per-chat (1/s) nor the per-bot (30/s) limit delays any.
// Target: p99 <= 50 ms.
func BenchmarkGatewayEgress(b *testing.B) {
	ctx := context.Background()
	e := newTGEnv(b, llmtest.NewServer(b), nil)
	e.runChoird(b)
	pool := e.pool(b)
	// An insert-only River client, as choird's own inserts are: the
	// insert's NOTIFY wakes choird's delivery queue. Its FetchCooldown is
	// choird's, which limits insert notifications to one per cooldown.
	inserter, err := river.NewClient(riverpgxv5.New(pool), &river.Config{FetchCooldown: time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	received := make(chan time.Time, 1)
	e.bot.OnCall("sendMessage", func(telegramtest.Call) {
		select {
		case received <- time.Now():
		default:
		}
	})
	send := func(i int) time.Duration {
		chat := strconv.Itoa(700000 + i)
		tx, err := pool.Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := outbox.EnqueueTx(ctx, tx, inserter, outbox.Params{AgentID: "assistant",
			MessageID: fmt.Sprintf("bench-%d-%d", time.Now().UnixNano(), i), Gateway: gatewayTG, DM: dmAlice, ChatID: chat,
			Kind: "text", Text: "bench reply " + strconv.Itoa(i)}); err != nil {
			b.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		committed := time.Now()
		select {
		case at := <-received:
			return at.Sub(committed)
		case <-time.After(30 * time.Second):
			b.Fatalf("message %d never sent", i)
		}
		return 0
	}
	send(-1) // warm-up: the worker's connection and the bot
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		// 40 ms after the previous send, whatever it took: the per-bot
		// limiter (30/s, burst 1) then never holds a message back.
		time.Sleep(40 * time.Millisecond)
		lat = append(lat, send(i))
	}
	b.StopTimer()
	reportPercentiles(b, lat)
	// Where the time goes: River's pickup (insert to the worker's start,
	// both Postgres clocks) against the whole.
	rows, err := pool.Query(ctx, `SELECT (extract(epoch FROM attempted_at - created_at) * 1e6)::bigint
		FROM river_job WHERE kind = 'deliver_outbound' AND attempted_at IS NOT NULL`)
	if err != nil {
		b.Fatal(err)
	}
	var pickup []time.Duration
	for rows.Next() {
		var us int64
		if err := rows.Scan(&us); err != nil {
			b.Fatal(err)
		}
		pickup = append(pickup, time.Duration(us)*time.Microsecond)
	}
	if len(pickup) > 0 {
		slices.Sort(pickup)
		b.ReportMetric(float64(pickup[int(float64(len(pickup)-1)*0.99)].Microseconds())/1000, "pickup-p99-ms")
	}
	// The hook sees sendMessage before the worker marks the row sent.
	waitUntil(b, "every outbox row marked sent", func() bool {
		var pending int
		pool.QueryRow(ctx, "SELECT count(*) FROM choir_control.outbox WHERE status <> 'sent'").Scan(&pending)
		return pending == 0
	})
}

func reportPercentiles(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	pct := func(p float64) float64 {
		i := int(float64(len(lat)-1) * p)
		return float64(lat[i].Microseconds()) / 1000
	}
	b.ReportMetric(pct(0.50), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(lat[len(lat)-1].Microseconds())/1000, "max-ms")
	b.ReportMetric(0, "ns/op")
}
