// Package spend is the enforcement of usage caps at choird's egress
// gateway (issue 34): every metered call an agent makes through the
// gateway (a model call, a search query, speech) is reserved at its worst
// case in Postgres before it is forwarded, in one transaction
// (choir_control.spend_reserve) that checks the agent's day caps
// (agents.<id>.budgets.per_day_tokens and per_day_cost_usd, days in its
// DM's zone) and the host-wide day caps (caps.host_per_day_tokens and
// caps.host_per_day_usd, UTC days) against what is spent and reserved,
// under row locks on the day totals (choir_control.spend_days) so that
// two calls, of one agent or of two, cannot both pass on the last
// dollar. The call is then settled from the provider's answer, and a
// reservation whose call choird lost is expired at its worst case by the
// periodic spend_expire job.
//
// A settled row is the call's usage record: choir_audit.usage lists it,
// and leaves out the agent's own record of the same call (one carrying
// the same spend_key in the same session), so choirctl usage, /usage and
// the baselines of the agent's meter count it exactly once. The agent's
// meter stays a fast early refusal; this is the enforcement.
//
// choird runs an [ExpireWorker] (a jobs.PeriodicFeature) beside the
// gateway, or reservations lost in a crash hold their room for the day.
package spend

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
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

// OtherSpendMaxAge is how old the spend read from choir_audit.usage
// besides the ledger may be when a reservation counts it (otherSpend).
const OtherSpendMaxAge = 5 * time.Second

// Ledger reserves and settles metered calls.
type Ledger struct {
	pool        *pgxpool.Pool
	config      func() *config.Config
	now         func() time.Time
	callTimeout time.Duration

	mu sync.Mutex
	// other is the spend besides the ledger, per agent ("": the host).
	other map[string]otherEntry
}

type otherEntry struct {
	day    string
	at     time.Time
	totals rpcusage.Totals
}

// New returns a Ledger.
func New(o Options) *Ledger {
	l := &Ledger{pool: o.Pool, config: o.Config, now: o.Now, callTimeout: o.CallTimeout, other: map[string]otherEntry{}}
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
	kind, units := string(c.Kind), c.Units
	if c.Kind == rpcusage.KindLLM {
		units = 0
	}
	now := l.now()
	zone, loc := usage.Zone(cfg, c.AgentID)
	aDay, _, aDate := dayBounds(now, loc)
	hDay, _, hDate := dayBounds(now, time.UTC)
	var agentOther, hostOther rpcusage.Totals
	var err error
	if checkAgent {
		if agentOther, err = l.otherSpend(ctx, c.AgentID, aDay, aDate); err != nil {
			return nil, err
		}
	}
	if checkHost {
		if hostOther, err = l.otherSpend(ctx, "", hDay, hDate); err != nil {
			return nil, err
		}
	}
	row, err := seam.Queries(l.pool).SpendReserveChecked(ctx, db.SpendReserveCheckedParams{
		AgentID: c.AgentID, SessionID: c.SessionID, SpendKey: c.Key, Kind: kind, Service: c.Service,
		Lane: opt(c.Lane), JobID: opt(c.JobID), Purpose: opt(c.Purpose), ExpiresAt: now.Add(l.callTimeout + ExpiryMargin),
		ReservedTokens: c.Tokens, ReservedUsd: c.CostUSD, Unit: c.Unit, Units: units,
		AgentDay: aDay, AgentTokensCap: agentCaps.PerDayTokens, AgentUsdCap: agentCaps.PerDayCostUSD,
		AgentOtherTokens: agentOther.Tokens, AgentOtherUsd: agentOther.CostUSD,
		HostDay: hDay, HostTokensCap: host.HostPerDayTokens, HostUsdCap: host.HostPerDayUSD,
		HostOtherTokens: hostOther.Tokens, HostOtherUsd: hostOther.CostUSD})
	if err != nil {
		return nil, reserveErr(c, err)
	}
	if row.Refused != "" {
		e := &CapError{AgentID: c.AgentID, Service: c.Service, Day: aDate, TimeZone: zone, Want: float64(c.Tokens),
			Spent: float64(row.SpentTokens)}
		switch row.Refused {
		case "agent_tokens":
			e.Field, e.Limit = "per_day_tokens", float64(agentCaps.PerDayTokens)
		case "agent_usd":
			e.Field, e.Limit = "per_day_cost_usd", agentCaps.PerDayCostUSD
		case "host_tokens":
			e.Host, e.Field, e.Limit = true, "caps.host_per_day_tokens", float64(host.HostPerDayTokens)
		case "host_usd":
			e.Host, e.Field, e.Limit = true, "caps.host_per_day_usd", host.HostPerDayUSD
		}
		if strings.HasSuffix(row.Refused, "_usd") {
			e.Money, e.Spent, e.Want = true, row.SpentUsd, c.CostUSD
		}
		if e.Host {
			e.Day, e.TimeZone = hDate, HostZone
		}
		return nil, e
	}
	return &Reservation{ID: row.SpendID, Key: c.Key, Call: c}, nil
}

func reserveErr(c Call, err error) error {
	if errors.Is(err, choirsql.ErrUniqueViolation) {
		return fmt.Errorf("reserve %s: %w: %s", c.Service, ErrDuplicateKey, c.Key)
	}
	return fmt.Errorf("reserve spend of agent %s on %s: %w", c.AgentID, c.Service, err)
}

// otherSpend is what agentID (empty: every agent) spent on day besides
// the ledger: model calls its log records that did not go through the
// gateway, the priced tools it records itself, embeddings. It is read
// from choir_audit.usage at most every OtherSpendMaxAge: that view is
// too costly to plan and run before every call, and what it adds to the
// ledger reaches it only with the agent's heartbeat anyway.
func (l *Ledger) otherSpend(ctx context.Context, agentID string, since time.Time, day string) (rpcusage.Totals, error) {
	now := l.now()
	l.mu.Lock()
	e, ok := l.other[agentID]
	l.mu.Unlock()
	if ok && e.day == day && now.Sub(e.at) < OtherSpendMaxAge {
		return e.totals, nil
	}
	t, err := seam.Queries(l.pool).SpendOtherTotals(ctx, db.SpendOtherTotalsParams{AgentID: agentID, Since: since,
		Until: since.AddDate(0, 0, 1)})
	if err != nil {
		if agentID == "" {
			return rpcusage.Totals{}, fmt.Errorf("spend of all agents today: %w", err)
		}
		return rpcusage.Totals{}, fmt.Errorf("spend of agent %s today: %w", agentID, err)
	}
	e = otherEntry{day: day, at: now, totals: rpcusage.Totals{Tokens: t.Tokens, CostUSD: t.CostUsd}}
	l.mu.Lock()
	l.other[agentID] = e
	l.mu.Unlock()
	return e.totals, nil
}

// Settle records what r's call spent. Settling twice, or after the
// reservation expired, changes nothing.
func (l *Ledger) Settle(ctx context.Context, r *Reservation, s Spent) error {
	return l.SettleMany(ctx, []Settlement{{Reservation: r, Spent: s}})
}

// Settlement is a reservation and what its call spent.
type Settlement struct {
	Reservation *Reservation
	Spent       Spent
}

// SettleMany is Settle for a batch of calls, in one round trip.
func (l *Ledger) SettleMany(ctx context.Context, batch []Settlement) error {
	var p db.SpendSettleParams
	for _, b := range batch {
		s := b.Spent
		p.SpendIds = append(p.SpendIds, b.Reservation.ID)
		p.Outcomes = append(p.Outcomes, string(s.Outcome))
		p.Units = append(p.Units, s.Units)
		p.PromptTokens = append(p.PromptTokens, s.PromptTokens)
		p.CompletionTokens = append(p.CompletionTokens, s.CompletionTokens)
		p.CachedTokens = append(p.CachedTokens, s.Cached)
		p.CostsUsd = append(p.CostsUsd, max(s.CostUSD, 0))
		p.CostSources = append(p.CostSources, s.CostSource)
	}
	if _, err := seam.Queries(l.pool).SpendSettle(ctx, p); err != nil {
		return fmt.Errorf("settle %d calls' spend: %w", len(batch), err)
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
