package callserve

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/choirhq/choir/rpc/internal/stream"
)

// Limits are the per-session bounds, defaults applied.
type Limits struct {
	RequestsPerSecond float64
	Burst             int
	PushBuffer        int
}

// Sessions is what the server keeps per session, created on first use.
type Sessions struct {
	lim   Limits
	hash  func(token string) []byte
	match func(token string, hash []byte) bool

	mu sync.Mutex
	m  map[string]*Session
}

// NewSessions returns an empty table. hash and match are the lease token's
// hash and its constant-time comparison.
func NewSessions(lim Limits, hash func(string) []byte, match func(string, []byte) bool) *Sessions {
	return &Sessions{lim: lim, hash: hash, match: match, m: map[string]*Session{}}
}

// Session is a session's rate limiter, push queue and remembered identity.
type Session struct {
	limiter *rate.Limiter
	Pushes  *stream.Queue
	id      identity
}

// Get returns the state of a session, creating it.
func (t *Sessions) Get(id string) *Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.m[id]
	if st == nil {
		limit := rate.Limit(t.lim.RequestsPerSecond)
		if math.IsInf(t.lim.RequestsPerSecond, 1) {
			limit = rate.Inf
		}
		st = &Session{
			limiter: rate.NewLimiter(limit, t.lim.Burst),
			Pushes:  stream.NewQueue(t.lim.PushBuffer),
		}
		t.m[id] = st
	}
	return st
}

// Lookup returns the state of a session, nil if it has none.
func (t *Sessions) Lookup(id string) *Session {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.m[id]
}

// Len is how many sessions have state.
func (t *Sessions) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// Drop forgets a session's rate limiter and push queue, ending its event
// stream.
func (t *Sessions) Drop(id string) {
	t.mu.Lock()
	st := t.m[id]
	delete(t.m, id)
	t.mu.Unlock()
	if st != nil {
		st.Pushes.Close()
	}
}

// remembered authenticates a call from what the server remembers of its
// session, without the authenticator: only for a verb whose handler
// fences the session itself, and only with an authenticator that may
// answer from memory anyway.
func (t *Sessions) remembered(sessionID, token string) (agentID string, ok bool) {
	st := t.Lookup(sessionID)
	if st == nil {
		return "", false
	}
	return st.id.matches(token, t.match)
}

// knownToken reports whether token is the one the session authenticated
// with before on this server. While failed authentications are throttled,
// a call with a known token still gets its lookup: the lookup is the
// honest agent's own, which a flood of bad tokens must not starve (its
// replies, approvals and host tools go through such calls), and a bad
// token never matches.
func (t *Sessions) knownToken(sessionID, token string) bool {
	_, ok := t.remembered(sessionID, token)
	return ok
}

// Lookup asks the authenticator about a session's token: identityOnly
// asks only whether the token is the session's (see rpc's
// IdentityAuthenticator). unauthenticated reports that it refused the
// token; any other error means it could not tell.
type Lookup func(ctx context.Context, identityOnly bool) (sessionID, agentID string, unauthenticated bool, err error)

// Authenticate checks a call's lease token with lookup and applies the
// session's rate limit. While the listener's failed-authentication budget
// (the Guard in ctx) is spent, it asks lookup nothing about a token it has
// not seen succeed for the session. identityOnly is set for a verb whose
// handler fences the session itself, with an authenticator that can check
// the token alone.
func (t *Sessions) Authenticate(ctx context.Context, log *slog.Logger, identityOnly bool, sessionID, token string, lookup Lookup) (agentID string, st *Session, r *Refusal) {
	g := guardFrom(ctx)
	if g != nil && g.throttled() {
		known := false
		if identityOnly {
			// From memory alone: no lookup at all.
			if agentID, known = t.remembered(sessionID, token); known {
				return t.admit(sessionID, token, agentID)
			}
		} else {
			known = t.knownToken(sessionID, token)
		}
		if !known {
			d := g.retryAfter()
			g.warn.Do(func() {
				log.WarnContext(ctx, "rpc: too many failed authentications; refusing lookups of unknown tokens",
					slog.Float64("per_second", g.perSecond), slog.Int("burst", g.burst))
			})
			return "", nil, &Refusal{Kind: RateLimited,
				Message:    fmt.Sprintf("too many failed authentications on this listener; retry in %s", d.Round(time.Millisecond)),
				RetryAfter: d}
		}
	}
	id, agentID, unauthenticated, err := lookup(ctx, identityOnly)
	switch {
	case unauthenticated:
		if g != nil {
			g.failed()
		}
		return "", nil, refuse(Unauthenticated, fmt.Sprintf("lease token rejected for session %s: wrong token or session not active", sessionID))
	case err != nil:
		return "", nil, &Refusal{Kind: Unavailable, What: "authenticate", Err: err}
	case id != sessionID:
		return "", nil, &Refusal{Kind: Internal, What: "authenticate",
			Err: fmt.Errorf("authenticator returned session %s for %s", id, sessionID)}
	}
	return t.admit(id, token, agentID)
}

// admit remembers an authenticated session's token and applies its rate
// limit.
func (t *Sessions) admit(sessionID, token, agentID string) (string, *Session, *Refusal) {
	st := t.Get(sessionID)
	st.id.remember(token, agentID, t.hash)
	now := time.Now()
	res := st.limiter.ReserveN(now, 1)
	if d := res.DelayFrom(now); !res.OK() || d > 0 {
		res.CancelAt(now)
		if !res.OK() {
			d = time.Second
		}
		return "", nil, &Refusal{
			Kind: RateLimited,
			Message: fmt.Sprintf("rate limit exceeded for session %s: %s requests/s with bursts of %d; retry in %s",
				sessionID, strconv.FormatFloat(t.lim.RequestsPerSecond, 'g', -1, 64), t.lim.Burst, d.Round(time.Millisecond)),
			RetryAfter: d,
		}
	}
	return agentID, st, nil
}

// guardKey carries a listener's *Guard in its requests' contexts.
type guardKey struct{}

// Guard is what the server keeps per listener against abuse: the budget
// of failed authentications. Once it is spent, calls are authenticated
// only from what the server remembers, so bad tokens cannot make the
// database work.
type Guard struct {
	failures  *rate.Limiter
	warn      rate.Sometimes
	perSecond float64
	burst     int
}

// WithGuard returns ctx carrying a fresh Guard that allows perSecond failed
// authentications per second, and burst at once.
func WithGuard(ctx context.Context, perSecond float64, burst int) context.Context {
	g := &Guard{failures: rate.NewLimiter(rate.Limit(perSecond), burst), warn: rate.Sometimes{Interval: 10 * time.Second},
		perSecond: perSecond, burst: burst}
	return context.WithValue(ctx, guardKey{}, g)
}

func guardFrom(ctx context.Context) *Guard {
	g, _ := ctx.Value(guardKey{}).(*Guard)
	return g
}

// throttled reports whether the failed-authentication budget is spent.
func (g *Guard) throttled() bool { return g.failures.Tokens() < 1 }

// failed spends one failed authentication.
func (g *Guard) failed() { g.failures.Allow() }

// retryAfter is how long until the budget has room again.
func (g *Guard) retryAfter() time.Duration {
	r := g.failures.Reserve()
	d := r.Delay()
	r.Cancel()
	return max(d, 10*time.Millisecond)
}

// identity is a session's lease token hash and agent, remembered after the
// session's first successful authentication (a session's token never
// changes), so that a heartbeat can be authenticated without a lookup
// while the listener is throttled.
type identity struct {
	known     atomic.Bool
	mu        sync.Mutex
	tokenHash []byte
	agentID   string
}

func (id *identity) remember(token, agentID string, hash func(string) []byte) {
	if id.known.Load() {
		return
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	id.tokenHash, id.agentID = hash(token), agentID
	id.known.Store(true)
}

// matches reports whether token is the remembered one, and the agent.
func (id *identity) matches(token string, match func(string, []byte) bool) (string, bool) {
	if !id.known.Load() {
		return "", false
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.agentID, match(token, id.tokenHash)
}
