// Package session creates and ends agents' sessions: it resolves a
// start's resource bindings against the configuration, and grants the
// session with every exclusive lease in one transaction (so a conflict
// leaves nothing behind), or ends it and queues what follows an end. It
// also finds the sessions that crashed (crash.go: the periodic
// crash_detect job, its notice to the DM, and the removal of the crashed
// instance), and rolls sessions over at their DM's midnight (rollover.go:
// the periodic session_rollover job), two jobs.Features registered at
// choird's start.
package session

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/hold"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// ErrUnknownResource reports a start override naming a resource that
// config.json does not define.
var ErrUnknownResource = errors.New("unknown resource")

// ErrLeaseConflict reports an exclusive resource, or the agent itself,
// already held by a live session; the message names the holder.
var ErrLeaseConflict = errors.New("lease conflict")

// ResolveBindings merges an agent's defaults with overrides, checks that
// every named resource exists, and lists the secrets the agent may fetch:
// the "secret" fields of its bound resources, never a gateway token or the
// Postgres credentials, which only choird holds.
func ResolveBindings(cfg *config.Config, agentID string, o admin.StartOverrides) (rpc.ResourceBindings, error) {
	agent, ok := cfg.Agents[agentID]
	if !ok {
		return rpc.ResourceBindings{}, fmt.Errorf("%w: agent %q is not in config.json (agents: %v)",
			ErrUnknownResource, agentID, slices.Sorted(maps.Keys(cfg.Agents)))
	}
	d := agent.Defaults
	ok = false
	pick := func(override, def string) string {
		if override != "" {
			return override
		}
		return def
	}
	b := rpc.ResourceBindings{
		Workspace:    pick(o.Workspace, d.Workspace),
		GitIdentity:  pick(o.GitIdentity, d.GitIdentity),
		Notion:       pick(o.Notion, d.Notion),
		Email:        pick(o.Email, d.Email),
		DM:           pick(o.DM, d.DM),
		VoiceProfile: pick(o.VoiceProfile, d.VoiceProfile),
		Browser:      agentID,
		Models:       map[string]string{"llm": pick(o.LLM, d.LLM)},
	}
	// Core jobs run on the agent's flagship model, or on its LLM when it
	// names none.
	b.Models["core_llm"] = pick(d.CoreLLM, b.Models["llm"])
	var problems []error
	secrets := map[string]bool{}
	need := func(flag, name string, exists bool, secret string) {
		if name == "" {
			return
		}
		if !exists {
			problems = append(problems, fmt.Errorf("--%s=%s: no such resource in config.json", flag, name))
			return
		}
		if secret != "" {
			secrets[secret] = true
		}
	}
	_, ok = cfg.Workspaces[b.Workspace]
	need("workspace", b.Workspace, ok, "")
	m, ok := cfg.Models[b.Models["llm"]]
	need("llm", b.Models["llm"], ok, m.Secret)
	if cm, ok := cfg.Models[b.Models["core_llm"]]; ok && cm.Secret != "" {
		secrets[cm.Secret] = true
	}
	vp, ok := cfg.VoiceProfiles[b.VoiceProfile]
	need("voice-profile", b.VoiceProfile, ok, "")
	if ok {
		tts := cfg.TTS[vp.TTS]
		if tts.Secret != "" {
			secrets[tts.Secret] = true
		}
	}
	// The git identity's token stays in choird: the gateway's git route
	// adds it (daemon/egress/svc), so the session binds no secret for it.
	_, ok = cfg.GitIdentities[b.GitIdentity]
	need("git-identity", b.GitIdentity, ok, "")
	ni, ok := cfg.NotionIntegrations[b.Notion]
	need("notion", b.Notion, ok, ni.Secret)
	ea, ok := cfg.EmailAccounts[b.Email]
	need("email", b.Email, ok, ea.Secret)
	_, ok = cfg.DMs[b.DM]
	need("dm", b.DM, ok, "")
	if b.Workspace == "" {
		problems = append(problems, fmt.Errorf("agent %s has no workspace: set defaults.workspace or pass --workspace", agentID))
	}
	if b.DM == "" {
		problems = append(problems, fmt.Errorf("agent %s has no DM: set defaults.dm or pass --dm", agentID))
	}
	for _, s := range cfg.Search {
		if s.Secret != "" {
			secrets[s.Secret] = true
		}
	}
	for _, s := range agent.MCPSecrets {
		secrets[s] = true
	}
	b.MCPSecrets = slices.Sorted(slices.Values(agent.MCPSecrets))
	if len(problems) > 0 {
		return rpc.ResourceBindings{}, fmt.Errorf("%w: %w", ErrUnknownResource, errors.Join(problems...))
	}
	for s := range secrets {
		b.Secrets = append(b.Secrets, s)
	}
	sort.Strings(b.Secrets)
	return b, nil
}

// exclusiveLeases lists the leases a session with bindings b must hold.
func exclusiveLeases(cfg *config.Config, b rpc.ResourceBindings) [][2]string {
	leases := [][2]string{{"workspace", b.Workspace}, {"dm", b.DM}, {"browser", b.Browser}}
	if b.GitIdentity != "" {
		leases = append(leases, [2]string{"git_identity", b.GitIdentity})
	}
	if b.Notion != "" {
		leases = append(leases, [2]string{"notion", b.Notion})
	}
	if b.Email != "" && cfg.EmailAccounts[b.Email].Sharing == config.EmailExclusive {
		leases = append(leases, [2]string{"email", b.Email})
	}
	return leases
}

// RuntimeInProcess is the runtime of a session whose agent choird's
// runtimes did not start, but a program that runs it in its own process
// (a test's agent): it has no egress gateway, so choird hands it the
// service keys the gateway adds to the calls of every agent it starts.
const RuntimeInProcess = "in-process"

// StartedSession is a session row just created, with its lease token: the
// only time the token exists in choird's memory.
type StartedSession struct {
	Session    Session
	LeaseToken string
	Bindings   rpc.ResourceBindings
}

// CreateSession creates an agent's session for a person's start
// (CreateSessionAs with ByPerson).
func CreateSession(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, agentID string,
	o admin.StartOverrides, configVersion int64, runtime string) (StartedSession, error) {
	return CreateSessionAs(ctx, pool, cfg, agentID, o, configVersion, runtime, ByPerson)
}

// CreateSessionAs creates an agent's session and grants every exclusive
// lease in one transaction, so that a conflict leaves nothing behind. When
// the agent's previous session ended or crashed, the new one continues its
// chain from the last acknowledged revision. A start by choird on its own
// (ByChoird, ByRollover) is refused while a person's stop holds the agent
// (hold.Err); a ByChoird session continues the budget of the previous one.
func CreateSessionAs(ctx context.Context, pool *pgxpool.Pool, cfg *config.Config, agentID string,
	o admin.StartOverrides, configVersion int64, runtime string, by Origin) (StartedSession, error) {
	b, err := ResolveBindings(cfg, agentID, o)
	if err != nil {
		return StartedSession{}, err
	}
	bindings, err := json.Marshal(b)
	if err != nil {
		return StartedSession{}, err
	}
	agentConfig, err := json.Marshal(cfg.Agents[agentID])
	if err != nil {
		return StartedSession{}, err
	}
	token, hash := rpc.NewLeaseToken()
	var out StartedSession
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := seam.Queries(tx)
		// The upsert takes the agent's row lock, as a person's stop does
		// (holdAgent): the stop and this start take turns.
		agent, err := q.AgentUpsert(ctx, db.AgentUpsertParams{AgentID: agentID, Config: agentConfig})
		if err != nil {
			return fmt.Errorf("record agent %s: %w", agentID, err)
		}
		if by != ByPerson {
			if err := hold.Check(agent); err != nil {
				return err
			}
		}
		params := db.SessionCreateParams{AgentID: agentID, LeaseTokenHash: hash, BaseHash: rpc.Genesis[:],
			ConfigVersion: configVersion, ResourceBindings: bindings, Runtime: runtime}
		prev, err := q.SessionLatestByAgent(ctx, agentID)
		switch {
		case errors.Is(err, choirsql.ErrNotFound):
		case err != nil:
			return fmt.Errorf("look up previous session of %s: %w", agentID, err)
		case prev.Status == "ended" || prev.Status == "crashed":
			// A rollover's session starts a fresh budget, as a person's
			// start does: that is what the day's rollover is for. So
			// does a resume of a session whose rollover was due (choird
			// was down at midnight): its day is over.
			if by == ByChoird && !rolloverPassed(Of(prev), time.Now()) {
				if err := continueBudget(ctx, q, Of(prev), &params); err != nil {
					return err
				}
			}
			params.ResumedFrom = &prev.SessionID
			params.BaseRev = prev.AckedRev
			if prev.AckedHash != nil {
				params.BaseHash = prev.AckedHash
			} else {
				params.BaseHash = prev.BaseHash
			}
		}
		s, err := q.SessionCreate(ctx, params)
		if err != nil {
			return leaseErr(fmt.Sprintf("start agent %s", agentID), err)
		}
		for _, l := range exclusiveLeases(cfg, b) {
			if _, err := q.LeaseAcquire(ctx, db.LeaseAcquireParams{ResourceKind: l[0], ResourceName: l[1],
				AgentID: agentID, SessionID: s.SessionID}); err != nil {
				return leaseErr(fmt.Sprintf("lease %s %s for agent %s", l[0], l[1], agentID), err)
			}
		}
		out = StartedSession{Session: Of(s), LeaseToken: token, Bindings: b}
		return nil
	})
	return out, err
}

// leaseErr turns the unique violations raised by the lease and live-session
// guards (whose messages name the holder) into ErrLeaseConflict.
func leaseErr(what string, err error) error {
	var pe *pgconn.PgError
	if errors.Is(err, choirsql.ErrUniqueViolation) && errors.As(err, &pe) {
		msg := pe.Message
		if pe.Hint != "" {
			msg += "; " + pe.Hint
		}
		return fmt.Errorf("%s: %w: %s", what, ErrLeaseConflict, msg)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// EndSession marks a live session ended (or crashed), releases its leases,
// forgets its replay records and, when ins is set, enqueues the chunking of
// its events into memory, all in one transaction, so that an ended session
// is never left out of memory. It reports false when the session was not
// live.
func EndSession(ctx context.Context, pool *pgxpool.Pool, ins jobs.Inserter, id uuid.UUID, status, reason string) (bool, error) {
	var ended bool
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := seam.Queries(tx)
		n, err := q.SessionClose(ctx, db.SessionCloseParams{SessionID: id, Status: status, EndReason: reason})
		if err != nil {
			return fmt.Errorf("close session %s: %w", id, err)
		}
		if n == 0 {
			return nil
		}
		ended = true
		if _, err := q.LeasesReleaseBySession(ctx, id); err != nil {
			return fmt.Errorf("release leases of %s: %w", id, err)
		}
		if _, err := q.ReplayForgetSession(ctx, id); err != nil {
			return fmt.Errorf("forget replays of %s: %w", id, err)
		}
		if ins != nil {
			return memory.InsertChunkSessionTx(ctx, ins, tx, id)
		}
		return nil
	})
	return ended, err
}

// continueBudget makes p, a session choird starts on its own (a
// schedule's start_agent, a resume), continue the session budget of prev,
// the agent's session before it: its base is prev's base plus what prev
// spent, as its replicated log shows. Budgets cannot be reset by cycling
// sessions: whatever ended prev (the agent itself, a crash, choird's
// restart), the caps total_session_tokens and session_cost_usd find the
// session as spent as prev left it. Only a person's start and the day's
// rollover (ByRollover, at the DM's midnight) give a session a fresh
// budget; day caps count per day across sessions anyway.
func continueBudget(ctx context.Context, q *db.Queries, prev Session, p *db.SessionCreateParams) error {
	spent, err := q.UsageSessionTotals(ctx, prev.ID)
	if err != nil {
		return fmt.Errorf("usage of session %s: %w", prev.ID, err)
	}
	p.BudgetFrom = &prev.ID
	p.BudgetBaseTokens = prev.BudgetBaseTokens + spent.Tokens
	p.BudgetBaseCostUsd = prev.BudgetBaseCostUSD + spent.CostUsd
	return nil
}

// rolloverPassed reports whether session s was due to roll over by now.
func rolloverPassed(s Session, now time.Time) bool {
	return s.RolloverAt != nil && !now.Before(*s.RolloverAt)
}

// Origin is who starts a session.
type Origin int

const (
	// ByPerson is a start by a person (choirctl, a DM): it lifts a
	// person's stop, and its session has a fresh budget (usage.Continue).
	ByPerson Origin = iota
	// ByChoird is a start choird makes on its own (a schedule's
	// start_agent, a resume): refused while a person's stop holds the
	// agent (hold.Err); its session continues the budget of the one
	// before it.
	ByChoird
	// ByRollover is choird's daily rollover of a session (rollover.go):
	// refused while a person's stop holds the agent, as ByChoird is, but
	// its session has a fresh budget: the per-session budgets are a day's.
	ByRollover
)
