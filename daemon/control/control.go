// Package control is choird's one control layer: who may act (Scope, and
// which agent a DM controls), and every command that changes or reads the
// state of agents: sessions (start, stop, restart, status, resume after a
// restart of choird), the running configuration and secrets
// (one atomic snapshot, staged and applied in two phases), models and
// voices, workspaces and image builds. Every front-end (the admin socket,
// the DM commands, the gateway's hooks) calls the same functions with its
// scope; none decides permissions or changes state by itself. It imports
// no front-end: each translates its senders into a [DM] and its errors
// from [ErrNotBound], and the gateway clears approval buttons through the
// [ButtonClearer] port.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/runtime"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Options configure the control layer.
type Options struct {
	// Home is the .choir.d directory.
	Home   string
	Logger *slog.Logger
	Pool   *pgxpool.Pool
	// Config, Secrets and ConfigVersion are what choird started with.
	Config        *config.Config
	Secrets       config.Secrets
	ConfigVersion int64
	// AgentBinary is choir-agent, for image builds (default: next to
	// choird's own executable).
	AgentBinary string
	// AgentImage overrides the image agents run under docker.
	AgentImage string
	// OSImage is the operating-system image agent builds start from.
	OSImage string
	// AgentSocket is the agent protocol's Unix socket, mounted into
	// agents the runtime starts; SetAgentHTTP replaces it when choird
	// serves agents over HTTP+SSE.
	AgentSocket string
	// EgressSocket is choird's egress gateway, the agents' one way out
	// (daemon/egress); the runtime mounts it or names it to the agent.
	EgressSocket string
}

// Pusher is what the control layer needs of the agent protocol's server:
// pushes to a session's agent, and closing a session's stream.
type Pusher interface {
	Push(sessionID string, p rpc.Push) (uint64, error)
	CloseSession(ctx context.Context, sessionID string) error
}

// Control is the control layer of a running choird.
type Control struct {
	home   string
	logger *slog.Logger
	pool   *pgxpool.Pool
	opts   Options
	// runtime runs agents (nil when choird has none); river enqueues the
	// jobs control commands cause; rpc pushes to agents. They are set
	// once, before choird serves (SetRuntime, SetJobs, SetRPC).
	runtime runtime.Runtime
	river   jobs.Inserter
	rpc     Pusher
	// agentAddr and agentCACert are choird's HTTP+SSE listener and its
	// certificate, when agents reach choird over HTTP (SetAgentHTTP).
	agentAddr, agentCACert string

	// snap is the running configuration, swapped whole (configctl.go).
	snap atomic.Pointer[Snapshot]
	// cfgCtl holds the staged configuration (configctl.go).
	cfgCtl configControl
	// onConfigApplied are called, in order, after each successful config
	// apply with the new running configuration and secrets.
	onConfigApplied []func(*config.Config, config.Secrets)
	// onSecretsApplied are called, in order, after each successful secret
	// apply with the new secrets: what choird itself holds (bot tokens,
	// the embedding key) reloads there.
	onSecretsApplied []func(context.Context, config.Secrets) error
}

// New makes the control layer of choird with the configuration it starts
// with.
func New(o Options) *Control {
	d := &Control{home: o.Home, logger: o.Logger, pool: o.Pool}
	d.snap.Store(&Snapshot{Config: o.Config, Secrets: o.Secrets, Version: o.ConfigVersion})
	// The configuration lives in the snapshot alone.
	o.Config, o.Secrets, o.ConfigVersion = nil, nil, 0
	d.opts = o
	return d
}

// SetRuntime sets the runtime that runs agents; without one, agents
// cannot be started.
func (d *Control) SetRuntime(rt runtime.Runtime) { d.runtime = rt }

// SetAgentHTTP makes the agents the runtime starts reach choird over
// HTTP+SSE, at the listener bound to addr presenting the certificate in
// caCert, instead of on the Unix socket. It is set once, before choird
// serves.
func (d *Control) SetAgentHTTP(addr, caCert string) {
	d.opts.AgentSocket, d.agentAddr, d.agentCACert = "", addr, caCert
}

// SetJobs sets the job queue that control commands enqueue on.
func (d *Control) SetJobs(ins jobs.Inserter) { d.river = ins }

// SetRPC sets the agent protocol's server.
func (d *Control) SetRPC(p Pusher) { d.rpc = p }

// OnConfigApplied adds fn to what runs after each successful config apply.
func (d *Control) OnConfigApplied(fn func(*config.Config, config.Secrets)) {
	d.onConfigApplied = append(d.onConfigApplied, fn)
}

// OnSecretsApplied adds fn to what runs after each successful secret
// apply. An error is logged and ends nothing: the other hooks still run.
func (d *Control) OnSecretsApplied(fn func(context.Context, config.Secrets) error) {
	d.onSecretsApplied = append(d.onSecretsApplied, fn)
}

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }

// Scope is who issues a control command (spec 17.1, 19.3): an admin, who
// may act on any agent, or a regular DM, which may act only on its bound
// agent (DMBindingOf decides which). Both front-ends (the admin socket and
// the gateway) call the same commands with their scope.
type Scope struct {
	Admin bool
	// Agent is the agent a regular DM is bound to.
	Agent string
	// DM is the DM a scope from the gateway comes from. A regular scope
	// with a DM acts only on sessions bound to that DM (allowSession).
	DM string
	// Actor names the issuer for logs and audit, e.g. "choirctl:uid=0".
	Actor string
	// Unbound says why a regular DM is bound to no agent, when there is
	// more to say than that none is configured for it (its agent runs
	// bound to another DM).
	Unbound error
	// Unattended marks a start choird makes on its own (a schedule's
	// start_agent, a resume after choird restarts): ByChoird, not
	// ByPerson.
	Unattended bool
	// Rollover marks the start of a session's successor at the day's
	// rollover (with Unattended): its budget is fresh (session.ByRollover).
	Rollover bool
}

// origin is who gives a command: a person, or choird on its own.
func (s Scope) origin() session.Origin {
	if s.Rollover {
		return session.ByRollover
	}
	if s.Unattended {
		return session.ByChoird
	}
	return session.ByPerson
}

// ErrForbidden reports a command outside the issuer's scope.
var ErrForbidden = errors.New("not allowed")

// Allow checks a command on agentID: an admin may act on any agent, a
// regular DM only on its bound one.
func (s Scope) Allow(agentID string) error {
	if s.Admin || (s.Agent != "" && s.Agent == agentID) {
		return nil
	}
	if s.Agent == "" && s.Unbound != nil {
		return fmt.Errorf("%w: %w", ErrForbidden, s.Unbound)
	}
	if s.Agent == "" {
		return fmt.Errorf("%w: this command needs an admin DM or choirctl", ErrForbidden)
	}
	return fmt.Errorf("%w: this DM controls only agent %s, not %s", ErrForbidden, s.Agent, agentID)
}

// AllowSession checks a command on one of an agent's sessions: a regular
// DM acts only on a session bound to it. For a live session this is the
// session holding the DM's lease (the scope may have been made before
// an admin started the agent on another DM); for the latest session of an
// agent that is not running, it keeps another DM's conversation (events,
// lanes, approvals) out of this DM's sight.
func (s Scope) AllowSession(sess session.Session) error {
	if err := s.Allow(sess.AgentID); err != nil {
		return err
	}
	if s.Admin || s.DM == "" {
		return nil
	}
	if dm := sess.DM(); dm != s.DM {
		if sess.Status == "active" || sess.Status == "stopping" {
			return fmt.Errorf("%w: %s is running on another DM; this DM controls it again once it stops, or is started here",
				ErrForbidden, sess.AgentID)
		}
		return fmt.Errorf("%w: the last session of %s was on another DM, so this DM does not see it", ErrForbidden, sess.AgentID)
	}
	return nil
}

// AdminOnly refuses what, a command only an admin may give, to a regular
// DM.
func (s Scope) AdminOnly(what string) error {
	if s.Admin {
		return nil
	}
	return fmt.Errorf("%w: %s needs an admin DM or choirctl", ErrForbidden, what)
}

// StopTimeout bounds a graceful stop: the agent's safe point, summary,
// final heartbeat and TERMINATE_SELF.
const StopTimeout = 60 * time.Second

// AgentStart starts a session of agentID under the configured runtime:
// leases and the session row in one transaction, then the instance. If the
// instance cannot start, the session and its leases are removed again, so
// nothing is half-started.
func (d *Control) AgentStart(ctx context.Context, sc Scope, agentID string, o admin.StartOverrides) (admin.AgentStatus, error) {
	cfg, _ := d.config()
	cfgVersion := d.runningConfigVersion()
	if err := sc.AdminOnly("agent start"); err != nil {
		return admin.AgentStatus{}, err
	}
	if d.runtime == nil {
		return admin.AgentStatus{}, errors.New("choird runs without an agent runtime; start it with --runtime=docker")
	}
	b, err := session.ResolveBindings(cfg, agentID, o)
	if err != nil {
		return admin.AgentStatus{}, err
	}
	ws := cfg.Workspaces[b.Workspace].Path
	if err := checkWorkspace(ws); err != nil {
		return admin.AgentStatus{}, fmt.Errorf("workspace %s: %w", b.Workspace, err)
	}
	if err := d.verifyImage(ctx, agentID, d.agentImage(agentID)); err != nil {
		return admin.AgentStatus{}, err
	}
	staged, err := d.stageRepos(ctx, cfg, agentID)
	if err != nil {
		return admin.AgentStatus{}, err
	}
	s, err := session.CreateSessionAs(ctx, d.pool, cfg, agentID, o, cfgVersion, d.runtime.Name(), sc.origin())
	if err != nil {
		staged.Discard()
		return admin.AgentStatus{}, err
	}
	spec := runtime.Spec{AgentID: agentID, SessionID: s.Session.ID.String(), LeaseToken: s.LeaseToken,
		Image: d.agentImage(agentID), Workspace: ws, ControlSocket: d.opts.AgentSocket, EgressSocket: d.opts.EgressSocket,
		ControlAddr: d.agentAddr, ControlCACert: d.agentCACert, Env: staged.Env()}
	inst, err := d.runtime.Start(ctx, spec)
	staged.Settle(err == nil)
	if err != nil {
		if derr := discardSession(context.WithoutCancel(ctx), d.pool, s.Session.ID); derr != nil {
			d.logger.Error("could not remove the session of a failed start", slog.String("session_id", spec.SessionID),
				slog.String("error", derr.Error()))
		}
		return admin.AgentStatus{}, fmt.Errorf("start agent %s: %w", agentID, err)
	}
	if err := seam.Queries(d.pool).SessionSetInstance(ctx, db.SessionSetInstanceParams{SessionID: s.Session.ID,
		ContainerID: inst.ID}); err != nil {
		return admin.AgentStatus{}, fmt.Errorf("record instance of %s: %w", agentID, err)
	}
	d.logger.InfoContext(ctx, "agent started", slog.String("agent_id", agentID), slog.String("session_id", spec.SessionID),
		slog.String("runtime", d.runtime.Name()), slog.String("instance", inst.ID), slog.String("by", sc.Actor))
	if !sc.Unattended {
		if err := d.releaseAgent(ctx, sc, agentID); err != nil {
			// The agent runs; its held schedules stay paused until a
			// person resumes them or starts it again.
			d.logger.WarnContext(ctx, "the schedules a stop held were not resumed", slog.String("agent_id", agentID),
				slog.String("error", err.Error()))
		}
	}
	return d.LatestStatus(ctx, agentID), nil
}

// agentImage is the image an agent runs under docker.
func (d *Control) agentImage(agentID string) string {
	if d.opts.AgentImage != "" {
		return d.opts.AgentImage
	}
	return "choir-agent-" + agentID + ":latest"
}

// checkWorkspace says what is wrong with a workspace directory.
func checkWorkspace(path string) error {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("%s does not exist; create it (mkdir -p %s) or fix workspaces in config.json", path, path)
	}
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return fmt.Errorf("%s is not a directory", path)
	}
	probe, err := os.CreateTemp(path, ".choir-write-check-*")
	if err != nil {
		return fmt.Errorf("%s is not writable by choird: %w", path, err)
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// discardSession removes a session that never ran, with its leases.
func discardSession(ctx context.Context, pool dbtx, id uuid.UUID) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := seam.Queries(tx)
		if _, err := q.LeasesDeleteBySession(ctx, id); err != nil {
			return err
		}
		_, err := q.SessionDeleteUnstarted(ctx, id)
		return err
	})
}

// dbtx is what discardSession needs of a pool.
type dbtx interface {
	Begin(ctx context.Context) (pgx.Tx, error)
}

// AgentStop stops an agent gracefully (spec 17.2): the session becomes
// stopping, the agent is told to shut down and ends its session itself
// after its final heartbeat; an agent that does not within StopTimeout is
// stopped by its runtime and its session ended.
func (d *Control) AgentStop(ctx context.Context, sc Scope, agentID string) (admin.AgentStatus, error) {
	if err := sc.Allow(agentID); err != nil {
		return admin.AgentStatus{}, err
	}
	s, err := d.stoppableSession(ctx, sc, agentID)
	if err != nil {
		return admin.AgentStatus{}, err
	}
	if err := d.stopSession(ctx, s, rpc.Shutdown{Reason: "stop requested by " + sc.Actor}, sc.Actor); err != nil {
		return admin.AgentStatus{}, err
	}
	return d.LatestStatus(ctx, agentID), nil
}

// stopSession stops live session s gracefully: it becomes stopping, the
// agent is told to shut down (how: the reason, and whether the turn in
// progress finishes first; the grace is StopTimeout) and ends its session
// itself after its safe point, summary and final heartbeat; an agent that
// does not within StopTimeout is stopped by its runtime and its session
// ended.
func (d *Control) stopSession(ctx context.Context, s session.Session, how rpc.Shutdown, actor string) error {
	q := seam.Queries(d.pool)
	agentID := s.AgentID
	if err := q.SessionMarkStopping(ctx, s.ID); err != nil {
		return err
	}
	id := s.ID.String()
	how.GraceMS = StopTimeout.Milliseconds()
	if _, err := d.rpc.Push(id, rpc.Push{Kind: rpc.PushShutdown, Shutdown: &how}); err != nil {
		d.logger.WarnContext(ctx, "could not push shutdown", slog.String("session_id", id), slog.String("error", err.Error()))
	}
	deadline := time.Now().Add(StopTimeout)
	for time.Now().Before(deadline) {
		row, err := q.SessionGetByID(ctx, s.ID)
		if err == nil && row.Status != "active" && row.Status != "stopping" {
			break
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	if d.runtime != nil && s.ContainerID != "" {
		if err := d.runtime.Stop(ctx, s.ContainerID, 10*time.Second); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			d.logger.WarnContext(ctx, "runtime stop failed", slog.String("instance", s.ContainerID), slog.String("error", err.Error()))
		}
		if err := d.runtime.Remove(ctx, s.ContainerID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
			d.logger.WarnContext(ctx, "runtime remove failed", slog.String("instance", s.ContainerID), slog.String("error", err.Error()))
		}
	}
	// An agent that never answered is ended here; its unacknowledged tail
	// is lost, as after a crash.
	if ended, err := session.EndSession(ctx, d.pool, d.river, s.ID, "ended", "stopped by "+actor+" (agent did not end its session)"); err != nil {
		return err
	} else if ended {
		d.logger.WarnContext(ctx, "agent did not end its session in time; ended it", slog.String("agent_id", agentID))
	}
	d.rpc.CloseSession(ctx, id) //nolint:errcheck
	d.logger.InfoContext(ctx, "agent stopped", slog.String("agent_id", agentID), slog.String("session_id", id), slog.String("by", actor))
	return nil
}

// AgentRestart stops an agent and starts it again with the same resource
// bindings. An agent that is not running (it stopped, or crashed: the
// crash notice offers /restart) is started, resuming where its last session
// left off: with that session's resources when an admin asks, on its
// defaults when its own DM does (a regular DM never binds the agent to
// another DM).
func (d *Control) AgentRestart(ctx context.Context, sc Scope, agentID string) (admin.AgentStatus, error) {
	if err := sc.Allow(agentID); err != nil {
		return admin.AgentStatus{}, err
	}
	q := seam.Queries(d.pool)
	s, err := q.SessionGetLiveByAgent(ctx, agentID)
	if errors.Is(err, choirsql.ErrNotFound) {
		var o admin.StartOverrides
		if last, err := q.SessionLatestByAgent(ctx, agentID); err == nil && sc.Admin {
			var b rpc.ResourceBindings
			if err := json.Unmarshal(last.ResourceBindings, &b); err == nil {
				o = overridesOf(b)
			}
		}
		return d.AgentStart(ctx, Scope{Admin: true, Actor: sc.Actor, Unattended: sc.Unattended}, agentID, o)
	}
	if err != nil {
		return admin.AgentStatus{}, fmt.Errorf("load the live session of %s: %w", agentID, err)
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(s.ResourceBindings, &b); err != nil {
		return admin.AgentStatus{}, err
	}
	if _, err := d.AgentStop(ctx, sc, agentID); err != nil {
		return admin.AgentStatus{}, err
	}
	return d.AgentStart(ctx, Scope{Admin: true, Actor: sc.Actor, Unattended: sc.Unattended}, agentID, overridesOf(b))
}

// AgentStatus reports one agent.
func (d *Control) AgentStatus(ctx context.Context, sc Scope, agentID string) (admin.AgentStatus, error) {
	cfg, _ := d.config()
	if err := sc.Allow(agentID); err != nil {
		return admin.AgentStatus{}, err
	}
	if _, ok := cfg.Agents[agentID]; !ok {
		return admin.AgentStatus{}, fmt.Errorf("%w: agent %q is not in config.json", session.ErrUnknownResource, agentID)
	}
	return d.LatestStatus(ctx, agentID), nil
}

// AgentList reports every configured agent.
func (d *Control) AgentList(ctx context.Context, sc Scope) ([]admin.AgentStatus, error) {
	cfg, _ := d.config()
	if err := sc.AdminOnly("agent list"); err != nil {
		return nil, err
	}
	out := []admin.AgentStatus{}
	for _, id := range sortedKeys(cfg.Agents) {
		out = append(out, d.LatestStatus(ctx, id))
	}
	return out, nil
}

// WorkspaceList lists the workspaces and who leases each.
func (d *Control) WorkspaceList(ctx context.Context, sc Scope) ([]admin.WorkspaceInfo, error) {
	cfg, _ := d.config()
	if err := sc.AdminOnly("workspace list"); err != nil {
		return nil, err
	}
	leases, err := seam.Queries(d.pool).LeaseListActive(ctx)
	if err != nil {
		return nil, err
	}
	holder := map[string]string{}
	for _, l := range leases {
		if l.ResourceKind == "workspace" {
			holder[l.ResourceName] = l.AgentID
		}
	}
	out := []admin.WorkspaceInfo{}
	for _, name := range sortedKeys(cfg.Workspaces) {
		out = append(out, admin.WorkspaceInfo{Name: name, Path: cfg.Workspaces[name].Path, Holder: holder[name]})
	}
	return out, nil
}

// WorkspaceReset deletes a workspace's contents, stopping the agent that
// leases it first (spec 15.4).
func (d *Control) WorkspaceReset(ctx context.Context, sc Scope, name string) (admin.WorkspaceInfo, error) {
	cfg, _ := d.config()
	if err := sc.AdminOnly("workspace reset"); err != nil {
		return admin.WorkspaceInfo{}, err
	}
	ws, ok := cfg.Workspaces[name]
	if !ok {
		return admin.WorkspaceInfo{}, fmt.Errorf("%w: workspace %q is not in config.json (workspaces: %v)", session.ErrUnknownResource, name, sortedKeys(cfg.Workspaces))
	}
	l, err := seam.Queries(d.pool).LeaseGetHolder(ctx, db.LeaseGetHolderParams{ResourceKind: "workspace", ResourceName: name})
	if err == nil {
		if _, err := d.AgentStop(ctx, sc, l.AgentID); err != nil {
			return admin.WorkspaceInfo{}, fmt.Errorf("stop %s, which leases workspace %s: %w", l.AgentID, name, err)
		}
	} else if !errors.Is(err, choirsql.ErrNotFound) {
		return admin.WorkspaceInfo{}, err
	}
	entries, err := os.ReadDir(ws.Path)
	if err != nil {
		return admin.WorkspaceInfo{}, fmt.Errorf("read workspace %s: %w", name, err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(ws.Path, e.Name())); err != nil {
			return admin.WorkspaceInfo{}, fmt.Errorf("reset workspace %s: %w", name, err)
		}
	}
	d.logger.InfoContext(ctx, "workspace reset", slog.String("workspace", name), slog.String("by", sc.Actor))
	return admin.WorkspaceInfo{Name: name, Path: ws.Path}, nil
}

// LatestStatus describes an agent from its latest session, with the states
// its lanes last reported while it was live (or when it crashed).
func (d *Control) LatestStatus(ctx context.Context, id string) admin.AgentStatus {
	a := admin.AgentStatus{AgentID: id, State: admin.AgentStopped}
	s, err := seam.Queries(d.pool).SessionLatestByAgent(ctx, id)
	if err != nil {
		return a
	}
	switch s.Status {
	case "active":
		a.State = admin.AgentActive
		if s.HelloAt == nil {
			a.State = admin.AgentStarting
		}
	case "stopping":
		a.State = admin.AgentStopping
	case "crashed":
		a.State = admin.AgentCrashed
	}
	if a.State != admin.AgentStopped {
		started, beat := s.StartedAt, s.LastHeartbeatAt
		a.SessionID, a.Runtime, a.StartedAt, a.LastHeartbeatAt = s.SessionID.String(), s.Runtime, &started, &beat
		if s.Status == "active" {
			a.RollsOverAt = s.RolloverAt
		}
		lanes, err := laneStatuses(s.LaneStatus)
		if err != nil {
			d.logger.WarnContext(ctx, "lane states not shown", slog.String("session_id", a.SessionID), slog.String("error", err.Error()))
		}
		a.Lanes = lanes
	}
	return a
}

// SecretApply reloads secrets.json (spec 16.3) and tells every live agent to
// fetch its secrets again; each agent swaps its whole set at once. An
// invalid secrets.json changes nothing.
func (d *Control) SecretApply(ctx context.Context, sc Scope) (admin.SecretApplyResult, error) {
	if err := sc.AdminOnly("secret apply"); err != nil {
		return admin.SecretApplyResult{}, err
	}
	// The whole configuration is validated with the new secrets, so a
	// secret a resource names cannot go missing; config.json itself is
	// not applied here.
	_, secrets, rest, err := config.LoadAtRest(d.home)
	if err != nil {
		return admin.SecretApplyResult{}, fmt.Errorf("reload secrets: %w", err)
	}
	d.setSecrets(secrets)
	for _, fn := range d.onSecretsApplied {
		if err := fn(ctx, secrets); err != nil {
			d.logger.ErrorContext(ctx, "secret apply: choird keeps an earlier secret", slog.String("error", err.Error()))
		}
	}
	if !rest.Encrypted {
		d.logger.WarnContext(ctx, config.PlaintextWarning)
	}
	res := admin.SecretApplyResult{Secrets: len(secrets)}
	q := seam.Queries(d.pool)
	cfg, _ := d.config()
	for _, id := range sortedKeys(cfg.Agents) {
		s, err := q.SessionGetLiveByAgent(ctx, id)
		if err != nil {
			continue
		}
		if _, err := d.rpc.Push(s.SessionID.String(), rpc.Push{Kind: rpc.PushConfigChanged,
			ConfigChanged: &rpc.ConfigChanged{ConfigVersion: max(d.runningConfigVersion(), 1)}}); err == nil {
			res.Notified++
		}
	}
	d.logger.InfoContext(ctx, "secrets applied", slog.Int("secrets", len(secrets)), slog.Int("agents_notified", res.Notified),
		slog.String("by", sc.Actor))
	return res, nil
}

// Home is the .choir.d directory choird runs on.
func (d *Control) Home() string { return d.home }
