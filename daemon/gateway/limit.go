package gateway

import (
	"context"
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// SendLimits are the send rates a SendLimiter enforces, in messages per
// second.
type SendLimits struct {
	PerChat rate.Limit
	PerBot  rate.Limit
}

// DefaultSendLimits are Telegram's: about one message per second in a
// chat and thirty per second per bot.
var DefaultSendLimits = SendLimits{PerChat: 1, PerBot: 30}

// SendLimiter paces messages per chat and per bot (gateway). It is safe for
// concurrent use; one per process, shared by everything that sends: the
// gateway's own replies and the delivery worker (it is an outbox.Pacer).
type SendLimiter struct {
	limits SendLimits
	// Now is the clock; tests may replace it before first use.
	Now func() time.Time

	mu        sync.Mutex
	perBotSet map[string]SendLimits
	chats     map[[2]string]*chatLimit
	bots      map[string]*rate.Limiter
}

type chatLimit struct {
	lim          *rate.Limiter
	blockedUntil time.Time
}

// NewSendLimiter returns a limiter for the given rates. A zero or negative
// rate is unlimited.
func NewSendLimiter(l SendLimits) *SendLimiter {
	if l.PerChat <= 0 {
		l.PerChat = rate.Inf
	}
	if l.PerBot <= 0 {
		l.PerBot = rate.Inf
	}
	return &SendLimiter{limits: l, Now: time.Now, perBotSet: map[string]SendLimits{}, chats: map[[2]string]*chatLimit{},
		bots: map[string]*rate.Limiter{}}
}

// SetGatewayLimits gives one gateway its own rates, replacing the default:
// a console gateway, say, needs no pacing (SendLimits{} is unlimited).
func (l *SendLimiter) SetGatewayLimits(gateway string, lim SendLimits) {
	if lim.PerChat <= 0 {
		lim.PerChat = rate.Inf
	}
	if lim.PerBot <= 0 {
		lim.PerBot = rate.Inf
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.perBotSet[gateway] = lim
	delete(l.bots, gateway)
	for k := range l.chats {
		if k[0] == gateway {
			delete(l.chats, k)
		}
	}
}

func (l *SendLimiter) limitsLocked(gateway string) SendLimits {
	if lim, ok := l.perBotSet[gateway]; ok {
		return lim
	}
	return l.limits
}

// maxIdleChats is how many chat limiters are kept before idle ones are
// dropped.
const maxIdleChats = 1024

// Reserve books one message to chatID through gateway: the caller waits
// delay before sending it, or calls cancel to give the booking back when
// it will not send. Each message sent needs its own reservation: burst is
// one for both limits, so messages are evenly spaced rather than bunched.
func (l *SendLimiter) Reserve(gateway, chatID string) (delay time.Duration, cancel func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.Now()
	c := l.chatLocked(now, gateway, chatID)
	b := l.bots[gateway]
	if b == nil {
		b = rate.NewLimiter(l.limitsLocked(gateway).PerBot, 1)
		l.bots[gateway] = b
	}
	// A chat blocked by a 429 reserves from the end of the block, so the
	// spacing holds after it too.
	from := now
	if c.blockedUntil.After(now) {
		from = c.blockedUntil
	}
	chat, bot := c.lim.ReserveN(from, 1), b.ReserveN(from, 1)
	delay = from.Sub(now) + max(chat.DelayFrom(from), bot.DelayFrom(from))
	return delay, func() {
		chat.CancelAt(from)
		bot.CancelAt(from)
	}
}

func (l *SendLimiter) chatLocked(now time.Time, gateway, chatID string) *chatLimit {
	key := [2]string{gateway, chatID}
	c := l.chats[key]
	if c != nil {
		return c
	}
	if len(l.chats) >= maxIdleChats {
		for k, v := range l.chats {
			if v.lim.TokensAt(now) >= 1 && !v.blockedUntil.After(now) {
				delete(l.chats, k)
			}
		}
	}
	c = &chatLimit{lim: rate.NewLimiter(l.limitsLocked(gateway).PerChat, 1)}
	l.chats[key] = c
	return c
}

// Wait reserves one message and sleeps until it may be sent.
func (l *SendLimiter) Wait(ctx context.Context, gateway, chatID string) error {
	delay, cancel := l.Reserve(gateway, chatID)
	if delay <= 0 {
		return nil
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		cancel()
		return ctx.Err()
	}
}

// Backoff blocks chatID for d, after the channel answered "too many
// requests, retry after d".
func (l *SendLimiter) Backoff(gateway, chatID string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.Now()
	c := l.chatLocked(now, gateway, chatID)
	if until := now.Add(d); until.After(c.blockedUntil) {
		c.blockedUntil = until
	}
}
