package control

import (
	"context"

	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
)

// StartSession creates a live session for agentID with its leases and
// returns its ID and lease token, for a runtime to hand to the agent it
// starts. The token exists only in the returned value.
func (d *Control) StartSession(ctx context.Context, agentID string, o admin.StartOverrides, runtime string) (sessionID, leaseToken string, err error) {
	cfg, _ := d.config()
	cfgVersion := d.runningConfigVersion()
	s, err := session.CreateSession(ctx, d.pool, cfg, agentID, o, cfgVersion, runtime)
	if err != nil {
		return "", "", err
	}
	return s.Session.ID.String(), s.LeaseToken, nil
}

// Push sends a message to a session's agent over the push stream.
func (d *Control) Push(sessionID string, p rpc.Push) (uint64, error) { return d.rpc.Push(sessionID, p) }
