package daemon

import (
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/usage"
)

// newUsage returns the usage service: agents' baselines for their caps,
// and the reports of choirctl usage and /usage. It keeps no state.
func (d *Daemon) newUsage() *usage.Service {
	return usage.New(usage.Options{Pool: d.pool, Config: func() *config.Config { return d.Snapshot().Config }})
}
