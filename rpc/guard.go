package rpc

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Defaults of the guards that keep one agent from starving choird or the
// other agents (see ServerOptions).
const (
	// DefaultMaxConns caps the connections of one listener: far above what
	// honest agents use (each keeps a few pooled call connections and one
	// event stream), far below the process's descriptor limit.
	DefaultMaxConns = 1024
	// DefaultFailedAuthRate and DefaultFailedAuthBurst bound the failed
	// authentications a listener allows before it stops looking tokens up:
	// an honest agent fails only once its session is revoked, and a
	// failed lookup is one indexed read, so 20/s costs the database
	// nothing noticeable.
	DefaultFailedAuthRate  = 20
	DefaultFailedAuthBurst = 100
)

// guardKey carries a listener's *listenerGuard in its requests' contexts.
type guardKey struct{}

// listenerGuard is what Serve keeps per listener against abuse: the budget
// of failed authentications. Once it is spent, calls are authenticated
// only from what the server remembers (see Server.rememberedSession), so
// bad tokens cannot make the database work.
type listenerGuard struct {
	failures *rate.Limiter
	warn     rate.Sometimes
}

func newListenerGuard(perSecond float64, burst int) *listenerGuard {
	return &listenerGuard{failures: rate.NewLimiter(rate.Limit(perSecond), burst), warn: rate.Sometimes{Interval: 10 * time.Second}}
}

func guardFrom(ctx context.Context) *listenerGuard {
	g, _ := ctx.Value(guardKey{}).(*listenerGuard)
	return g
}

// throttled reports whether the failed-authentication budget is spent.
func (g *listenerGuard) throttled() bool { return g.failures.Tokens() < 1 }

// failed spends one failed authentication.
func (g *listenerGuard) failed() { g.failures.Allow() }

// retryAfter is how long until the budget has room again.
func (g *listenerGuard) retryAfter() time.Duration {
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

func (id *identity) remember(token, agentID string) {
	if id.known.Load() {
		return
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	id.tokenHash, id.agentID = HashLeaseToken(token), agentID
	id.known.Store(true)
}

// matches reports whether token is the remembered one, and the agent.
func (id *identity) matches(token string) (string, bool) {
	if !id.known.Load() {
		return "", false
	}
	id.mu.Lock()
	defer id.mu.Unlock()
	return id.agentID, LeaseTokenMatches(token, id.tokenHash)
}
