package inbox

import (
	"context"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/choirhq/choir/daemon/gateway"
)

// typingMax bounds one typing indicator: a turn that runs longer goes on
// without it rather than showing "typing…" forever if a stop is missed.
const typingMax = 3 * time.Minute

// Typing shows Telegram's typing indicator in a session's chat while
// its edge works: from the push of a user message until the reply is
// queued, the edge reports IDLE, or the session ends.
type Typing struct {
	g  *gateway.Gateway
	mu sync.Mutex
	m  map[uuid.UUID]context.CancelFunc
}

// Start shows the typing indicator in a chat until Stop, at most
// typingMax.
func (t *Typing) Start(gw, chatID string, session uuid.UUID) {
	if t == nil || t.g == nil || !t.g.Serves(gw) {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, on := t.m[session]; on {
		return
	}
	if t.m == nil {
		t.m = map[uuid.UUID]context.CancelFunc{}
	}
	ctx, cancel := context.WithTimeout(context.Background(), typingMax)
	t.m[session] = cancel
	go func() {
		t.g.Typing(ctx, gw, chatID)
		t.mu.Lock()
		defer t.mu.Unlock()
		// Only this run's entry: a later start may have replaced it.
		if ctx.Err() == context.DeadlineExceeded {
			delete(t.m, session)
		}
	}()
}

// Stop ends the indicator of a session.
func (t *Typing) Stop(session uuid.UUID) {
	if t == nil {
		return
	}
	t.mu.Lock()
	cancel := t.m[session]
	delete(t.m, session)
	t.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// StopAll ends every indicator, when the bots stop.
func (t *Typing) StopAll() {
	if t == nil {
		return
	}
	t.mu.Lock()
	m := t.m
	t.m = nil
	t.mu.Unlock()
	for _, cancel := range m {
		cancel()
	}
}
