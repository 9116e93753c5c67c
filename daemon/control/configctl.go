package control

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/configdiff"
	"github.com/choirhq/choir/daemon/configrepo"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
	"github.com/choirhq/choir/strictjson"
)

// Snapshot is one running configuration: config.json, secrets.json and
// the config_version choird runs with. It is never modified: config apply
// and secret apply replace it whole, so a reader sees the three together.
type Snapshot struct {
	Config  *config.Config
	Secrets config.Secrets
	Version int64
}

// configControl is the state of the two-phase configuration commands
// (spec 16.3, 17.6): the staged configuration.
type configControl struct {
	// stageMu serialises load, diff and apply, and guards staged.
	stageMu sync.Mutex
	staged  *stagedConfig
	// repos are the git repositories choird runs with and loads.
	repos configrepo.Repos
}

// stagedConfig is what config load read and validated, waiting for apply.
type stagedConfig struct {
	cfg *config.Config
	// secrets are secrets.json as it was at load: used only to show which
	// secrets differ from choird's (config apply never applies them).
	secrets config.Secrets
	// sum is the SHA-256 of config.json's bytes, which numbers the version
	// as at start-up.
	sum      [sha256.Size]byte
	loadedAt time.Time
	// repos are the repositories fetched and checked at load, and
	// repoWarnings the fetches that fell back on an earlier copy.
	repos        *configrepo.State
	repoWarnings []string
}

// Snapshot returns the running configuration. Callers must not modify it.
func (d *Control) Snapshot() *Snapshot { return d.snap.Load() }

// config returns the running configuration and secrets. Callers must not
// modify them: apply replaces both whole, never patches them.
func (d *Control) config() (*config.Config, config.Secrets) {
	s := d.snap.Load()
	return s.Config, s.Secrets
}

// runningConfigVersion returns the config_version choird runs with.
func (d *Control) runningConfigVersion() int64 { return d.snap.Load().Version }

// ConfigVersion is the version number of the config.json choird runs with.
func (d *Control) ConfigVersion() int64 { return d.runningConfigVersion() }

// update replaces the running snapshot with edit's copy of it. Concurrent
// updates (a config apply and a secret apply) each change only their own
// part: an update that lost the race is made again on the winner's.
func (d *Control) update(edit func(*Snapshot)) {
	for {
		old := d.snap.Load()
		next := *old
		edit(&next)
		if d.snap.CompareAndSwap(old, &next) {
			return
		}
	}
}

// setSecrets swaps the running secrets, for secret apply.
func (d *Control) setSecrets(s config.Secrets) {
	d.update(func(sn *Snapshot) { sn.Secrets = s })
}

// Effects of a configuration change: when it takes effect.
const (
	// EffectHotReload changes are applied by config apply and reach
	// running agents at their next heartbeat (spec 16.1).
	EffectHotReload = "hot-reload"
	// EffectNextStart changes are applied by config apply, but an agent
	// session already running keeps what it was started with until the
	// agent restarts (resource bindings, workspace mounts, secret names).
	EffectNextStart = "next-start"
	// EffectRebuild changes (repositories) are applied by config apply and
	// used by the next agent build or update (spec 17.3, 17.4).
	EffectRebuild = "rebuild"
	// EffectChoirdRestart changes are read by choird at start-up only
	// (Postgres, embedding, gateways): config apply refuses them.
	EffectChoirdRestart = "choird-restart"
	// EffectSecretApply marks a secrets.json difference, which only
	// secret apply applies (spec 17.1: config apply does not reload
	// secret values).
	EffectSecretApply = "secret-apply"
)

// ConfigRefusedError is returned by ConfigApply when the staged
// configuration cannot be applied; nothing was changed.
type ConfigRefusedError struct {
	Problems []configdiff.Blocker
}

func (e *ConfigRefusedError) Error() string {
	var b strings.Builder
	b.WriteString("config apply refused, nothing changed:")
	for _, p := range e.Problems {
		b.WriteString("\n  " + p.String())
	}
	return b.String()
}

// ErrNothingStaged is returned by ConfigDiff and ConfigApply before any
// successful config load.
var ErrNothingStaged = errors.New("no configuration is staged; run choirctl config load first")

// ConfigLoad reads and validates .choir.d/config.json and secrets.json as
// one snapshot, fetches and checks the repositories (configrepo), and
// stages it all (spec 17.6). Anything invalid stages nothing and discards
// what an earlier load staged, so apply never picks up an older file.
func (d *Control) ConfigLoad(ctx context.Context, sc Scope) (configdiff.DiffReport, error) {
	if err := sc.AdminOnly("config load"); err != nil {
		return configdiff.DiffReport{}, err
	}
	d.cfgCtl.stageMu.Lock()
	defer d.cfgCtl.stageMu.Unlock()
	d.cfgCtl.staged = nil
	st, err := d.readStaged()
	if err != nil {
		return configdiff.DiffReport{}, err
	}
	if st.repos, st.repoWarnings, err = d.cfgCtl.repos.Load(ctx, configrepo.Options{Home: d.home, Logger: d.logger}, st.cfg); err != nil {
		return configdiff.DiffReport{}, err
	}
	d.cfgCtl.staged = st
	diff, err := d.diffStaged(ctx, st)
	if err != nil {
		return configdiff.DiffReport{}, err
	}
	d.logger.InfoContext(ctx, "config staged", slog.Int("changes", len(diff.Changes)),
		slog.Int("blockers", len(diff.Blockers)), slog.String("by", sc.Actor))
	return diff, nil
}

// readStaged reads config.json and secrets.json as one snapshot: the bytes
// hashed into the version are the bytes validated.
func (d *Control) readStaged() (*stagedConfig, error) {
	cfg, secrets, data, err := config.LoadSnapshot(d.home)
	if err != nil {
		return nil, fmt.Errorf("config load: nothing staged: %w", err)
	}
	return &stagedConfig{cfg: cfg, secrets: secrets, sum: sha256.Sum256(data), loadedAt: time.Now()}, nil
}

// ConfigDiff compares the staged configuration with the running one.
func (d *Control) ConfigDiff(ctx context.Context, sc Scope) (configdiff.DiffReport, error) {
	if err := sc.AdminOnly("config diff"); err != nil {
		return configdiff.DiffReport{}, err
	}
	d.cfgCtl.stageMu.Lock()
	defer d.cfgCtl.stageMu.Unlock()
	if d.cfgCtl.staged == nil {
		return configdiff.DiffReport{}, ErrNothingStaged
	}
	return d.diffStaged(ctx, d.cfgCtl.staged)
}

// diffStaged compares st with the running configuration and finds what
// would make apply refuse. The caller holds stageMu.
func (d *Control) diffStaged(ctx context.Context, st *stagedConfig) (configdiff.DiffReport, error) {
	running, secrets := d.config()
	changes, err := configdiff.Diff(running, st.cfg)
	if err != nil {
		return configdiff.DiffReport{}, err
	}
	var blockers []configdiff.Blocker
	for i := range changes {
		ch := &changes[i]
		ch.Effect, ch.Hint = changeEffect(*ch)
		if ch.Effect == EffectChoirdRestart {
			blockers = append(blockers, configdiff.Blocker{Path: ch.Path,
				Message: "choird reads this at start-up only: restart choird to use it, or revert it and run choirctl config load again"})
		}
	}
	for _, ch := range configdiff.SecretsDiff(secrets, st.secrets) {
		ch.Effect, ch.Hint = EffectSecretApply, "choirctl secret apply"
		changes = append(changes, ch)
	}
	changes = append(changes, d.cfgCtl.repos.Diff(st.repos)...)
	// The staged config must hold with the secrets choird runs with:
	// config apply does not load secrets.json.
	if err := st.cfg.ValidateAt(d.home, secrets); err != nil {
		var cerr *strictjson.Error
		if !errors.As(err, &cerr) {
			return configdiff.DiffReport{}, err
		}
		for _, p := range cerr.Problems {
			blockers = append(blockers, configdiff.Blocker{Path: p.Path,
				Message: p.Message + " (checked against choird's running secrets: if secrets.json has it, run choirctl secret apply first)"})
		}
	}
	live, err := d.liveBindingBlockers(ctx, running, st.cfg)
	if err != nil {
		return configdiff.DiffReport{}, err
	}
	blockers = append(blockers, live...)
	if changes == nil {
		changes = []configdiff.Change{}
	}
	if blockers == nil {
		blockers = []configdiff.Blocker{}
	}
	return configdiff.DiffReport{RunningVersion: d.runningConfigVersion(), LoadedAt: st.loadedAt, Changes: changes, Blockers: blockers,
		Warnings: st.repoWarnings}, nil
}

// changeEffect says when a config.json change takes effect, and what the
// operator runs for it.
func changeEffect(ch configdiff.Change) (effect, hint string) {
	keys := ch.Keys()
	if len(keys) == 0 {
		return EffectChoirdRestart, ""
	}
	switch keys[0] {
	case "postgres", "embedding", "gateways", "console":
		// The pool, the embedder and agent schemas' vector size, the
		// gateways' bots and the console's listener are made at start-up.
		return EffectChoirdRestart, "restart choird"
	case "global_repo":
		return EffectRebuild, "choirctl agent update-all"
	case "agents":
		switch {
		case len(keys) == 2:
			// A new agent's schema is provisioned by apply; removing a
			// running agent is a blocker.
			return EffectHotReload, ""
		case len(keys) >= 3 && keys[2] == "repo":
			return EffectRebuild, "choirctl agent update " + keys[1]
		case len(keys) >= 3 && keys[2] == "egress":
			// choird's egress gateway reads the policy at every
			// connection.
			return EffectHotReload, ""
		default:
			return EffectNextStart, "choirctl agent restart " + keys[1]
		}
	case "workspaces":
		if len(keys) > 2 {
			// The directory is mounted when the agent starts.
			return EffectNextStart, "restart the agent leasing it"
		}
		return EffectHotReload, ""
	}
	if keys[len(keys)-1] == "secret" && len(keys) > 2 {
		// A session's grant of secret names is fixed at its start.
		return EffectNextStart, "restart agents bound to it"
	}
	return EffectHotReload, ""
}

// liveBindingBlockers refuses a staged config that removes an agent that
// is running, or a resource a running session is bound to: the session
// would be left naming something that no longer exists.
func (d *Control) liveBindingBlockers(ctx context.Context, running, staged *config.Config) ([]configdiff.Blocker, error) {
	var out []configdiff.Blocker
	q := seam.Queries(d.pool)
	for _, id := range sortedKeys(running.Agents) {
		s, err := q.SessionGetLiveByAgent(ctx, id)
		if errors.Is(err, choirsql.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("look up the live session of %s: %w", id, err)
		}
		stop := fmt.Sprintf("stop it first (choirctl agent stop %s), or keep it", id)
		if _, ok := staged.Agents[id]; !ok {
			out = append(out, configdiff.Blocker{Path: key("agents", id),
				Message: fmt.Sprintf("agent %s is removed but running (session %s): %s", id, s.SessionID, stop)})
			continue
		}
		var b rpc.ResourceBindings
		if err := json.Unmarshal(s.ResourceBindings, &b); err != nil {
			return nil, fmt.Errorf("session %s bindings: %w", s.SessionID, err)
		}
		check := func(section, name string, present bool) {
			if name != "" && !present {
				out = append(out, configdiff.Blocker{Path: key(section, name),
					Message: fmt.Sprintf("removed, but running agent %s is bound to it: %s", id, stop)})
			}
		}
		_, ok := staged.Workspaces[b.Workspace]
		check("workspaces", b.Workspace, ok)
		for _, m := range slices.Sorted(mapsValues(b.Models)) {
			_, ok := staged.Models[m]
			check("models", m, ok)
		}
		_, ok = staged.VoiceProfiles[b.VoiceProfile]
		check("voice_profiles", b.VoiceProfile, ok)
		_, ok = staged.GitIdentities[b.GitIdentity]
		check("git_identities", b.GitIdentity, ok)
		_, ok = staged.NotionIntegrations[b.Notion]
		check("notion_integrations", b.Notion, ok)
		_, ok = staged.EmailAccounts[b.Email]
		check("email_accounts", b.Email, ok)
		_, ok = staged.DMs[b.DM]
		check("dms", b.DM, ok)
	}
	return out, nil
}

func mapsValues(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for _, v := range m {
			if !yield(v) {
				return
			}
		}
	}
}

// key is the JSON path of a resource: $.section.name.
func key(section, name string) string {
	return strictjson.PathKey(strictjson.PathKey(strictjson.Root, section), name)
}

// ConfigApply makes the staged configuration the running one (spec 16.3):
// it provisions the schemas of new agents, swaps the configuration as a
// whole, records a new config_version and tells every live agent to fetch
// it. Changes choird reads only at start-up, a config that does not hold
// with the running secrets, and removals of what a running agent uses are
// refused, with the JSON path of each problem, and nothing changes.
// secrets.json is not applied (that is secret apply).
func (d *Control) ConfigApply(ctx context.Context, sc Scope) (configdiff.ApplyReport, error) {
	if err := sc.AdminOnly("config apply"); err != nil {
		return configdiff.ApplyReport{}, err
	}
	d.cfgCtl.stageMu.Lock()
	defer d.cfgCtl.stageMu.Unlock()
	st := d.cfgCtl.staged
	if st == nil {
		return configdiff.ApplyReport{}, ErrNothingStaged
	}
	diff, err := d.diffStaged(ctx, st)
	if err != nil {
		return configdiff.ApplyReport{}, err
	}
	if len(diff.Blockers) > 0 {
		return configdiff.ApplyReport{}, &ConfigRefusedError{Problems: diff.Blockers}
	}
	// The next build uses the clones as loaded: they run from now on.
	d.cfgCtl.repos.Apply(st.repos)
	prev := d.runningConfigVersion()
	res := configdiff.ApplyReport{Version: prev, PreviousVersion: prev, Applied: []configdiff.Change{}, NotApplied: []configdiff.Change{}}
	for _, ch := range diff.Changes {
		if ch.File == config.ConfigFile {
			res.Applied = append(res.Applied, ch)
		} else {
			res.NotApplied = append(res.NotApplied, ch)
		}
	}
	if len(res.Applied) == 0 {
		d.cfgCtl.staged = nil
		return res, nil
	}

	running, secrets := d.config()
	for _, id := range sortedKeys(st.cfg.Agents) {
		if _, ok := running.Agents[id]; ok {
			continue
		}
		// Provisioning is idempotent, so an apply that fails later
		// leaves at most an unused schema.
		if _, err := seam.Queries(d.pool).AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{
			AgentID: id, Dimensions: int32(running.Embedding.Dimensions)}); err != nil {
			return configdiff.ApplyReport{}, fmt.Errorf("config apply: provision schema of new agent %s: %w", id, err)
		}
	}

	// Swap before recording the version: an agent that sees the new
	// version number must get the new config when it fetches it. One
	// fetching in between gets the new config under the old number and
	// fetches again at its next heartbeat.
	d.swapConfig(st.cfg)
	version, err := seam.Queries(d.pool).ConfigVersionRecord(ctx, st.sum[:])
	if err != nil {
		d.swapConfig(running)
		return configdiff.ApplyReport{}, fmt.Errorf("config apply: record config version: %w; nothing changed", err)
	}
	d.update(func(sn *Snapshot) { sn.Version = version })
	d.cfgCtl.staged = nil
	res.Version = version

	q := seam.Queries(d.pool)
	for _, id := range sortedKeys(st.cfg.Agents) {
		s, err := q.SessionGetLiveByAgent(ctx, id)
		if err != nil {
			continue
		}
		if _, err := d.rpc.Push(s.SessionID.String(), rpc.Push{Kind: rpc.PushConfigChanged,
			ConfigChanged: &rpc.ConfigChanged{ConfigVersion: version}}); err != nil {
			d.logger.WarnContext(ctx, "could not push config_changed; the agent sees the version at its next heartbeat",
				slog.String("agent_id", id), slog.String("error", err.Error()))
			continue
		}
		res.Notified++
	}
	for _, fn := range d.onConfigApplied {
		fn(st.cfg, secrets)
	}
	d.logger.InfoContext(ctx, "config applied", slog.Int64("config_version", version), slog.Int64("previous_version", prev),
		slog.Int("changes", len(res.Applied)), slog.Int("agents_notified", res.Notified), slog.String("by", sc.Actor))
	return res, nil
}

// swapConfig replaces the running configuration as a whole.
func (d *Control) swapConfig(cfg *config.Config) {
	d.update(func(sn *Snapshot) { sn.Config = cfg })
}

// ConfigShow returns the running configuration as config.json holds it.
// It holds secret names only; values live in secrets.json.
func (d *Control) ConfigShow(ctx context.Context, sc Scope) (json.RawMessage, error) {
	if err := sc.AdminOnly("config show"); err != nil {
		return nil, err
	}
	cfg, _ := d.config()
	data, err := json.Marshal(cfg)
	if err != nil {
		return nil, fmt.Errorf("config show: %w", err)
	}
	return data, nil
}

// SecretList returns the names of the secrets choird runs with, sorted;
// never their values.
func (d *Control) SecretList(ctx context.Context, sc Scope) ([]string, error) {
	if err := sc.AdminOnly("secret list"); err != nil {
		return nil, err
	}
	_, secrets := d.config()
	return secrets.Names(), nil
}
