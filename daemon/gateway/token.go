package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"

	"github.com/choirhq/choir/config"
)

// errTokenChanged ends a bot's update loop when secret apply gives it a
// new token; the loop starts again with it.
var errTokenChanged = errors.New("bot token changed")

// SetSecrets gives the bots their tokens from secrets, for choirctl secret
// apply: later requests use the new token, and a bot whose token changed
// stops polling with the old one and starts again (getMe, then its
// unconfirmed updates). A bot whose secret is missing or empty keeps its
// token, and the error names it.
func (g *Gateway) SetSecrets(secrets config.Secrets) error {
	var errs []error
	for _, name := range g.Gateways() {
		secret := g.opts.Gateways[name].Secret
		token := secrets[secret]
		if token == "" {
			errs = append(errs, fmt.Errorf("gateway %q keeps its bot token: secret %q holds none; set it with choirctl secret set %s",
				name, secret, secret))
			continue
		}
		if g.bots[name].setToken(token) {
			g.logger.Info("telegram bot token replaced; polling again with the new one", slog.String("gateway", name))
		}
	}
	return errors.Join(errs...)
}

// setToken replaces the bot's token, reporting whether it changed, and
// ends the update loop polling with the old one.
func (b *bot) setToken(token string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if token == b.token {
		return false
	}
	if !slices.Contains(b.retired, b.token) {
		b.retired = append(b.retired, b.token)
	}
	b.token = token
	if b.stopRun != nil {
		b.stopRun(errTokenChanged)
	}
	return true
}

func (b *bot) currentToken() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.token
}

// tokens are the current token and the ones it replaced.
func (b *bot) tokens() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string{b.token}, b.retired...)
}

// stopped ends the update loop at offset: it confirms the updates below
// offset, unless the loop stops for a new token. Those updates then come
// back to the new loop, which knows them as duplicates; and a token that
// now names another bot must not confirm this one's offsets.
func (b *bot) stopped(ctx context.Context, offset int64) {
	if errors.Is(context.Cause(ctx), errTokenChanged) {
		return
	}
	b.confirm(context.WithoutCancel(ctx), offset)
}
