// Package build is `choirctl agent build` (spec 17.3): it turns the global
// repository and an agent's repository into the agent's image.
//
// # Pipeline
//
//  1. Fetch: clone or fetch both repositories into <home>/repos/global and
//     <home>/repos/agents/<id> with the git CLI (any URL git takes: local
//     paths, file://, https, ssh) and check the configured ref out,
//     detached. A failure is a [*FetchError] quoting git.
//  2. Export: the trees of the two commits are written out of the clones'
//     object databases (package gittree), never read from a working tree;
//     a symbolic link that leaves its repository is a [*LinkError] naming
//     the file. Everything below reads these trees, and they are the
//     engine's build contexts. [Request.AgentCommit] pins the agent's
//     commit (a proposal's merge), and [Request.Provenance] refuses a ref
//     the agent pushed itself ([*ForeignCommitError]).
//  3. Merge and validate, before the engine is called: the agent's tools
//     and skills override the global ones of the same name; USER.md comes
//     from the global repository only; SOUL.md and SOUL-CORE.md from the
//     agent's if present, else the global one. The merged tree is checked
//     with the agent's own rules (agent/tool's registry over the
//     built-ins' specs in agent/tool/catalog and the manifests read by
//     agent/tool/manifest, and agent/skill's Load), the agent
//     repository's .choir/mcp.json with the agent's MCP loader (baked as
//     /choir/mcp.json), all without linking any tool's code, and the
//     Dockerfiles with [CheckDockerfile] and, for the agent's,
//     [CheckAgentDockerfile]; any problem fails with [ErrInvalidRepo]
//     naming the file. [Checker] runs the same fetch, export and checks
//     for config load, without an engine, and [Builder.StageTo] writes
//     the merged tree for the process runtime.
//  4. Build, through the engine API's classic builder (never BuildKit,
//     never a pull): Dockerfile.base of the global repository into
//     choir-base:<key>, then the agent repository's Dockerfile, if any,
//     FROM the base, then a final stage that adds /choir: the merged tools
//     (/choir/tools/{global,agent}), skills (/choir/skills/{global,agent},
//     where the agent's skill loader looks), USER.md, SOUL.md,
//     SOUL-CORE.md, the choir-agent binary (/choir/bin/choir-agent, the
//     entrypoint, with git-cred-helper as a second name) and
//     /choir/version.json. A failing Dockerfile is a [*DockerfileError]
//     with the tail of the build log.
//  5. Tag choir-agent-<id>:<image version> and choir-agent-<id>:latest.
//
// # Build arguments
//
// The Dockerfiles take their parents as build arguments, so that an
// engine without a registry builds from a locally imported root
// filesystem or from scratch:
//
//	# Dockerfile.base (global repository)
//	ARG CHOIR_OS_IMAGE=scratch
//	FROM ${CHOIR_OS_IMAGE}
//	...
//
//	# Dockerfile (agent repository)
//	ARG CHOIR_BASE_IMAGE
//	FROM ${CHOIR_BASE_IMAGE}
//	...
//
// CHOIR_OS_IMAGE is [Options.OSImage] (see scripts/agent-base-image.sh for
// a Debian root filesystem made offline); CHOIR_BASE_IMAGE is the base
// just built. The choir-agent binary must be static: the pipeline adds it
// to whatever the base holds.
//
// # Tools compiled by a Dockerfile
//
// A tool manifest whose executable is not in the repository (a relative
// exec_path such as "bin/mytool", or the default <stem>) is taken to be
// built by a Dockerfile into /choir/tools/global/... (Dockerfile.base) or
// /choir/tools/agent/... (the agent's Dockerfile); the final stage merges
// the repositories' tools over it. The manifest is validated against a
// stand-in executable, and after the build the image must hold the
// executable, or the build fails. Absolute exec paths are not supported.
//
// # Versions and skipping
//
// The image version is the first 12 hex digits of a hash of everything
// that goes into the image: both commits, the merged tool, skill and
// identity trees, the agent binary, and the base (the global commit and
// the OS image's ID). It is baked as /choir/version.json ([Version]) and
// also carried as the image label choir.version. A build whose version
// exists already, with an equal label, is skipped; a base whose key
// exists is not rebuilt. [VerifyImage] reads version.json from an image,
// for choird to check before it starts a container.
package build

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"

	"github.com/moby/moby/client"

	"github.com/choirhq/choir/agent/tool"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc/admin"
)

// Build arguments and labels.
const (
	ArgOSImage   = "CHOIR_OS_IMAGE"
	ArgBaseImage = "CHOIR_BASE_IMAGE"
	argFrom      = "CHOIR_FROM"

	LabelVersion      = "choir.version"
	LabelImageVersion = "choir.image_version"
	LabelAgentID      = "choir.agent_id"

	// BaseRepository is the base images' repository name.
	BaseRepository = "choir-base"
	// formatVersion changes when the pipeline bakes images differently.
	formatVersion = "1"
)

// Repository returns the image repository of an agent: choir-agent-<id>.
func Repository(agentID string) string { return "choir-agent-" + agentID }

// Options configure a Builder.
type Options struct {
	// Home is the .choir.d directory; clones live in Home/repos.
	Home string
	// Docker is the engine client.
	Docker *client.Client
	// AgentBinary is the static choir-agent binary baked into every
	// image (required).
	AgentBinary string
	// OSImage is passed to Dockerfile.base as CHOIR_OS_IMAGE; empty lets
	// the Dockerfile's default stand.
	OSImage string
	// Tools are the built-in tools the agent registers beyond
	// catalog.Tools, so that validation knows every name the agent will.
	Tools []tool.Tool
	// Git is the git executable (default "git").
	Git string
	// Progress receives the build output as it streams (optional).
	Progress io.Writer
	// LogTailLines is how much of the build log a DockerfileError shows
	// (default 25).
	LogTailLines int
	// Logger receives the pipeline's steps (default: discard).
	Logger *slog.Logger
}

// Builder runs the pipeline. It is safe for concurrent use; builds of one
// agent, and fetches of one clone, are serialised across the process, and
// so are the engine builds of every Builder of the process, which are also run again after a
// transient engine error (see engineBuilds).
type Builder struct {
	opts   Options
	gitBin string
	log    *slog.Logger
}

// New checks the options and returns a Builder.
func New(opts Options) (*Builder, error) {
	if opts.Home == "" {
		return nil, errors.New("agent build: no home directory")
	}
	if opts.AgentBinary == "" {
		return nil, errors.New("agent build: no choir-agent binary to bake into the image")
	}
	if fi, err := os.Stat(opts.AgentBinary); err != nil || !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("agent build: choir-agent binary %s: not a file (build it with `CGO_ENABLED=0 go build ./cmd/choir-agent`)", opts.AgentBinary)
	}
	if opts.Git == "" {
		opts.Git = "git"
	}
	gitBin, err := exec.LookPath(opts.Git)
	if err != nil {
		return nil, fmt.Errorf("agent build: %w (install git)", err)
	}
	if opts.LogTailLines <= 0 {
		opts.LogTailLines = 25
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Builder{opts: opts, gitBin: gitBin, log: log}, nil
}

// lockPath serialises work on one path (a clone, an agent's build)
// across every Builder and [Checker] of the process: choird makes a
// Builder per command, and config load fetches the same clones.
func (b *Builder) lockPath(key string) func() { return lockPath(key) }

var pathLocks = struct {
	mu sync.Mutex
	m  map[string]*sync.Mutex
}{m: map[string]*sync.Mutex{}}

func lockPath(key string) func() {
	pathLocks.mu.Lock()
	m, ok := pathLocks.m[key]
	if !ok {
		m = &sync.Mutex{}
		pathLocks.m[key] = m
	}
	pathLocks.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// Request is one agent's build.
type Request struct {
	AgentID string
	// Global is the global repository (config.json global_repo).
	Global config.Repo
	// Agent is the agent's repository; zero when the agent has none.
	Agent config.Repo
	// Force builds even when an image of the same version exists.
	Force bool
	// AgentCommit, when set, is the agent repository's commit to build
	// instead of whatever its ref holds now: the merge commit choird made
	// for an approved proposal. It must be the ref's commit or one of its
	// ancestors.
	AgentCommit string
	// Provenance, when set, makes the build refuse an agent ref holding
	// commits the agent pushed itself (a [*ForeignCommitError]); choird
	// sets it for every build.
	Provenance *Provenance
}

// computeImageVersion hashes every field of v but ImageVersion.
func computeImageVersion(v admin.BuildVersion) string {
	v.ImageVersion = ""
	data, _ := json.Marshal(v)
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])[:12]
}

// Plan is a fetched, merged and validated build, not yet sent to the
// engine. It holds the clones until Close, which also removes its staging
// directory: builds sharing the global clone run one after the other.
type Plan struct {
	Request   Request
	GlobalDir string
	// AgentDir is empty when the agent has no repository.
	AgentDir string
	// Version lacks ImageVersion, BaseImage and OSImageID, which need the
	// engine.
	Version admin.BuildVersion
	// DockerfileOutputs are tool executables a Dockerfile must produce.
	DockerfileOutputs []string
	// globalTree and agentTree are the commits' trees, written from the
	// clones' object databases (exportCommit): everything staged, checked
	// and sent to the engine is read from them, never from a clone's
	// working tree. agentTree is empty when the agent has no repository.
	globalTree, agentTree string
	staged                *staged
	stageDir              string
	unlock                []func()
}

// exportPlan writes both commits' trees under the staging directory.
// Links that leave a repository are reported for both at once.
func (b *Builder) exportPlan(ctx context.Context, p *Plan) error {
	p.globalTree = filepath.Join(p.stageDir, "src", "global")
	errG := b.exportCommit(ctx, "global", p.GlobalDir, p.Version.GlobalRepoCommit, p.globalTree)
	var errA error
	if p.AgentDir != "" {
		p.agentTree = filepath.Join(p.stageDir, "src", "agent")
		errA = b.exportCommit(ctx, "agent", p.AgentDir, p.Version.AgentRepoCommit, p.agentTree)
	}
	if links := append(linkErrors(errG), linkErrors(errA)...); len(links) > 0 {
		errs := make([]error, len(links))
		files := make([]string, len(links))
		for i, l := range links {
			errs[i], files[i] = l, l.Repo+" repo "+l.File+" -> "+l.Target
		}
		b.log.WarnContext(ctx, "agent build refused: a repository holds a symbolic link that leaves it",
			slog.String("agent_id", p.Request.AgentID), slog.String("links", strings.Join(files, ", ")))
		return fmt.Errorf("%w: %w", ErrInvalidRepo, errors.Join(errs...))
	}
	return errors.Join(errG, errA)
}

// Close removes the staging directory and releases the clones.
func (p *Plan) Close() error {
	var err error
	if p.stageDir != "" {
		err = os.RemoveAll(p.stageDir)
		p.stageDir = ""
	}
	for i := len(p.unlock) - 1; i >= 0; i-- {
		p.unlock[i]()
	}
	p.unlock = nil
	return err
}

var agentIDRE = regexp.MustCompile(config.NamePattern)

// Prepare fetches both repositories, merges and validates them. It never
// calls the engine, so `config load` can use it to check repositories.
func (b *Builder) Prepare(ctx context.Context, req Request) (*Plan, error) {
	if !agentIDRE.MatchString(req.AgentID) {
		return nil, fmt.Errorf("agent build: agent id %q must match %s", req.AgentID, config.NamePattern)
	}
	if req.Global.URL == "" {
		return nil, errors.New("agent build: global_repo is not configured in config.json: it holds Dockerfile.base and the identity files")
	}
	p := &Plan{Request: req, GlobalDir: filepath.Join(b.opts.Home, "repos", "global")}
	if req.Agent.URL != "" {
		p.AgentDir = filepath.Join(b.opts.Home, "repos", "agents", req.AgentID)
	}
	// A clone must not move between its fetch and the export of its
	// commit. Locks are taken global first, always.
	p.unlock = append(p.unlock, b.lockPath(p.GlobalDir))
	if p.AgentDir != "" {
		p.unlock = append(p.unlock, b.lockPath(p.AgentDir))
	}
	ok := false
	defer func() {
		if !ok {
			p.Close()
		}
	}()
	b.log.Info("fetching repositories", slog.String("agent_id", req.AgentID))
	var err error
	if p.Version.GlobalRepoCommit, err = b.fetch(ctx, "global", req.Global, p.GlobalDir); err != nil {
		return nil, err
	}
	if p.AgentDir != "" {
		if p.Version.AgentRepoCommit, err = b.fetch(ctx, "agent "+req.AgentID, req.Agent, p.AgentDir); err != nil {
			return nil, err
		}
		if err := b.checkProvenance(ctx, p); err != nil {
			return nil, err
		}
		if err := b.pin(ctx, p); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "choir-build-"+req.AgentID+"-")
	if err != nil {
		return nil, fmt.Errorf("agent build: %w", err)
	}
	p.stageDir = dir
	if err := b.exportPlan(ctx, p); err != nil {
		return nil, fmt.Errorf("agent build %s: %w", req.AgentID, err)
	}
	if !isFile(filepath.Join(p.globalTree, "Dockerfile.base")) {
		return nil, fmt.Errorf("agent build: %w: the global repo (commit %s) has no Dockerfile.base", ErrInvalidRepo, short(p.Version.GlobalRepoCommit))
	}
	if probs := dockerfileProblems(p.globalTree, p.agentTree); len(probs) > 0 {
		var errs []error
		for _, pr := range probs {
			errs = append(errs, fmt.Errorf("%s repo %s line %d: %s", pr.Repo, pr.File, pr.Line, pr.Message))
		}
		return nil, fmt.Errorf("agent build %s: %w: %w", req.AgentID, ErrInvalidRepo, errors.Join(errs...))
	}
	s, err := b.stage(p.globalTree, p.agentTree, filepath.Join(dir, "final"))
	if err != nil {
		return nil, fmt.Errorf("agent build %s: %w", req.AgentID, err)
	}
	p.staged = s
	p.DockerfileOutputs = s.dockerfileOutputs
	bin, err := fileHash(b.opts.AgentBinary)
	if err != nil {
		return nil, fmt.Errorf("agent build: hash the choir-agent binary: %w", err)
	}
	p.Version.AgentID = req.AgentID
	p.Version.ToolManifestHash = s.toolHash
	p.Version.SkillManifestHash = s.skillHash
	p.Version.IdentityHash = s.identityHash
	p.Version.AgentBinaryHash = bin
	p.Version.OSImage = b.opts.OSImage
	p.Version.Format = formatVersion
	ok = true
	return p, nil
}

// Result is what Build made, or found already made.
type Result struct {
	// Image is choir-agent-<id>:<version>, also tagged :latest.
	Image   string
	ImageID string
	Version admin.BuildVersion
	// Built is false when an image of this version existed already.
	Built bool
	// BaseBuilt says whether the base image was built now.
	BaseBuilt bool
	// DockerfileOutputs are the tool executables the Dockerfiles produced.
	DockerfileOutputs []string
}

func short(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// ErrNeedsDockerfile reports repositories whose tools a Dockerfile
// compiles, staged for a runtime that runs no Dockerfile.
var ErrNeedsDockerfile = errors.New("tools are compiled by a Dockerfile")

// StageTo runs the pipeline up to the image, as [Builder.Prepare] does
// (fetch, the commits' trees from git objects, merge, validate), and
// writes the merged /choir tree into dst (which must not exist): the
// process runtime's agents read it where docker's read /choir. A tool
// that only a Dockerfile would produce is an [ErrNeedsDockerfile].
func (b *Builder) StageTo(ctx context.Context, req Request, dst string) (admin.BuildVersion, error) {
	p, err := b.Prepare(ctx, req)
	if err != nil {
		return admin.BuildVersion{}, err
	}
	defer p.Close()
	if len(p.DockerfileOutputs) > 0 {
		return admin.BuildVersion{}, fmt.Errorf("agent %s: %w: %s; the process runtime runs no Dockerfile: commit the executables, or run choird with --runtime=docker",
			req.AgentID, ErrNeedsDockerfile, strings.Join(p.DockerfileOutputs, ", "))
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
		return admin.BuildVersion{}, fmt.Errorf("stage agent %s: %w", req.AgentID, err)
	}
	if err := copyTree(filepath.Join(p.staged.dir, "choir"), dst, nil); err != nil {
		os.RemoveAll(dst)
		return admin.BuildVersion{}, fmt.Errorf("stage agent %s: %w", req.AgentID, err)
	}
	vj, err := json.MarshalIndent(p.Version, "", "  ")
	if err == nil {
		err = os.WriteFile(filepath.Join(dst, "version.json"), append(vj, '\n'), 0o644)
	}
	if err != nil {
		os.RemoveAll(dst)
		return admin.BuildVersion{}, fmt.Errorf("stage agent %s: %w", req.AgentID, err)
	}
	b.log.InfoContext(ctx, "agent repositories staged for the process runtime", slog.String("agent_id", req.AgentID),
		slog.String("dir", dst), slog.String("agent_commit", short(p.Version.AgentRepoCommit)))
	return p.Version, nil
}
