package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/choirhq/choir/daemon/build"
	"github.com/choirhq/choir/daemon/runtime/docker"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// builder makes the image builder; it needs the docker runtime's engine.
func (d *Control) builder() (*build.Builder, error) {
	rt, ok := d.runtime.(*docker.Runtime)
	if !ok {
		return nil, errors.New("agent build needs the docker runtime; start choird with --runtime=docker")
	}
	bin := d.opts.AgentBinary
	if bin == "" {
		self, err := os.Executable()
		if err != nil {
			return nil, err
		}
		bin = filepath.Join(filepath.Dir(self), "choir-agent")
	}
	return build.New(build.Options{Home: d.home, Docker: rt.Client(), AgentBinary: bin, OSImage: d.opts.OSImage,
		Logger: d.logger.With(slog.String("component", "build"))})
}

// AgentBuild builds an agent's image from the global and per-agent repos,
// or reports that it is up to date. It neither starts nor restarts the
// agent.
func (d *Control) AgentBuild(ctx context.Context, sc Scope, agentID string, force bool) (admin.BuildResult, error) {
	return d.agentBuild(ctx, sc, agentID, force, "")
}

// AgentBuildCommit builds the agent's repository at commit, the merge
// choird made for an approved proposal, never at whatever the ref holds
// now.
func (d *Control) AgentBuildCommit(ctx context.Context, sc Scope, agentID, commit string) (admin.BuildResult, error) {
	if commit == "" {
		return admin.BuildResult{}, errors.New("agent build: no commit to build")
	}
	return d.agentBuild(ctx, sc, agentID, false, commit)
}

func (d *Control) agentBuild(ctx context.Context, sc Scope, agentID string, force bool, commit string) (admin.BuildResult, error) {
	if err := sc.AdminOnly("agent build"); err != nil {
		return admin.BuildResult{}, err
	}
	cfg, _ := d.config()
	agent, ok := cfg.Agents[agentID]
	if !ok {
		return admin.BuildResult{}, fmt.Errorf("%w: agent %q is not in config.json", session.ErrUnknownResource, agentID)
	}
	if cfg.GlobalRepo.URL == "" {
		return admin.BuildResult{}, errors.New("config.json has no global_repo: set its url and ref to build agent images")
	}
	b, err := d.builder()
	if err != nil {
		return admin.BuildResult{}, err
	}
	pv, err := d.stager().Provenance(ctx, cfg, agentID)
	if err != nil {
		return admin.BuildResult{}, err
	}
	res, err := b.Build(ctx, build.Request{AgentID: agentID, Global: cfg.GlobalRepo, Agent: agent.Repo, Force: force,
		AgentCommit: commit, Provenance: pv})
	if fe, ok := errors.AsType[*build.ForeignCommitError](err); ok {
		d.stager().ForeignCommitNotice(ctx, cfg, fe)
	}
	if err != nil {
		return admin.BuildResult{}, fmt.Errorf("build agent %s: %w", agentID, err)
	}
	d.logger.InfoContext(ctx, "agent image ready", slog.String("agent_id", agentID), slog.String("image", res.Image),
		slog.Bool("built", res.Built), slog.String("by", sc.Actor))
	return admin.BuildResult{AgentID: agentID, Image: res.Image, Built: res.Built, Version: res.Version}, nil
}

// AgentUpdate builds an agent's image if its repos changed, then, if the
// agent runs, stops it gracefully and starts it again on the new image
// with the same resources; the session resumes from its replica.
func (d *Control) AgentUpdate(ctx context.Context, sc Scope, agentID string) (admin.UpdateResult, error) {
	br, err := d.AgentBuild(ctx, sc, agentID, false)
	if err != nil {
		return admin.UpdateResult{AgentID: agentID, Outcome: "failed", Error: err.Error()}, err
	}
	return d.deploy(ctx, sc, agentID, br)
}

// AgentUpdateCommit is AgentUpdate on the image of commit (see
// AgentBuildCommit).
func (d *Control) AgentUpdateCommit(ctx context.Context, sc Scope, agentID, commit string) (admin.UpdateResult, error) {
	br, err := d.AgentBuildCommit(ctx, sc, agentID, commit)
	if err != nil {
		return admin.UpdateResult{AgentID: agentID, Outcome: "failed", Error: err.Error()}, err
	}
	return d.deploy(ctx, sc, agentID, br)
}

// deploy restarts a running agent on a built image.
func (d *Control) deploy(ctx context.Context, sc Scope, agentID string, br admin.BuildResult) (admin.UpdateResult, error) {
	s, err := seam.Queries(d.pool).SessionGetLiveByAgent(ctx, agentID)
	if errors.Is(err, choirsql.ErrNotFound) {
		outcome := "skipped"
		if br.Built {
			outcome = "built"
		}
		return admin.UpdateResult{AgentID: agentID, Image: br.Image, Outcome: outcome}, nil
	}
	if err != nil {
		return admin.UpdateResult{AgentID: agentID, Outcome: "failed", Error: err.Error()}, err
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(s.ResourceBindings, &b); err != nil {
		return admin.UpdateResult{AgentID: agentID, Outcome: "failed", Error: err.Error()}, err
	}
	if !br.Built && s.ImageVersion == br.Version.ImageVersion {
		return admin.UpdateResult{AgentID: agentID, Image: br.Image, Outcome: "skipped"}, nil
	}
	if _, err := d.AgentRestart(ctx, sc, agentID); err != nil {
		return admin.UpdateResult{AgentID: agentID, Image: br.Image, Outcome: "failed", Error: err.Error()}, err
	}
	return admin.UpdateResult{AgentID: agentID, Image: br.Image, Outcome: "redeployed"}, nil
}

// AgentUpdateAll updates every configured agent, one after the other, and
// reports each outcome; one failure does not stop the others.
func (d *Control) AgentUpdateAll(ctx context.Context, sc Scope) ([]admin.UpdateResult, error) {
	if err := sc.AdminOnly("agent update-all"); err != nil {
		return nil, err
	}
	out := []admin.UpdateResult{}
	cfg, _ := d.config()
	for _, id := range sortedKeys(cfg.Agents) {
		r, _ := d.AgentUpdate(ctx, sc, id)
		out = append(out, r)
	}
	return out, nil
}

// verifyImage checks the version.json baked into a pipeline-built image
// before a container starts from it, so a drifted image is never run
// silently. An image named by --agent-image is the operator's choice and is
// not checked.
func (d *Control) verifyImage(ctx context.Context, agentID, image string) error {
	rt, ok := d.runtime.(*docker.Runtime)
	if !ok || d.opts.AgentImage != "" {
		return nil
	}
	if _, err := build.VerifyImage(ctx, rt.Client(), image, build.Expect{AgentID: agentID}); err != nil {
		return fmt.Errorf("image %s of agent %s: %w (rebuild it: choirctl agent build %s)", image, agentID, err, agentID)
	}
	return nil
}
