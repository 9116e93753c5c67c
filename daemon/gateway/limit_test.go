package gateway_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"golang.org/x/time/rate"

	"github.com/choirhq/choir/daemon/gateway"
)

// delayOf is the delay of a reservation.
func delayOf(delay time.Duration, _ func()) time.Duration { return delay }

func TestSendLimiter(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	newLimiter := func(now *time.Time) *gateway.SendLimiter {
		l := gateway.NewSendLimiter(gateway.DefaultSendLimits)
		l.Now = func() time.Time { return *now }
		return l
	}

	t.Run("OneMessagePerSecondPerChat", func(t *testing.T) {
		t.Parallel()
		now := t0
		l := newLimiter(&now)
		var delays []time.Duration
		for range 4 {
			delays = append(delays, delayOf(l.Reserve("tg", "1")))
		}
		for i, d := range delays {
			if want := time.Duration(i) * time.Second; d != want {
				t.Errorf("message %d waits %s, want %s", i, d, want)
			}
		}
		now = now.Add(10 * time.Second)
		if d := delayOf(l.Reserve("tg", "1")); d != 0 {
			t.Errorf("after a pause: wait %s, want none", d)
		}
	})

	t.Run("ThirtyMessagesPerSecondPerBot", func(t *testing.T) {
		t.Parallel()
		now := t0
		l := newLimiter(&now)
		within := 0
		for i := range 60 {
			if delayOf(l.Reserve("tg", strconv.Itoa(i))) < time.Second {
				within++
			}
		}
		if within != 30 {
			t.Errorf("%d of 60 messages to distinct chats may go within a second, want 30", within)
		}
		// Another bot is not held back.
		if d := delayOf(l.Reserve("other", "1")); d != 0 {
			t.Errorf("other bot waits %s", d)
		}
	})

	t.Run("BackoffBlocksTheChat", func(t *testing.T) {
		t.Parallel()
		now := t0
		l := newLimiter(&now)
		l.Backoff("tg", "1", 7*time.Second)
		if d := delayOf(l.Reserve("tg", "1")); d != 7*time.Second {
			t.Errorf("blocked chat waits %s, want 7s", d)
		}
		if d := delayOf(l.Reserve("tg", "1")); d != 8*time.Second {
			t.Errorf("next message waits %s, want 8s (spacing holds after the block)", d)
		}
		if d := delayOf(l.Reserve("tg", "2")); d >= time.Second {
			t.Errorf("another chat waits %s", d)
		}
	})

	t.Run("CancelGivesTheSlotBack", func(t *testing.T) {
		t.Parallel()
		now := t0
		l := newLimiter(&now)
		l.Reserve("tg", "1")
		d, cancel := l.Reserve("tg", "1")
		if d != time.Second {
			t.Fatalf("second waits %s", d)
		}
		cancel()
		if d := delayOf(l.Reserve("tg", "1")); d != time.Second {
			t.Errorf("after cancel: wait %s, want 1s", d)
		}
	})

	t.Run("GatewayLimitsOverrideTheDefault", func(t *testing.T) {
		t.Parallel()
		now := t0
		l := newLimiter(&now)
		l.Reserve("console", "op")
		l.SetGatewayLimits("console", gateway.SendLimits{})
		for range 10 {
			if d := delayOf(l.Reserve("console", "op")); d != 0 {
				t.Fatalf("unlimited gateway waits %s", d)
			}
		}
		l.Reserve("tg", "1")
		if d := delayOf(l.Reserve("tg", "1")); d != time.Second {
			t.Errorf("default gateway waits %s, want 1s", d)
		}
	})

	t.Run("ZeroLimitsAreUnlimited", func(t *testing.T) {
		t.Parallel()
		l := gateway.NewSendLimiter(gateway.SendLimits{})
		for range 100 {
			if d := delayOf(l.Reserve("tg", "1")); d != 0 {
				t.Fatalf("unlimited limiter waits %s", d)
			}
		}
	})

	t.Run("WaitHonoursContext", func(t *testing.T) {
		t.Parallel()
		l := gateway.NewSendLimiter(gateway.SendLimits{PerChat: rate.Every(time.Hour), PerBot: 30})
		l.Reserve("tg", "1")
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if err := l.Wait(ctx, "tg", "1"); err == nil {
			t.Error("wait with a cancelled context returned nil")
		}
	})
}
