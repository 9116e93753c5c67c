package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/dmcmd"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/inbox"
	"github.com/choirhq/choir/daemon/mailwatch"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/daemon/progress"
)

// newGateway makes the Telegram bots of config.json, if any, with the
// control layer's hooks. It makes no request.
func (d *Daemon) newGateway(opts Options) error {
	d.sendLimiter = gateway.NewSendLimiter(gateway.DefaultSendLimits)
	d.inbox = inbox.New(d.Control, d.pool, d.logger)
	// Mail held back from waking the agent comes with the user's next
	// message.
	d.inbox.OnUserMessage(mailwatch.AnnounceHeld)
	d.resends = outbox.NewResends(d.pool)
	d.commands = dmcmd.New(dmcmd.Options{Control: d.Control, Approvals: d.approvals, Inbox: d.inbox, Resends: d.resends,
		Pool: d.pool, Logger: d.logger})
	snap := d.Snapshot()
	cfg, secrets := snap.Config, snap.Secrets
	telegram := 0
	for _, g := range cfg.Gateways {
		if g.Type == config.GatewayTelegram {
			telegram++
		}
	}
	// Core jobs' progress goes to the Telegram DMs; with no bot, nowhere
	// (choirctl chat reads it from the lane states).
	progressOpts := progress.Options{Pool: d.pool, Logger: d.logger, DMAddress: d.DMAddress, Interval: opts.ProgressInterval,
		SettleAfter: opts.ProgressSettleAfter, SettleInterval: opts.ProgressSettleInterval}
	if telegram == 0 {
		d.progress = progress.New(progressOpts)
		return nil
	}
	g, err := gateway.New(gateway.Options{Gateways: cfg.Gateways, DMs: cfg.DMs, Secrets: secrets,
		APIURL: opts.TelegramAPIURL, Inbox: d.inbox, Workspaces: d.inbox, Approvals: d.commands, Commands: d.commands,
		Resends: d.commands,
		Limiter: d.sendLimiter, Logger: d.logger})
	if err != nil {
		return fmt.Errorf("telegram gateway: %w", err)
	}
	d.gateway = g
	progressOpts.Messenger = g
	d.progress = progress.New(progressOpts)
	d.approvals.SetButtons(g)
	d.inbox.SetGateway(g)
	d.commands.SetGateway(g)
	d.OnConfigApplied(func(c *config.Config, _ config.Secrets) { g.SetDMs(c.DMs) })
	d.OnSecretsApplied(func(_ context.Context, s config.Secrets) error { return g.SetSecrets(s) })
	return nil
}

// runGateway polls the bots and runs the inbox sweep until ctx ends; the
// channel closes when both have stopped.
func (d *Daemon) runGateway(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		sweepDone := make(chan struct{})
		go func() { defer close(sweepDone); d.inbox.SweepInbox(ctx) }()
		if d.gateway != nil {
			d.logger.InfoContext(ctx, "step 8: telegram gateways polling", slog.Any("gateways", d.gateway.Gateways()))
			if err := d.gateway.Run(ctx); err != nil {
				d.logger.ErrorContext(ctx, "telegram gateway", slog.String("error", err.Error()))
			}
			d.gateway.Close()
		}
		<-sweepDone
		d.inbox.Typing().StopAll()
	}()
	return done
}

// readyPollWait bounds how long choird waits for its bots to poll before
// it says it is ready: a bot that cannot reach Telegram keeps retrying,
// and must not keep choird from serving the others.
const readyPollWait = 10 * time.Second

// waitPolling waits until the bots poll (spec 6.2: they poll, then
// choird is ready), at most readyPollWait, and returns those that do.
func (d *Daemon) waitPolling(ctx context.Context) []string {
	if d.gateway == nil {
		return []string{}
	}
	wctx, cancel := context.WithTimeout(ctx, readyPollWait)
	defer cancel()
	polling := d.gateway.WaitPolling(wctx)
	if all := d.gateway.Gateways(); len(polling) < len(all) {
		d.logger.WarnContext(ctx, "telegram gateways not polling yet; choird is ready without them and they keep retrying",
			slog.Any("gateways", all), slog.Any("gateways_polling", polling), slog.Duration("waited", readyPollWait))
	}
	return polling
}

// outboundSender delivers outbox rows: through the Telegram bots, or, for
// a console gateway, nowhere: choirctl chat reads those rows from the
// outbox, so sending one only marks it sent.
type outboundSender struct{ d *Daemon }

var _ outbox.Sender = outboundSender{}

func (s outboundSender) console(name string) bool {
	g, ok := s.d.Snapshot().Config.Gateways[name]
	return ok && g.Type == config.GatewayConsole
}

// Parts implements outbox.Sender.
func (s outboundSender) Parts(msg message.Part) []message.Part {
	if s.d.gateway.Serves(msg.Gateway) {
		return s.d.gateway.Parts(msg)
	}
	return []message.Part{msg}
}

// errNoSuchGateway can never be sent: the row is marked failed.
type errNoSuchGateway struct{ name string }

func (e errNoSuchGateway) Error() string {
	return fmt.Sprintf("gateway %q is neither a telegram nor a console gateway in config.json", e.name)
}
func (errNoSuchGateway) Temporary() bool { return false }

// Send implements outbox.Sender.
func (s outboundSender) Send(ctx context.Context, part message.Part) (int64, error) {
	switch {
	case s.d.gateway.Serves(part.Gateway):
		return s.d.gateway.Send(ctx, part)
	case s.console(part.Gateway):
		return 0, nil
	}
	return 0, errNoSuchGateway{part.Gateway}
}
