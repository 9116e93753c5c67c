// Package propose is choird's side of self-evolution (spec 8.10, 20): it
// checks a choir.propose.* request before any person sees it, records
// exactly what the person is shown (in parts when it is long, never cut),
// and, once a person approves, applies the change in steps that are River
// jobs: merge into the agent's repository, build the image, update the
// agent; or, for a config change, write config.json and load and apply it
// as choirctl config does. Each step's outcome goes to the DM that got the
// request and to choir_audit.proposals; a failed step leaves the running
// agent as it was, and the proposal "approved, not applied" with the
// reason.
package propose

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config/configdiff"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/rpc/admin"
)

// Control is what the pipeline needs of choird's control plane: the
// running configuration, and the build, update and config commands that
// choirctl runs, under an admin scope naming the approval.
type Control interface {
	Snapshot() *control.Snapshot
	// AgentBuildCommit and AgentUpdateCommit build (and deploy) the
	// agent's repository at exactly the commit choird merged.
	AgentBuildCommit(ctx context.Context, sc control.Scope, agentID, commit string) (admin.BuildResult, error)
	AgentUpdateCommit(ctx context.Context, sc control.Scope, agentID, commit string) (admin.UpdateResult, error)
	ConfigLoad(ctx context.Context, sc control.Scope) (configdiff.DiffReport, error)
	ConfigApply(ctx context.Context, sc control.Scope) (configdiff.ApplyReport, error)
}

// Options configure a Proposer.
type Options struct {
	Pool *pgxpool.Pool
	// Home is choird's home: config.json is there, and the working
	// clones under proposals/.
	Home    string
	Control Control
	Logger  *slog.Logger
	// Git is the git binary; "git" when empty.
	Git string
}

// Proposer checks proposals and applies approved ones.
type Proposer struct {
	o Options
	// running holds the approvals whose step runs now.
	running sync.Map
}

// New makes a Proposer.
func New(o Options) *Proposer {
	if o.Git == "" {
		o.Git = "git"
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Proposer{o: o}
}

// tailBytes bounds the log tail a failed step reports.
const tailBytes = 1500

// tail keeps the end of a long error text, where git and the build put
// what went wrong.
func tail(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= tailBytes {
		return s
	}
	cut := len(s) - tailBytes
	for cut < len(s) && s[cut]&0xC0 == 0x80 {
		cut++
	}
	return "…" + s[cut:]
}

// kindOf names a request type's kind, as the proposals table does.
func kindOf(requestType string) (string, error) {
	switch requestType {
	case "choir.propose.tool":
		return "tool", nil
	case "choir.propose.skill":
		return "skill", nil
	case "choir.propose.config_change":
		return "config", nil
	case "choir.propose.repo_change":
		return "repo", nil
	}
	return "", fmt.Errorf("%s is not a proposal", requestType)
}
