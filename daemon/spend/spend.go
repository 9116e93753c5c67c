// Package spend is the enforcement of usage caps at choird's egress
// gateway (issue 34): every metered call an agent makes through the
// gateway (a model call, a search query, speech) is reserved at its worst
// case in Postgres before it is forwarded, in one transaction that checks
// the agent's day caps (agents.<id>.budgets.per_day_tokens and
// per_day_cost_usd, days in its DM's zone) and the host-wide day caps
// (caps.host_per_day_tokens and caps.host_per_day_usd, UTC days) against
// what is spent and reserved, under advisory locks so that two calls, of
// one agent or of two, cannot both pass on the last dollar. The call is
// then settled from the provider's answer, and a reservation whose call
// choird lost is expired at its worst case by the periodic spend_expire
// job.
//
// A settled row is the call's usage record: choir_audit.usage lists it,
// and leaves out the agent's own record of the same call (one carrying
// the same spend_key in the same session), so choirctl usage, /usage and
// the baselines of the agent's meter count it exactly once. The agent's
// meter stays a fast early refusal; this is the enforcement.
package spend

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/usage"
	"github.com/choirhq/choir/db"
	rpcusage "github.com/choirhq/choir/rpc/usage"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Defaults of a Ledger.
const (
	// DefaultCallTimeout bounds a metered call: the gateway gives up on
	// one that has not finished by then, so its reservation never
	// outlives it.
	DefaultCallTimeout = 30 * time.Minute
	// ExpiryMargin is how long after its call's timeout a reservation is
	// taken for lost.
	ExpiryMargin = 5 * time.Minute
)

// HostZone is the zone of the host-wide caps' days.
const HostZone = "UTC"

// KeyPattern is what a spend key must match.
var KeyPattern = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// Options configure a Ledger.
type Options struct {
	Pool   *pgxpool.Pool
	Config func() *config.Config
	// Now is the clock of day boundaries and expiry; nil is time.Now.
	Now func() time.Time
	// CallTimeout is DefaultCallTimeout when zero.
	CallTimeout time.Duration
}

// Ledger reserves and settles metered calls.
type Ledger struct {
	pool        *pgxpool.Pool
	config      func() *config.Config
	now         func() time.Time
	callTimeout time.Duration
}

// New returns a Ledger.
func New(o Options) *Ledger {
	l := &Ledger{pool: o.Pool, config: o.Config, now: o.Now, callTimeout: o.CallTimeout}
	if l.now == nil {
		l.now = time.Now
	}
	if l.callTimeout <= 0 {
		l.callTimeout = DefaultCallTimeout
	}
	return l
}

// CallTimeout is how long a metered call may take.
func (l *Ledger) CallTimeout() time.Duration { return l.callTimeout }

// Call is a metered call to reserve.
type Call struct {
	AgentID   string
	SessionID uuid.UUID
	// Key names the call in the agent's own record of it; empty makes
	// one.
	Key     string
	Kind    rpcusage.Kind
	Service string
	// Lane, JobID and Purpose are the agent's attribution, for reports.
	Lane, JobID, Purpose string
	// Tokens are the model tokens of the worst case (model calls only);
	// Units and Unit what a search or speech uses, known before the call.
	Tokens int64
	Units  int64
	Unit   string
	// CostUSD is the worst case's cost, zero when unpriced.
	CostUSD float64
}

// Spent is what a settled call spent.
type Spent struct {
	Outcome                                Outcome
	Units                                  int64
	PromptTokens, CompletionTokens, Cached int64
	CostUSD                                float64
	CostSource                             string
}

// Outcome says how a call was settled.
type Outcome string

// The outcomes.
const (
	OutcomeOK            Outcome = "ok"
	OutcomeBilledFailure Outcome = "billed_failure"
	OutcomeNotBilled     Outcome = "not_billed"
	OutcomeWorstCase     Outcome = "worst_case"
)

// Reservation is a call's worst case held in the ledger.
type Reservation struct {
	ID  int64
	Key string
	// Call is what was reserved.
	Call Call
}

// WorstCase is the reservation settled as if the whole of it was spent:
// what an answer that cannot be read settles.
func (r *Reservation) WorstCase() Spent {
	s := Spent{Outcome: OutcomeWorstCase, Units: r.Call.Units, CostUSD: r.Call.CostUSD}
	if r.Call.Kind == rpcusage.KindLLM {
		s.Units = r.Call.Tokens
	}
	if s.CostUSD > 0 {
		s.CostSource = "reserved"
	}
	return s
}

// ErrDuplicateKey is a spend key the session already used.
var ErrDuplicateKey = errors.New("spend key already used in this session")

// Reserve holds c's worst case, or refuses it with a [*CapError] when it
// does not fit under a day cap of its agent or of the host.
func (l *Ledger) Reserve(ctx context.Context, c Call) (*Reservation, error) {
	if c.Key == "" {
		c.Key = newKey()
	} else if !KeyPattern.MatchString(c.Key) {
		return nil, fmt.Errorf("spend key %q: want 1 to 64 letters, digits, _ or -", c.Key)
	}
	if c.Unit == "" {
		c.Unit = rpcusage.UnitTokens
	}
	cfg := l.config()
	agentCaps := cfg.Agents[c.AgentID].Budgets.Caps
	host := cfg.Caps
	checkAgent := agentCaps.PerDayTokens > 0 || agentCaps.PerDayCostUSD > 0
	checkHost := host.HostPerDayTokens > 0 || host.HostPerDayUSD > 0
	params := db.SpendReserveParams{AgentID: c.AgentID, SessionID: c.SessionID, SpendKey: c.Key, Kind: string(c.Kind),
		Service: c.Service, Lane: opt(c.Lane), JobID: opt(c.JobID), Purpose: opt(c.Purpose),
		ExpiresAt: l.now().Add(l.callTimeout + ExpiryMargin), ReservedTokens: c.Tokens, ReservedUsd: c.CostUSD,
		Unit: c.Unit, Units: c.Units}
	if c.Kind == rpcusage.KindLLM {
		params.Units = 0
	}
	if !checkAgent && !checkHost {
		// No cap to check: the reservation only records the call.
		row, err := seam.Queries(l.pool).SpendReserve(ctx, params)
		if err != nil {
			return nil, reserveErr(c, err)
		}
		return &Reservation{ID: row.SpendID, Key: c.Key, Call: c}, nil
	}
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("reserve spend of agent %s: %w", c.AgentID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // after Commit it does nothing
	q := seam.Queries(tx)
	if err := q.SpendLock(ctx, db.SpendLockParams{AgentID: c.AgentID, Host: checkHost}); err != nil {
		return nil, fmt.Errorf("lock spend of agent %s: %w", c.AgentID, err)
	}
	if checkAgent {
		if err := l.checkAgent(ctx, q, cfg, c, agentCaps); err != nil {
			return nil, err
		}
	}
	if checkHost {
		if err := l.checkHost(ctx, q, c, host); err != nil {
			return nil, err
		}
	}
	row, err := q.SpendReserve(ctx, params)
	if err != nil {
		return nil, reserveErr(c, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("reserve spend of agent %s: commit: %w", c.AgentID, err)
	}
	return &Reservation{ID: row.SpendID, Key: c.Key, Call: c}, nil
}

func reserveErr(c Call, err error) error {
	if errors.Is(err, choirsql.ErrUniqueViolation) {
		return fmt.Errorf("reserve %s: %w: %s", c.Service, ErrDuplicateKey, c.Key)
	}
	return fmt.Errorf("reserve spend of agent %s on %s: %w", c.AgentID, c.Service, err)
}

func (l *Ledger) checkAgent(ctx context.Context, q *db.Queries, cfg *config.Config, c Call, caps config.Caps) error {
	zone, loc := usage.Zone(cfg, c.AgentID)
	since, until, day := dayBounds(l.now(), loc)
	t, err := q.SpendAgentTotals(ctx, db.SpendAgentTotalsParams{AgentID: c.AgentID, Since: since, Until: until})
	if err != nil {
		return fmt.Errorf("spend of agent %s today: %w", c.AgentID, err)
	}
	e := &CapError{AgentID: c.AgentID, Service: c.Service, Day: day, TimeZone: zone}
	return e.check(caps.PerDayTokens, caps.PerDayCostUSD, "per_day_tokens", "per_day_cost_usd", t.Tokens, t.CostUsd, c)
}

func (l *Ledger) checkHost(ctx context.Context, q *db.Queries, c Call, caps config.HostCaps) error {
	since, until, day := dayBounds(l.now(), time.UTC)
	t, err := q.SpendHostTotals(ctx, db.SpendHostTotalsParams{Since: since, Until: until})
	if err != nil {
		return fmt.Errorf("spend of all agents today: %w", err)
	}
	e := &CapError{AgentID: c.AgentID, Service: c.Service, Host: true, Day: day, TimeZone: HostZone}
	return e.check(caps.HostPerDayTokens, caps.HostPerDayUSD, "caps.host_per_day_tokens", "caps.host_per_day_usd",
		t.Tokens, t.CostUsd, c)
}

// check fills e and returns it when c does not fit under a token cap
// (model calls only: tokens are model tokens) or a cost cap, nil when it
// fits. A cost cap already reached stops an unpriced call too.
func (e *CapError) check(tokCap int64, costCap float64, tokField, costField string, tokens int64, cost float64, c Call) error {
	if tokCap > 0 && c.Tokens > 0 && tokens+c.Tokens > tokCap {
		e.Field, e.Limit, e.Spent, e.Want = tokField, float64(tokCap), float64(tokens), float64(c.Tokens)
		return e
	}
	if costCap > 0 && (cost >= costCap || cost+c.CostUSD > costCap) {
		e.Field, e.Limit, e.Spent, e.Want, e.Money = costField, costCap, cost, c.CostUSD, true
		return e
	}
	return nil
}

// Settle records what r's call spent. Settling twice, or after the
// reservation expired, changes nothing.
func (l *Ledger) Settle(ctx context.Context, r *Reservation, s Spent) error {
	outcome := string(s.Outcome)
	_, err := seam.Queries(l.pool).SpendSettle(ctx, db.SpendSettleParams{SpendID: r.ID, Outcome: &outcome, Units: s.Units,
		PromptTokens: s.PromptTokens, CompletionTokens: s.CompletionTokens, CachedTokens: s.Cached,
		CostUsd: max(s.CostUSD, 0), CostSource: opt(s.CostSource)})
	if err != nil {
		return fmt.Errorf("settle spend %d of agent %s: %w", r.ID, r.Call.AgentID, err)
	}
	return nil
}

// Expire settles the reservations past their expiry at their worst case
// and returns how many.
func (l *Ledger) Expire(ctx context.Context) (int64, error) {
	n, err := seam.Queries(l.pool).SpendExpire(ctx, l.now())
	if err != nil {
		return 0, fmt.Errorf("expire lost reservations: %w", err)
	}
	return n, nil
}

// dayBounds returns the start and end of the day holding now in loc, and
// its date.
func dayBounds(now time.Time, loc *time.Location) (start, end time.Time, day string) {
	n := now.In(loc)
	start = time.Date(n.Year(), n.Month(), n.Day(), 0, 0, 0, 0, loc)
	return start, start.AddDate(0, 0, 1), start.Format(time.DateOnly)
}

func opt(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func newKey() string {
	var b [16]byte
	rand.Read(b[:])
	return "gw-" + base64.RawURLEncoding.EncodeToString(b[:])
}
