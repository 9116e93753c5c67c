// Package outboxtest is the outbox's test harness, shared by the tests of
// the features that queue messages (approvals, schedules, crash notices):
// a delivery worker on a real database, sending through the real gateway
// to a fake Telegram server.
package outboxtest

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"github.com/choirhq/choir/daemon/approval"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/gateway/telegramtest"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// The harness's bot, agent, chats, gateway and DM.
const (
	Token     = "4242:delivery-test-token"
	Agent     = "courier"
	Chat      = int64(5551)
	OtherChat = int64(5552)
	Gateway   = "tg"
	DM        = "owner"
)

// Bundle is a delivery worker on real Postgres, sending through the
// real gateway to the fake Telegram server.
type Bundle struct {
	Pool   *pgxpool.Pool
	Srv    *telegramtest.Server
	TG     *telegramtest.Bot
	Limits gateway.SendLimits
	WS     string
	// Other is a second configured workspace, "other", that the agent
	// of WS must not reach.
	Other   string
	Clients []*jobs.Client
}

// Workspace is the name of the bundle's workspace, b.WS.
const Workspace = "main"

// Workspaces is the configured workspaces, for the worker.
func (b *Bundle) Workspaces() map[string]string {
	return map[string]string{Workspace: b.WS, "other": b.Other}
}

// FileParams queues the file .choirtmp/send/name of the bundle's workspace.
func (b *Bundle) FileParams(messageID, caption, kind, name string) outbox.Params {
	p := b.Params(messageID, caption, Chat)
	p.Kind, p.Workspace, p.FilePath = kind, Workspace, ".choirtmp/send/"+name
	return p
}

// Setup makes a bundle: a migrated database with the harness's agent, a
// fake Telegram server with its bot, and two workspaces.
func Setup(t *testing.T, limits gateway.SendLimits) *Bundle {
	t.Helper()
	ctx := context.Background()
	b := &Bundle{Pool: dbtest.NewPool(t), Srv: telegramtest.NewServer(t), Limits: limits, WS: t.TempDir(),
		Other: t.TempDir()}
	b.TG = b.Srv.AddBot(Token, "courier_bot")
	if _, err := seam.Queries(b.Pool).AgentUpsert(ctx, db.AgentUpsertParams{AgentID: Agent, Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	for _, ws := range []string{b.WS, b.Other} {
		if err := os.MkdirAll(filepath.Join(ws, ".choirtmp", "send"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

// Start starts a River client with the delivery worker, as a fresh choird
// process would: its own gateway and limiter.
func (b *Bundle) Start(t *testing.T, more ...func(*river.Workers)) *jobs.Client {
	t.Helper()
	gw, err := gateway.New(gateway.Options{
		Gateways: map[string]config.Gateway{Gateway: {Type: config.GatewayTelegram, Secret: "tg-token"}},
		Secrets:  config.Secrets{"tg-token": Token},
		APIURL:   b.Srv.URL(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	workers := river.NewWorkers()
	if err := outbox.AddDeliveryWorker(workers, outbox.Delivery{Pool: b.Pool, Sender: gw,
		Limiter: gateway.NewSendLimiter(b.Limits), Workspaces: b.Workspaces}); err != nil {
		t.Fatal(err)
	}
	for _, add := range more {
		add(workers)
	}
	name, qc := outbox.DeliveryQueue()
	client, err := river.NewClient(riverpgxv5.New(b.Pool), &river.Config{
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
	b.Clients = append(b.Clients, client)
	return client
}

// Params is a text message to chat.
func (b *Bundle) Params(messageID, text string, chat int64) outbox.Params {
	return outbox.Params{AgentID: Agent, MessageID: messageID, Gateway: Gateway, DM: DM,
		ChatID: strconv.FormatInt(chat, 10), Kind: message.Text, Text: text}
}

// Enqueue queues messages in one transaction through client.
func (b *Bundle) Enqueue(t *testing.T, client *jobs.Client, ps ...outbox.Params) []outbox.Queued {
	t.Helper()
	ctx := context.Background()
	var out []outbox.Queued
	err := pgx.BeginFunc(ctx, b.Pool, func(tx pgx.Tx) error {
		for _, p := range ps {
			q, err := outbox.EnqueueTx(ctx, tx, client, p)
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

// Row loads an outbox row.
func (b *Bundle) Row(t *testing.T, id int64) db.ChoirControlOutbox {
	t.Helper()
	r, err := seam.Queries(b.Pool).OutboxGetByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// WaitRow waits until the row reaches status; the deadline only guards
// against a hang.
func (b *Bundle) WaitRow(t *testing.T, id int64, status string) db.ChoirControlOutbox {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := b.Row(t, id)
		if r.Status == status {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("outbox row %d is %s (%q), want %s", id, r.Status, r.LastError, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// WaitFor waits until cond holds; the deadline only guards against a
// hang.
func WaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited 30 s for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// JobState is a River job as the tests check it.
type JobState struct {
	State    string
	Attempt  int
	Metadata map[string]any
}

// JobsOf returns the deliver_outbound jobs of an outbox row.
func (b *Bundle) JobsOf(t *testing.T, outboxID int64) []JobState {
	t.Helper()
	rows, err := b.Pool.Query(context.Background(), `SELECT state, attempt, metadata FROM river_job
		WHERE kind = 'deliver_outbound' AND (args->>'outbox_id')::bigint = $1 ORDER BY id`, outboxID)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (JobState, error) {
		var j JobState
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

// WaitJob waits until the last job of an outbox row reaches state.
func (b *Bundle) WaitJob(t *testing.T, outboxID int64, state string) JobState {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		js := b.JobsOf(t, outboxID)
		if len(js) > 0 && js[len(js)-1].State == state {
			return js[len(js)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("jobs of outbox row %d = %+v, want the last %s", outboxID, js, state)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newApproval records a pending approval of a fresh session of Agent,
// expiring after ttl.
func (b *Bundle) NewApproval(t *testing.T, summary string, ttl time.Duration) approval.Approval {
	t.Helper()
	ctx := context.Background()
	q := seam.Queries(b.Pool)
	h := make([]byte, 32)
	rand.Read(h)
	s, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: Agent, LeaseTokenHash: h, BaseHash: make([]byte, 32),
		ResourceBindings: json.RawMessage(`{}`)})
	if err != nil {
		// One live session per agent: end the previous one first.
		if _, err := b.Pool.Exec(ctx, `UPDATE choir_control.sessions SET status = 'ended', ended_at = now()
			WHERE agent_id = $1 AND status = 'active'`, Agent); err != nil {
			t.Fatal(err)
		}
		if s, err = q.SessionCreate(ctx, db.SessionCreateParams{AgentID: Agent, LeaseTokenHash: h,
			BaseHash: make([]byte, 32), ResourceBindings: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	row, err := q.ApprovalCreate(ctx, db.ApprovalCreateParams{SessionID: s.SessionID, AgentID: Agent,
		RequestID: uuid.NewString(), RequestType: "choir.propose.tool", Summary: summary, Payload: json.RawMessage(`{}`),
		ExpiresAt: time.Now().Add(ttl)})
	if err != nil {
		t.Fatal(err)
	}
	a, err := q.ApprovalGet(ctx, row.ApprovalID)
	if err != nil {
		t.Fatal(err)
	}
	return approval.Of(a)
}

// Texts are the texts of messages.
func Texts(ms []telegramtest.Message) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.Text)
	}
	return out
}

// MessageIDs are the ids of messages.
func MessageIDs(ms []telegramtest.Message) []int64 {
	var out []int64
	for _, m := range ms {
		out = append(out, m.MessageID)
	}
	return out
}
