package spend_test

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/spend"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	rpcusage "github.com/choirhq/choir/rpc/usage"
	"github.com/choirhq/choir/sql/seam"
)

type testBundle struct {
	pool     *pgxpool.Pool
	cfg      *config.Config
	now      atomic.Pointer[time.Time]
	ledger   *spend.Ledger
	sessions map[string]uuid.UUID
}

func setup(t testing.TB, cfg *config.Config) *testBundle {
	t.Helper()
	b := &testBundle{pool: dbtest.NewPool(t), cfg: cfg, sessions: map[string]uuid.UUID{}}
	now := time.Now()
	b.now.Store(&now)
	ctx := context.Background()
	q := seam.Queries(b.pool)
	for _, agent := range []string{"ada", "bob"} {
		if _, err := q.AgentUpsert(ctx, db.AgentUpsertParams{AgentID: agent, Config: json.RawMessage(`{}`)}); err != nil {
			t.Fatal(err)
		}
		tok := make([]byte, 32)
		rand.Read(tok)
		s, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: agent, LeaseTokenHash: tok, BaseHash: make([]byte, 32),
			ResourceBindings: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		b.sessions[agent] = s.SessionID
	}
	b.ledger = spend.New(spend.Options{Pool: b.pool, Config: func() *config.Config { return b.cfg },
		Now: func() time.Time { return *b.now.Load() }, CallTimeout: time.Minute})
	return b
}

func (b *testBundle) call(agent string, tokens int64, usd float64) spend.Call {
	return spend.Call{AgentID: agent, SessionID: b.sessions[agent], Kind: rpcusage.KindLLM, Service: "fast",
		Tokens: tokens, CostUSD: usd}
}

// TestAgentCapHoldsUnderConcurrentCalls reserves twenty calls of one
// agent at once against its token cap: exactly as many as fit pass, and
// the rest are refused naming per_day_tokens.
func TestAgentCapHoldsUnderConcurrentCalls(t *testing.T) {
	t.Parallel()
	b := setup(t, &config.Config{Agents: map[string]config.Agent{
		"ada": {Budgets: config.Budgets{Caps: config.Caps{PerDayTokens: 7000}}}}})
	var passed, refused atomic.Int64
	var wg sync.WaitGroup
	for range 20 {
		wg.Go(func() {
			_, err := b.ledger.Reserve(context.Background(), b.call("ada", 1000, 0))
			var capErr *spend.CapError
			switch {
			case err == nil:
				passed.Add(1)
			case errors.As(err, &capErr) && capErr.Field == "per_day_tokens" && !capErr.Host:
				refused.Add(1)
			default:
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if passed.Load() != 7 || refused.Load() != 13 {
		t.Errorf("%d passed, %d refused; want 7 and 13", passed.Load(), refused.Load())
	}
}

// TestCrashLeftReservationExpires leaves a reservation unsettled, as a
// choird killed mid-call does: it holds its worst case until it expires,
// then the spend_expire job settles it at that worst case (the provider
// may have billed it), and a settlement arriving late changes nothing.
func TestCrashLeftReservationExpires(t *testing.T) {
	t.Parallel()
	b := setup(t, &config.Config{Caps: config.HostCaps{HostPerDayUSD: 1}})
	lost, err := b.ledger.Reserve(context.Background(), b.call("ada", 5000, 0.6))
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.ledger.Reserve(context.Background(), b.call("bob", 5000, 0.6))
	var capErr *spend.CapError
	if !errors.As(err, &capErr) || !capErr.Host || capErr.Field != "caps.host_per_day_usd" {
		t.Fatalf("err = %v, want the host cap", err)
	}
	w := &spend.ExpireWorker{Ledger: b.ledger}
	if err := w.Work(context.Background(), &river.Job[spend.ExpireArgs]{}); err != nil {
		t.Fatal(err)
	}
	got, err := seam.Queries(b.pool).SpendGetByID(context.Background(), lost.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "reserved" {
		t.Fatalf("before its expiry: %s", got.State)
	}
	later := b.now.Load().Add(time.Minute + spend.ExpiryMargin + time.Second)
	b.now.Store(&later)
	if err := w.Work(context.Background(), &river.Job[spend.ExpireArgs]{}); err != nil {
		t.Fatal(err)
	}
	got, err = seam.Queries(b.pool).SpendGetByID(context.Background(), lost.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.State != "expired" || got.Units != 5000 || got.CostUsd != 0.6 || *got.Outcome != "expired" {
		t.Errorf("expired = %+v", got)
	}
	if err := b.ledger.Settle(context.Background(), lost, spend.Spent{Outcome: spend.OutcomeOK, Units: 1}); err != nil {
		t.Fatal(err)
	}
	got, _ = seam.Queries(b.pool).SpendGetByID(context.Background(), lost.ID)
	if got.State != "expired" || got.Units != 5000 {
		t.Errorf("a late settlement changed it: %+v", got)
	}
	var units int64
	var cost float64
	if err := b.pool.QueryRow(context.Background(), `SELECT units, cost_usd FROM choir_audit.usage WHERE agent_id = 'ada'`).
		Scan(&units, &cost); err != nil {
		t.Fatal(err)
	}
	if units != 5000 || cost != 0.6 {
		t.Errorf("usage lists %d units $%g", units, cost)
	}
}

// TestDuplicateKeyIsRefused refuses a spend key the session used.
func TestDuplicateKeyIsRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, &config.Config{})
	c := b.call("ada", 10, 0)
	c.Key = "k1"
	if _, err := b.ledger.Reserve(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if _, err := b.ledger.Reserve(context.Background(), c); !errors.Is(err, spend.ErrDuplicateKey) {
		t.Errorf("err = %v", err)
	}
	c.Key = "../x"
	if _, err := b.ledger.Reserve(context.Background(), c); err == nil {
		t.Error("a malformed key was taken")
	}
}

// TestDayTotalsFollowTheLedger reserves, settles and expires calls of two
// agents: each day row always equals what its ledger rows count (a
// reservation at its worst case, a settled call at what it spent).
func TestDayTotalsFollowTheLedger(t *testing.T) {
	t.Parallel()
	b := setup(t, &config.Config{})
	ctx := context.Background()
	var rs []*spend.Reservation
	for i, agent := range []string{"ada", "ada", "bob", "bob"} {
		r, err := b.ledger.Reserve(ctx, b.call(agent, int64(1000*(i+1)), 0.1*float64(i+1)))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	check := func(when string) {
		t.Helper()
		for _, scope := range []string{"agent:ada", "agent:bob", "host"} {
			var want, got struct {
				tokens int64
				usd    float64
			}
			filter := "true"
			if scope != "host" {
				filter = "agent_id = '" + scope[len("agent:"):] + "'"
			}
			err := b.pool.QueryRow(ctx, `SELECT coalesce(sum(CASE WHEN state = 'reserved' THEN reserved_tokens ELSE units END), 0)::bigint,
			        coalesce(sum(CASE WHEN state = 'reserved' THEN reserved_usd ELSE cost_usd END), 0)::float8
			   FROM choir_control.spend WHERE `+filter).Scan(&want.tokens, &want.usd)
			if err != nil {
				t.Fatal(err)
			}
			err = b.pool.QueryRow(ctx, `SELECT coalesce(sum(tokens), 0)::bigint, coalesce(sum(cost_usd), 0)::float8
			   FROM choir_control.spend_days WHERE scope = $1`, scope).Scan(&got.tokens, &got.usd)
			if err != nil {
				t.Fatal(err)
			}
			if got.tokens != want.tokens || got.usd-want.usd > 1e-9 || want.usd-got.usd > 1e-9 {
				t.Errorf("%s: %s day row %+v, ledger %+v", when, scope, got, want)
			}
		}
	}
	check("reserved")
	if err := b.ledger.Settle(ctx, rs[0], spend.Spent{Outcome: spend.OutcomeOK, Units: 50, CostUSD: 0.01}); err != nil {
		t.Fatal(err)
	}
	if err := b.ledger.Settle(ctx, rs[2], spend.Spent{Outcome: spend.OutcomeNotBilled}); err != nil {
		t.Fatal(err)
	}
	check("settled")
	later := b.now.Load().Add(time.Minute + spend.ExpiryMargin + time.Second)
	b.now.Store(&later)
	if n, err := b.ledger.Expire(ctx); err != nil || n != 2 {
		t.Fatalf("expired %d, %v; want 2", n, err)
	}
	check("expired")
}

// TestLogSpendCountsAgainstTheCaps counts what the agent's log records
// of calls that did not go through the gateway, today in its DM's zone:
// yesterday's spend there does not count, today's does.
func TestLogSpendCountsAgainstTheCaps(t *testing.T) {
	t.Parallel()
	b := setup(t, &config.Config{
		DMs: map[string]config.DM{"me": {Gateway: "tg", UserID: "1", TimeZone: "Asia/Tokyo"}},
		Agents: map[string]config.Agent{"ada": {Defaults: config.AgentDefaults{DM: "me"},
			Budgets: config.Budgets{Caps: config.Caps{PerDayCostUSD: 1}}}},
	})
	// 00:30 on the 25th in Tokyo.
	now := time.Date(2026, 11, 24, 15, 30, 0, 0, time.UTC)
	b.now.Store(&now)
	q := seam.Queries(b.pool)
	h1, h2 := make([]byte, 32), make([]byte, 32)
	h2[0] = 1
	_, err := q.EventsAppend(context.Background(), []db.EventsAppendParams{
		// 23:00 on the 24th in Tokyo: yesterday.
		{SessionID: b.sessions["ada"], Rev: 1, CreatedAt: now.Add(-90 * time.Minute), EventType: "llm_call_committed", Lane: "edge",
			HashPrev: make([]byte, 32), Hash: h1, Payload: json.RawMessage(`{"model":"fast","lane":"edge","prompt_tokens":1,"completion_tokens":1,"latency_ms":1,"cost_usd":5}`)},
		{SessionID: b.sessions["ada"], Rev: 2, CreatedAt: now.Add(-10 * time.Minute), EventType: "llm_call_committed", Lane: "edge",
			HashPrev: h1, Hash: h2, Payload: json.RawMessage(`{"model":"fast","lane":"edge","prompt_tokens":1,"completion_tokens":1,"latency_ms":1,"cost_usd":0.7}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.ledger.Reserve(context.Background(), b.call("ada", 100, 0.2)); err != nil {
		t.Fatalf("$0.2 on $0.7 under a $1 cap: %v", err)
	}
	_, err = b.ledger.Reserve(context.Background(), b.call("ada", 100, 0.2))
	var capErr *spend.CapError
	if !errors.As(err, &capErr) || capErr.Field != "per_day_cost_usd" || capErr.Day != "2026-11-25" || capErr.TimeZone != "Asia/Tokyo" ||
		capErr.Spent < 0.9-1e-9 || capErr.Spent > 0.9+1e-9 {
		t.Errorf("err = %v (%+v), want per_day_cost_usd with $0.9 spent on 2026-11-25", err, capErr)
	}
}
