package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
)

// newGateway makes the Telegram bots of config.json, if any, with the
// control layer's hooks. It makes no request.
func (d *Daemon) newGateway(opts Options) error {
	d.sendLimiter = gateway.NewSendLimiter(gateway.DefaultSendLimits)
	d.typing = &typingSet{}
	cfg, secrets := d.config()
	telegram := 0
	for _, g := range cfg.Gateways {
		if g.Type == config.GatewayTelegram {
			telegram++
		}
	}
	if telegram == 0 {
		return nil
	}
	hooks := gatewayHooks{d}
	g, err := gateway.New(gateway.Options{Gateways: cfg.Gateways, DMs: cfg.DMs, Secrets: secrets,
		APIURL: opts.TelegramAPIURL, Inbox: hooks, Workspaces: hooks, Approvals: hooks, Commands: d.dmCommands(),
		Limiter: d.sendLimiter, Logger: d.logger})
	if err != nil {
		return fmt.Errorf("telegram gateway: %w", err)
	}
	d.gateway = g
	d.typing.g = g
	d.onConfigApplied = append(d.onConfigApplied, func(c *config.Config, _ config.Secrets) { g.SetDMs(c.DMs) })
	return nil
}

// runGateway polls the bots and runs the inbox sweep until ctx ends; the
// channel closes when both have stopped.
func (d *Daemon) runGateway(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		sweepDone := make(chan struct{})
		go func() { defer close(sweepDone); d.sweepInbox(ctx) }()
		if d.gateway != nil {
			d.logger.InfoContext(ctx, "step 8: telegram gateways polling", slog.Any("gateways", d.gateway.Gateways()))
			if err := d.gateway.Run(ctx); err != nil {
				d.logger.ErrorContext(ctx, "telegram gateway", slog.String("error", err.Error()))
			}
			d.gateway.Close()
		}
		<-sweepDone
		d.typing.stopAll()
	}()
	return done
}

// outboundSender delivers outbox rows: through the Telegram bots, or, for
// a console gateway, nowhere: choirctl chat reads those rows from the
// outbox, so sending one only marks it sent.
type outboundSender struct{ d *Daemon }

var _ jobs.OutboundSender = outboundSender{}

func (s outboundSender) console(name string) bool {
	cfg, _ := s.d.config()
	g, ok := cfg.Gateways[name]
	return ok && g.Type == config.GatewayConsole
}

// Parts implements jobs.OutboundSender.
func (s outboundSender) Parts(msg jobs.OutboundPart) []jobs.OutboundPart {
	if s.d.gateway.Serves(msg.Gateway) {
		return s.d.gateway.Parts(msg)
	}
	return []jobs.OutboundPart{msg}
}

// errNoSuchGateway can never be sent: the row is marked failed.
type errNoSuchGateway struct{ name string }

func (e errNoSuchGateway) Error() string {
	return fmt.Sprintf("gateway %q is neither a telegram nor a console gateway in config.json", e.name)
}
func (errNoSuchGateway) Temporary() bool { return false }

// Send implements jobs.OutboundSender.
func (s outboundSender) Send(ctx context.Context, part jobs.OutboundPart) (int64, error) {
	switch {
	case s.d.gateway.Serves(part.Gateway):
		return s.d.gateway.Send(ctx, part)
	case s.console(part.Gateway):
		return 0, nil
	}
	return 0, errNoSuchGateway{part.Gateway}
}

// dmAddress locates a DM of config.json: its gateway and chat.
func (d *Daemon) dmAddress(dm string) (gatewayName, chatID string, ok bool) {
	cfg, _ := d.config()
	return dmAddressIn(cfg, dm)
}

// removeInstance removes the container or process of a crashed session,
// for the crash detection job: a frozen agent must not wake up and act
// (its token is revoked too, so it could not anyway).
func (d *Daemon) removeInstance(ctx context.Context, sessionID uuid.UUID) error {
	if d.runtime == nil {
		return nil
	}
	s, err := db.New(d.pool).SessionGetByID(ctx, sessionID)
	if err != nil {
		return fmt.Errorf("load session %s: %w", sessionID, err)
	}
	if s.ContainerID == "" {
		return nil
	}
	if err := d.runtime.Remove(ctx, s.ContainerID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("remove instance %s of crashed session %s: %w", s.ContainerID, sessionID, err)
	}
	d.logger.InfoContext(ctx, "instance of a crashed session removed", slog.String("session_id", sessionID.String()),
		slog.String("instance", s.ContainerID))
	return nil
}

// crashNotice tells the crashed session's DM, through the outbox.
func (d *Daemon) crashNotice(ctx context.Context, sessionID uuid.UUID, why string) {
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		s, err := db.New(tx).SessionGetByID(ctx, sessionID)
		if err != nil {
			return err
		}
		return jobs.CrashNoticeTx(ctx, tx, d.river, d.dmAddress, s.AgentID, sessionID, s.ResourceBindings, why)
	})
	if err != nil {
		d.logger.WarnContext(ctx, "crash notice not queued", slog.String("session_id", sessionID.String()),
			slog.String("error", err.Error()))
	}
}
