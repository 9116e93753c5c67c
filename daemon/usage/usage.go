// Package usage is choird's side of usage accounting and caps (issue 20):
// the baseline a session's meter starts from (what the agent already
// spent today in its DM's time zone, in this session and in each of its
// core jobs, totalled from the replicated commit logs, so that neither a
// crash, a restart of choird nor a new session resets a day), and the
// usage report of choirctl usage and /usage: current spend against each
// cap and the spend per day.
//
// The agent's meter (agent/meter) refuses a call early, before each
// model call; the enforcement of the day caps, for calls through choird's
// egress gateway, is daemon/spend's, whose settled calls
// choir_audit.usage lists beside the logs' records (each call once).
package usage

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc/admin"
	rpcusage "github.com/choirhq/choir/rpc/usage"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// ErrUnknownAgent is a report asked for an agent the configuration does
// not name.
var ErrUnknownAgent = errors.New("unknown agent")

// MaxDays bounds a report's history.
const MaxDays = 366

// Options configure a Service.
type Options struct {
	Pool   *pgxpool.Pool
	Config func() *config.Config
	// Now is the clock; nil is time.Now.
	Now func() time.Time
}

// Service computes baselines and reports.
type Service struct {
	pool   *pgxpool.Pool
	config func() *config.Config
	now    func() time.Time
}

// New returns a Service.
func New(o Options) *Service {
	s := &Service{pool: o.Pool, config: o.Config, now: o.Now}
	if s.now == nil {
		s.now = time.Now
	}
	return s
}

// Zone returns the IANA time zone of agentID's DM (UTC when it has none
// or names no DM).
func Zone(cfg *config.Config, agentID string) (string, *time.Location) {
	name := config.DefaultTimeZone
	if cfg != nil {
		if dm, ok := cfg.DMs[cfg.Agents[agentID].Defaults.DM]; ok {
			name = dm.Zone()
		}
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return config.DefaultTimeZone, time.UTC
	}
	return name, loc
}

// dayBounds returns the start and end of the day holding now in loc, and
// its date.
func dayBounds(now time.Time, loc *time.Location) (start, end time.Time, day string) {
	n := now.In(loc)
	start = time.Date(n.Year(), n.Month(), n.Day(), 0, 0, 0, 0, loc)
	return start, start.AddDate(0, 0, 1), start.Format(time.DateOnly)
}

// Baseline is what agentID had spent when its session sessionID fetches
// its configuration: today in its DM's zone, in the session (with the
// budget it continues, sessionBudget) and in each of the session's core
// jobs.
func (s *Service) Baseline(ctx context.Context, agentID string, sessionID uuid.UUID) (*rpcusage.Baseline, error) {
	zone, loc := Zone(s.config(), agentID)
	start, end, day := dayBounds(s.now(), loc)
	q := seam.Queries(s.pool)
	today, err := q.UsageTotalsBetween(ctx, db.UsageTotalsBetweenParams{AgentID: agentID, Since: start, Until: end})
	if err != nil {
		return nil, fmt.Errorf("usage of agent %s today: %w", agentID, err)
	}
	sess, err := sessionBudget(ctx, q, sessionID)
	if err != nil {
		return nil, err
	}
	jobs, err := q.UsageSessionJobs(ctx, sessionID)
	if err != nil {
		return nil, fmt.Errorf("usage of session %s's jobs: %w", sessionID, err)
	}
	b := &rpcusage.Baseline{TimeZone: zone, Day: day, Today: rpcusage.Totals{Tokens: today.Tokens, CostUSD: today.CostUsd},
		Session: sess}
	for _, j := range jobs {
		if b.Jobs == nil {
			b.Jobs = map[string]rpcusage.Totals{}
		}
		b.Jobs[j.JobID] = rpcusage.Totals{Tokens: j.Tokens, CostUSD: j.CostUsd}
	}
	return b, nil
}

// Report is agentID's usage report with days of history (0: the
// default).
func (s *Service) Report(ctx context.Context, agentID string, days int) (admin.UsageReport, error) {
	cfg := s.config()
	a, ok := cfg.Agents[agentID]
	if !ok {
		return admin.UsageReport{}, fmt.Errorf("%w %q: choirctl agent list shows the configured agents", ErrUnknownAgent, agentID)
	}
	if days <= 0 {
		days = admin.DefaultUsageDays
	}
	days = min(days, MaxDays)
	zone, loc := Zone(cfg, agentID)
	start, end, day := dayBounds(s.now(), loc)
	r := admin.UsageReport{AgentID: agentID, TimeZone: zone, Today: day, Jobs: []admin.UsageJob{},
		Caps: []admin.UsageCap{}, Days: []admin.UsageDay{}}
	q := seam.Queries(s.pool)
	today, err := q.UsageTotalsBetween(ctx, db.UsageTotalsBetweenParams{AgentID: agentID, Since: start, Until: end})
	if err != nil {
		return r, fmt.Errorf("usage of agent %s today: %w", agentID, err)
	}
	r.TodayTotals = admin.UsageTotals{Tokens: today.Tokens, CostUSD: today.CostUsd}
	latest, err := q.UsageLatestSession(ctx, agentID)
	switch {
	case errors.Is(err, choirsql.ErrNotFound):
	case err != nil:
		return r, fmt.Errorf("latest session of agent %s: %w", agentID, err)
	default:
		if err := s.sessionPart(ctx, q, &r, latest); err != nil {
			return r, err
		}
	}
	rows, err := q.UsageDaily(ctx, db.UsageDailyParams{Tz: zone, AgentID: agentID, Since: start.AddDate(0, 0, 1-days)})
	if err != nil {
		return r, fmt.Errorf("usage of agent %s per day: %w", agentID, err)
	}
	for _, d := range rows {
		r.Days = append(r.Days, admin.UsageDay{Day: d.Day, Tokens: d.Tokens, CostUSD: d.CostUsd, Uses: d.Uses})
	}
	r.Caps = capLines(a.Budgets.WithDefaults(), r)
	return r, nil
}

func (s *Service) sessionPart(ctx context.Context, q *db.Queries, r *admin.UsageReport, latest db.UsageLatestSessionRow) error {
	r.SessionID = latest.SessionID.String()
	r.SessionLive = latest.Status != "ended" && latest.Status != "crashed"
	sess, err := sessionBudget(ctx, q, latest.SessionID)
	if err != nil {
		return err
	}
	r.Session = admin.UsageTotals{Tokens: sess.Tokens, CostUSD: sess.CostUSD}
	jobs, err := q.UsageSessionJobs(ctx, latest.SessionID)
	if err != nil {
		return fmt.Errorf("usage of session %s's jobs: %w", latest.SessionID, err)
	}
	for _, j := range jobs {
		r.Jobs = append(r.Jobs, admin.UsageJob{JobID: j.JobID, Lane: j.Lane,
			UsageTotals: admin.UsageTotals{Tokens: j.Tokens, CostUSD: j.CostUsd}})
	}
	return nil
}

// sessionBudget is what counts against a session's caps: its own spend,
// plus the base it continues when choird started it on its own
// (session.ByChoird: a session budget is not reset by cycling sessions).
func sessionBudget(ctx context.Context, q *db.Queries, sessionID uuid.UUID) (rpcusage.Totals, error) {
	s, err := q.SessionGetByID(ctx, sessionID)
	if err != nil {
		return rpcusage.Totals{}, fmt.Errorf("load session %s: %w", sessionID, err)
	}
	own, err := q.UsageSessionTotals(ctx, sessionID)
	if err != nil {
		return rpcusage.Totals{}, fmt.Errorf("usage of session %s: %w", sessionID, err)
	}
	return rpcusage.Totals{Tokens: own.Tokens + s.BudgetBaseTokens, CostUSD: own.CostUsd + s.BudgetBaseCostUsd}, nil
}

// capLines sets each cap against its scope's spend: the session's, each
// core job's of the latest session, today's.
func capLines(b config.Budgets, r admin.UsageReport) []admin.UsageCap {
	out := []admin.UsageCap{}
	add := func(field, scope, subject string, limit, spent float64, money bool) {
		if limit <= 0 {
			return
		}
		out = append(out, admin.UsageCap{Field: field, Scope: scope, Subject: subject, Limit: limit, Spent: spent,
			Money: money, Percent: math.Round(spent/limit*1000) / 10, Stopped: spent >= limit})
	}
	add("total_session_tokens", "session", r.SessionID, float64(b.TotalSessionTokens), float64(r.Session.Tokens), false)
	add("session_cost_usd", "session", r.SessionID, b.SessionCostUSD, r.Session.CostUSD, true)
	for _, j := range r.Jobs {
		add("per_job_tokens", "core job", j.Lane, float64(b.PerJobTokens), float64(j.Tokens), false)
		add("per_job_cost_usd", "core job", j.Lane, b.PerJobCostUSD, j.CostUSD, true)
	}
	add("per_day_tokens", "day", r.Today, float64(b.PerDayTokens), float64(r.TodayTotals.Tokens), false)
	add("per_day_cost_usd", "day", r.Today, b.PerDayCostUSD, r.TodayTotals.CostUSD, true)
	return out
}

// EmbeddingRecorder returns what records each embedding request a
// provider billed (embed.Embedder.SetUsage) for the agent it was done
// for: a row of choir_control.embedding_usage, which choir_audit.usage
// lists, so that its cost counts in the agent's day. A request no agent
// was named for (embed.ForAgent) is only logged.
func EmbeddingRecorder(pool *pgxpool.Pool, logger *slog.Logger) func(ctx context.Context, u embed.Usage) {
	return func(ctx context.Context, u embed.Usage) {
		if u.AgentID == "" {
			logger.WarnContext(ctx, "embedding request billed for no agent: not counted", slog.String("service", u.Service),
				slog.Int64("tokens", u.Tokens), slog.Float64("cost_usd", u.CostUSD))
			return
		}
		// The request was billed even if its caller gave up meanwhile.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		err := seam.Queries(pool).EmbeddingUsageInsert(ctx, db.EmbeddingUsageInsertParams{AgentID: u.AgentID,
			Service: u.Service, Purpose: u.Purpose, Tokens: u.Tokens, Estimated: u.Estimated, CostUsd: u.CostUSD})
		if err != nil {
			logger.ErrorContext(ctx, "embedding usage not recorded", slog.String("agent_id", u.AgentID),
				slog.Int64("tokens", u.Tokens), slog.Float64("cost_usd", u.CostUSD), slog.String("error", err.Error()))
		}
	}
}

// Breakdown is agentID's spend over its last days days (in its DM's
// zone, today included) by service and by lane.
func (s *Service) Breakdown(ctx context.Context, agentID string, days int) (admin.UsageBreakdown, error) {
	cfg := s.config()
	if _, ok := cfg.Agents[agentID]; !ok {
		return admin.UsageBreakdown{}, fmt.Errorf("%w %q: choirctl agent list shows the configured agents", ErrUnknownAgent, agentID)
	}
	days = min(max(days, 1), MaxDays)
	_, loc := Zone(cfg, agentID)
	start, _, _ := dayBounds(s.now(), loc)
	out := admin.UsageBreakdown{AgentID: agentID, Days: days, ByService: []admin.UsageSlice{}, ByLane: []admin.UsageSlice{}}
	q := seam.Queries(s.pool)
	for _, by := range []struct {
		name string
		into *[]admin.UsageSlice
	}{{"service", &out.ByService}, {"lane", &out.ByLane}} {
		rows, err := q.UsageBreakdown(ctx, db.UsageBreakdownParams{By: by.name, AgentID: agentID, Since: start.AddDate(0, 0, 1-days)})
		if err != nil {
			return out, fmt.Errorf("usage of agent %s by %s: %w", agentID, by.name, err)
		}
		for _, r := range rows {
			*by.into = append(*by.into, admin.UsageSlice{Name: r.Slice, UsageTotals: admin.UsageTotals{Tokens: r.Tokens, CostUSD: r.CostUsd},
				Uses: r.Uses})
		}
	}
	return out, nil
}
