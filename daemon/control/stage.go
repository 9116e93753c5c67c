package control

import (
	"context"
	"os"
	"path/filepath"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/repostage"
	"github.com/choirhq/choir/daemon/runtime/process"
)

// stager stages and checks agents' repositories (daemon/repostage).
func (d *Control) stager() *repostage.Stager {
	return &repostage.Stager{Home: d.home, Pool: d.pool, Jobs: d.river, Logger: d.logger, AgentBinary: d.processBinary(),
		DMAddress: DMAddressIn}
}

// stageRepos stages an agent's repositories when it runs under the
// process runtime, so that it gets its tools, skills, identity and MCP
// servers as a docker agent does from its image; under docker it stages
// nothing.
func (d *Control) stageRepos(ctx context.Context, cfg *config.Config, agentID string) (*repostage.Staged, error) {
	if d.runtime == nil || d.runtime.Name() != process.Name {
		return &repostage.Staged{}, nil
	}
	return d.stager().Stage(ctx, cfg, agentID)
}

// processBinary is the choir-agent binary the process runtime starts.
func (d *Control) processBinary() string {
	if d.opts.AgentBinary != "" {
		return d.opts.AgentBinary
	}
	self, err := os.Executable()
	if err != nil {
		return "choir-agent"
	}
	return filepath.Join(filepath.Dir(self), "choir-agent")
}
