package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/agentapi"
	"github.com/choirhq/choir/daemon/egress"
	"github.com/choirhq/choir/rpc"
)

// EgressSocketPath is the egress gateway's Unix socket under home: the
// agents' one way out (daemon/egress), next to the agent protocol's.
func EgressSocketPath(home string) string { return filepath.Join(home, "socks", "egress.sock") }

// listenEgress listens on the egress gateway's socket and returns the
// gateway, which applies each agent's current configuration at every
// connection (a reloaded egress block or web.allow_hosts applies to the
// next connection).
func (d *Daemon) listenEgress(ctx context.Context, auth *agentapi.SessionAuth) (*egress.Gateway, net.Listener, error) {
	ln, err := rpc.ListenUnix(ctx, EgressSocketPath(d.home))
	if err != nil {
		return nil, nil, fmt.Errorf("egress gateway socket: %w", err)
	}
	asker := &egress.Approvals{Pool: d.pool, Registry: d.approvals.Registry, Jobs: d.river,
		ConfigFunc: func() *config.Config { return d.Snapshot().Config }, Logger: d.logger.With(slog.String("component", "egress"))}
	gw := egress.New(egress.Options{
		ApproveFunc: asker.Ask,
		AuthFunc: func(ctx context.Context, sessionID, token string) (string, error) {
			s, err := auth.Authenticate(ctx, sessionID, token)
			return s.AgentID, err
		},
		PolicyFunc: func(agentID string) egress.Policy {
			c := d.Snapshot().Config
			return egress.Policy{Egress: c.EgressFor(agentID), AllowHosts: c.WebFor(agentID).AllowHosts,
				Services: c.ServiceAddrsFor(agentID)}
		},
		Pool:     d.pool,
		Services: d.egressServices,
		Logger:   d.logger.With(slog.String("component", "egress")),
	})
	d.logger.InfoContext(ctx, "egress gateway listening", slog.String("socket", EgressSocketPath(d.home)))
	return gw, ln, nil
}
