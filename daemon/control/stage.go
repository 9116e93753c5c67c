package control

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/build"
	"github.com/choirhq/choir/daemon/runtime/process"
)

// EnvChoirDir tells an agent where its tools, skills, identity and
// mcp.json are: /choir in an image; under the process runtime, the tree
// choird staged for it.
const EnvChoirDir = "CHOIR_DIR"

// stagedRepos is the /choir tree staged for one start of an agent under
// the process runtime; the zero value stages nothing (docker, or no
// global repository configured).
type stagedRepos struct {
	d       *Control
	agentID string
	dir     string
}

// stageRepos stages an agent's repositories for the process runtime with
// the build's own pipeline (git objects at the fetched commits, merged and
// validated; the same provenance check), so that a process agent gets its
// tools, skills, identity and MCP servers as a docker agent does from its
// image.
func (d *Control) stageRepos(ctx context.Context, cfg *config.Config, agentID string) (*stagedRepos, error) {
	st := &stagedRepos{d: d, agentID: agentID}
	if d.runtime == nil || d.runtime.Name() != process.Name || cfg.GlobalRepo.URL == "" {
		return st, nil
	}
	b, err := build.New(build.Options{Home: d.home, AgentBinary: d.processBinary(), Logger: d.logger.With(slog.String("component", "build"))})
	if err != nil {
		return nil, fmt.Errorf("stage agent %s: %w", agentID, err)
	}
	pv, err := d.provenance(ctx, cfg, agentID)
	if err != nil {
		return nil, err
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	dir := filepath.Join(stagedReposDir(d.home, agentID), hex.EncodeToString(rnd[:]))
	req := build.Request{AgentID: agentID, Global: cfg.GlobalRepo, Agent: cfg.Agents[agentID].Repo, Provenance: pv}
	_, err = b.StageTo(ctx, req, dir)
	if fe, ok := errors.AsType[*build.ForeignCommitError](err); ok {
		d.foreignCommitNotice(ctx, cfg, fe)
	}
	if err != nil {
		return nil, fmt.Errorf("start agent %s: %w", agentID, err)
	}
	st.dir = dir
	return st, nil
}

// stagedReposDir holds an agent's staged trees.
func stagedReposDir(home, agentID string) string { return filepath.Join(home, "run", "choir", agentID) }

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

// env is the agent's environment for the staged tree.
func (s *stagedRepos) env() map[string]string {
	if s == nil || s.dir == "" {
		return nil
	}
	return map[string]string{EnvChoirDir: s.dir}
}

// discard removes a tree no agent was started on.
func (s *stagedRepos) discard() {
	if s != nil && s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// settle keeps the tree of an agent that started, removing the trees of
// its earlier starts, or discards it.
func (s *stagedRepos) settle(started bool) {
	if s == nil || s.dir == "" {
		return
	}
	if !started {
		s.discard()
		return
	}
	entries, _ := os.ReadDir(filepath.Dir(s.dir))
	for _, e := range entries {
		if p := filepath.Join(filepath.Dir(s.dir), e.Name()); p != s.dir {
			os.RemoveAll(p)
		}
	}
}
