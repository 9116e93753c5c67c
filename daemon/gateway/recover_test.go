package gateway_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/choirhq/choir/daemon/gateway"
)

// TestBotLoopSurvivesAPanic: a panic while handling an update restarts
// the bot's loop instead of ending choird; the update comes again and is
// handled.
func TestBotLoopSurvivesAPanic(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var calls atomic.Int32
	b.inbox.before = func(context.Context, gateway.InboundMessage) error {
		if calls.Add(1) == 1 {
			var m map[string]int
			m["boom"]++ // a real runtime panic, in the bot's goroutine
		}
		return nil
	}
	b.run(t)
	id := b.tg.SendText(ownerID, "hello after a panic")
	rs := b.waitRows(t, 1)
	if rs[0].Text != "hello after a panic" || rs[0].UpdateID != id {
		t.Errorf("row = %+v", rs[0])
	}
	if !strings.Contains(b.logs.String(), "telegram bot loop panicked; restarting it") {
		t.Errorf("the panic was not logged:\n%s", b.logs)
	}
}
