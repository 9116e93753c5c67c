package usage_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/usage"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/sql/seam"
)

type event struct {
	at            time.Time
	typ, lane, pl string
}

func appendEvents(t *testing.T, q *db.Queries, session uuid.UUID, evs []event) {
	t.Helper()
	prev := make([]byte, 32)
	var params []db.EventsAppendParams
	for i, e := range evs {
		h := sha256.Sum256(append(append([]byte{}, prev...), byte(i+1)))
		params = append(params, db.EventsAppendParams{SessionID: session, CreatedAt: e.at, Rev: int64(i + 1), EventType: e.typ,
			Lane: e.lane, HashPrev: prev, Hash: h[:], Payload: json.RawMessage(e.pl)})
		prev = h[:]
	}
	if _, err := q.EventsAppend(context.Background(), params); err != nil {
		t.Fatal(err)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestBaselineAndReportCountDaysInTheDMsZone replicates model calls and a
// tool's priced usage on both sides of midnight in Tokyo (the same UTC
// day) and checks the baseline a session gets, the report's caps and
// days, and the audit views' totals.
func TestBaselineAndReportCountDaysInTheDMsZone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	q := seam.Queries(pool)
	if _, err := q.AgentUpsert(ctx, db.AgentUpsertParams{AgentID: "ada", Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	tok := make([]byte, 32)
	rand.Read(tok)
	s, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: "ada", LeaseTokenHash: tok, BaseHash: make([]byte, 32),
		ResourceBindings: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	utc := func(h, m int) time.Time { return time.Date(2026, 11, 24, h, m, 0, 0, time.UTC) }
	appendEvents(t, q, s.SessionID, []event{
		// 23:00 in Tokyo on the 24th.
		{utc(14, 0), "llm_call_committed", "edge", `{"model":"fast","lane":"edge","prompt_tokens":100,"completion_tokens":10,"latency_ms":1,"cost_usd":0.5,"cost_source":"provider"}`},
		// 00:30 and 00:31 in Tokyo on the 25th.
		{utc(15, 30), "llm_call_committed", "core:j", `{"model":"big","lane":"core:j","prompt_tokens":200,"completion_tokens":20,"cached_tokens":50,"latency_ms":1,"cost_usd":0.25,"cost_source":"prices","job_id":"j1"}`},
		{utc(15, 31), "tool_result_committed", "core:j", `{"call_id":"c1","tool":"choir.tts.speak","status":"success","duration_ms":3,"usage":[{"kind":"tts","service":"eleven","units":900,"unit":"characters","cost_usd":0.1,"cost_source":"prices"}]}`},
		{utc(15, 32), "user_msg", "edge", `{"text":"hi"}`},
	})
	cfg := &config.Config{
		DMs: map[string]config.DM{"me": {Gateway: "tg", UserID: "1", TimeZone: "Asia/Tokyo"}},
		Agents: map[string]config.Agent{"ada": {Defaults: config.AgentDefaults{DM: "me"},
			Budgets: config.Budgets{Caps: config.Caps{PerDayCostUSD: 0.3, PerJobTokens: 1000}}}},
	}
	svc := usage.New(usage.Options{Pool: pool, Config: func() *config.Config { return cfg },
		Now: func() time.Time { return utc(16, 0) }}) // 01:00 on the 25th in Tokyo

	b, err := svc.Baseline(ctx, "ada", s.SessionID)
	if err != nil {
		t.Fatal(err)
	}
	if b.TimeZone != "Asia/Tokyo" || b.Day != "2026-11-25" || b.Today.Tokens != 220 || !near(b.Today.CostUSD, 0.35) ||
		b.Session.Tokens != 330 || !near(b.Session.CostUSD, 0.85) || b.Jobs["j1"].Tokens != 220 || !near(b.Jobs["j1"].CostUSD, 0.35) {
		t.Errorf("baseline = %+v", b)
	}

	r, err := svc.Report(ctx, "ada", 3)
	if err != nil {
		t.Fatal(err)
	}
	wantDays := []admin.UsageDay{{Day: "2026-11-24", Tokens: 110, CostUSD: 0.5, Uses: 1}, {Day: "2026-11-25", Tokens: 220, CostUSD: 0.35, Uses: 2}}
	if len(r.Days) != 2 || r.Days[0].Day != wantDays[0].Day || r.Days[0].Tokens != 110 || r.Days[1].Tokens != 220 ||
		!near(r.Days[1].CostUSD, 0.35) || r.Days[1].Uses != 2 {
		t.Errorf("days = %+v, want %+v", r.Days, wantDays)
	}
	caps := map[string]admin.UsageCap{}
	for _, c := range r.Caps {
		caps[c.Field] = c
	}
	if c := caps["per_day_cost_usd"]; !c.Stopped || !near(c.Spent, 0.35) || c.Subject != "2026-11-25" {
		t.Errorf("day cost cap = %+v, want 0.35 of 0.3, stopped", c)
	}
	if c := caps["per_job_tokens"]; c.Stopped || c.Spent != 220 || c.Subject != "core:j" || c.Percent != 22 {
		t.Errorf("job token cap = %+v, want 220 of 1000", c)
	}
	if c := caps["total_session_tokens"]; c.Limit != config.DefaultTotalSessionTokens || c.Spent != 330 {
		t.Errorf("session token cap = %+v", c)
	}
	text := r.Text()
	for _, want := range []string{"today is 2026-11-25, Asia/Tokyo", "per_day_cost_usd", "STOPPED", "agents.ada.budgets.<field>", "2026-11-24"} {
		if !strings.Contains(text, want) {
			t.Errorf("report text does not contain %q:\n%s", want, text)
		}
	}
	if _, err := svc.Report(ctx, "bob", 0); err == nil || !strings.Contains(err.Error(), `unknown agent "bob"`) {
		t.Errorf("unknown agent: err = %v", err)
	}

	var tokens, cached int64
	var cost float64
	if err := pool.QueryRow(ctx, `SELECT tokens, cached_tokens, cost_usd::float8 FROM choir_audit.usage_by_agent WHERE agent_id = 'ada'`).
		Scan(&tokens, &cached, &cost); err != nil {
		t.Fatal(err)
	}
	if tokens != 330 || cached != 50 || !near(cost, 0.85) {
		t.Errorf("usage_by_agent: %d tokens, %d cached, $%g", tokens, cached, cost)
	}
	var jobs, models, lanes, days int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM choir_audit.usage_by_job),
	        (SELECT count(*) FROM choir_audit.usage_by_model), (SELECT count(*) FROM choir_audit.usage_by_lane),
	        (SELECT count(*) FROM choir_audit.usage_by_day)`).Scan(&jobs, &models, &lanes, &days); err != nil {
		t.Fatal(err)
	}
	if jobs != 1 || models != 3 || lanes != 2 || days != 1 {
		t.Errorf("views: %d jobs, %d models, %d lanes, %d UTC days; want 1, 3, 2, 1", jobs, models, lanes, days)
	}
}
