package daemon

import (
	"context"

	"github.com/choirhq/choir/daemon/dmcmd"
	"github.com/choirhq/choir/daemon/gateway"
	"github.com/choirhq/choir/daemon/inbox"
	"github.com/choirhq/choir/daemon/runtime"
)

// The parts of a running choird that the end-to-end tests of its features
// (through internal/choirdtest) drive as its gateway does, or look at as
// its runtime sees them.

// NewCommands makes a DM command layer on d's parts, as its gateway's is
// made; notify, when set, receives the long commands' outcomes.
func (d *Daemon) NewCommands(notify func(context.Context, gateway.Command, string)) *dmcmd.Commands {
	return dmcmd.New(dmcmd.Options{Control: d.Control, Approvals: d.approvals, Inbox: d.inbox, Resends: d.resends,
		Pool: d.pool, Logger: d.logger, Notify: notify})
}

// Inbox is d's DM inbox, which its gateway feeds.
func (d *Daemon) Inbox() *inbox.Inbox { return d.inbox }

// Runtime is d's agent runtime; nil when it runs none.
func (d *Daemon) Runtime() runtime.Runtime { return d.runtime }

// BrowserAgents lists the agents that have a browser context, or nil
// while the browser worker has not started.
func (d *Daemon) BrowserAgents() []string {
	d.browser.mu.Lock()
	w := d.browser.w
	d.browser.mu.Unlock()
	if w == nil {
		return nil
	}
	return w.Agents()
}
