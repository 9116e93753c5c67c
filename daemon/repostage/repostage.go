// Package repostage stages an agent's repositories outside an image, for
// the process runtime: the build's own pipeline (git objects at the
// fetched commits, merged and validated) writes the /choir tree a docker
// agent gets in its image, and the agent reads it where CHOIR_DIR says. It
// also holds what choird knows of where an agent's repository came from:
// the commits choird made on its ref, and the notice to the admins when a
// build is refused because the agent pushed its ref itself.
package repostage

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/build"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// EnvChoirDir tells an agent where its tools, skills, identity and
// mcp.json are: /choir in an image; under the process runtime, the tree
// staged for it.
const EnvChoirDir = "CHOIR_DIR"

// Stager stages repositories and checks their provenance for choird.
type Stager struct {
	Home   string
	Pool   *pgxpool.Pool
	Jobs   jobs.Inserter // nil: admins are not told, only the log
	Logger *slog.Logger
	// AgentBinary is the choir-agent binary the staged tree names.
	AgentBinary string
	// DMAddress locates a DM of cfg: its gateway and chat.
	DMAddress func(cfg *config.Config, dm string) (gateway, chatID string, ok bool)
}

// Provenance is what choird knows of an agent's repository: the commits it
// made on the ref, and the addresses the agent commits as.
func (s *Stager) Provenance(ctx context.Context, cfg *config.Config, agentID string) (*build.Provenance, error) {
	made, err := seam.Queries(s.Pool).RepoCommitsByAgent(ctx, agentID)
	if err != nil {
		return nil, fmt.Errorf("agent build %s: read the commits choird made: %w", agentID, err)
	}
	emails := []string{agentID + "@choir.invalid"}
	if gi, ok := cfg.GitIdentities[cfg.Agents[agentID].Defaults.GitIdentity]; ok && gi.Email != "" {
		emails = append(emails, gi.Email)
	}
	return &build.Provenance{Made: made, AgentEmails: emails}, nil
}

// ForeignCommitNotice logs a build refused for commits the agent pushed
// itself, and tells every admin DM, once per DM and commit.
func (s *Stager) ForeignCommitNotice(ctx context.Context, cfg *config.Config, fe *build.ForeignCommitError) {
	s.Logger.ErrorContext(ctx, "agent build refused: the agent pushed its configured ref itself",
		slog.String("agent_id", fe.AgentID), slog.String("ref", fe.Ref), slog.String("commit", fe.Commits[0].SHA),
		slog.String("committer", fe.Commits[0].CommitterEmail), slog.Int("commits", len(fe.Commits)))
	if s.Jobs == nil {
		return
	}
	text := fmt.Sprintf("Security: %s's image was not built. %v", fe.AgentID, fe)
	for _, name := range slices.Sorted(maps.Keys(cfg.DMs)) {
		if !cfg.DMs[name].Admin {
			continue
		}
		gw, chat, ok := s.DMAddress(cfg, name)
		if !ok {
			continue
		}
		err := pgx.BeginFunc(ctx, s.Pool, func(tx pgx.Tx) error {
			_, err := outbox.EnqueueTx(ctx, tx, s.Jobs, outbox.Params{AgentID: fe.AgentID,
				MessageID: "foreign-commit:" + fe.Commits[0].SHA + ":" + name, Gateway: gw, DM: name, ChatID: chat, Kind: message.Text, Text: text})
			return err
		})
		if err != nil {
			s.Logger.WarnContext(ctx, "foreign commit notice not queued", slog.String("dm", name), slog.String("error", err.Error()))
		}
	}
}

// Staged is the /choir tree staged for one start of an agent under
// the process runtime; the zero value stages nothing (docker, or no
// global repository configured).
type Staged struct {
	dir string
}

// Stage stages an agent's repositories for the process runtime with
// the build's own pipeline (git objects at the fetched commits, merged and
// validated; the same provenance check), so that a process agent gets its
// tools, skills, identity and MCP servers as a docker agent does from its
// image.
func (s *Stager) Stage(ctx context.Context, cfg *config.Config, agentID string) (*Staged, error) {
	st := &Staged{}
	if cfg.GlobalRepo.URL == "" {
		if cfg.Agents[agentID].Repo.URL != "" {
			s.Logger.WarnContext(ctx, "agent repository not staged: config.json has no global_repo, which holds the identity files and Dockerfile.base",
				slog.String("agent_id", agentID))
		}
		return st, nil
	}
	b, err := build.New(build.Options{Home: s.Home, AgentBinary: s.AgentBinary, Logger: s.Logger.With(slog.String("component", "build"))})
	if err != nil {
		return nil, fmt.Errorf("stage agent %s: %w", agentID, err)
	}
	pv, err := s.Provenance(ctx, cfg, agentID)
	if err != nil {
		return nil, err
	}
	var rnd [6]byte
	rand.Read(rnd[:])
	dir := filepath.Join(Dir(s.Home, agentID), hex.EncodeToString(rnd[:]))
	req := build.Request{AgentID: agentID, Global: cfg.GlobalRepo, Agent: cfg.Agents[agentID].Repo, Provenance: pv}
	_, err = b.StageTo(ctx, req, dir)
	if fe, ok := errors.AsType[*build.ForeignCommitError](err); ok {
		s.ForeignCommitNotice(ctx, cfg, fe)
	}
	if err != nil {
		return nil, fmt.Errorf("start agent %s: %w", agentID, err)
	}
	st.dir = dir
	return st, nil
}

// Dir holds an agent's staged trees.
func Dir(home, agentID string) string { return filepath.Join(home, "run", "choir", agentID) }

// Env is the agent's environment for the staged tree.
func (s *Staged) Env() map[string]string {
	if s == nil || s.dir == "" {
		return nil
	}
	return map[string]string{EnvChoirDir: s.dir}
}

// Discard removes a tree no agent was started on.
func (s *Staged) Discard() {
	if s != nil && s.dir != "" {
		os.RemoveAll(s.dir)
	}
}

// Settle keeps the tree of an agent that started, removing the trees of
// its earlier starts, or discards it.
func (s *Staged) Settle(started bool) {
	if s == nil || s.dir == "" {
		return
	}
	if !started {
		s.Discard()
		return
	}
	entries, _ := os.ReadDir(filepath.Dir(s.dir))
	for _, e := range entries {
		if p := filepath.Join(filepath.Dir(s.dir), e.Name()); p != s.dir {
			os.RemoveAll(p)
		}
	}
}
