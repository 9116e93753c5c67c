package gateway

import (
	"context"
	"log/slog"
	"runtime/debug"
)

// runRecovering runs the bot's update loop, and runs it again, after the
// usual backoff, when it panics (a handler tripping over an odd update, a
// bug in a hook): one bot's panic must not take choird and every other bot
// down. The update being handled was not confirmed, so Telegram delivers
// it again to the restarted loop; an update that panics every time is
// retried at the growing backoff (at most 30 s), never faster. A new
// token (setToken) ends the loop too, which then starts again at once.
func (b *bot) runRecovering(ctx context.Context) {
	for n := 0; ; n++ {
		runCtx, stop := context.WithCancelCause(ctx)
		b.mu.Lock()
		b.stopRun = stop
		b.mu.Unlock()
		panicked := b.runOnce(runCtx)
		stop(nil)
		if ctx.Err() != nil {
			return
		}
		if !panicked {
			// The token changed: poll with the new one now.
			n = -1
			continue
		}
		if !sleep(ctx, backoff(b.g.opts.RetryBase, n)) {
			return
		}
	}
}

// runOnce runs the loop until it returns (false) or panics (true).
func (b *bot) runOnce(ctx context.Context) (panicked bool) {
	defer func() {
		if p := recover(); p != nil {
			panicked = true
			b.g.logger.ErrorContext(ctx, "telegram bot loop panicked; restarting it", slog.String("gateway", b.name),
				slog.Any("panic", p), slog.String("stack", string(debug.Stack())))
		}
	}()
	b.run(ctx)
	return false
}
