package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/google/uuid"

	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// The session commands (spec 17.1 "Session", "Model switching"): they act
// on an agent's live session, or read its latest one, and are shared by
// choirctl and the DMs like every control command.

// ErrNotRunning reports a command that needs a live session of an agent
// that has none.
var ErrNotRunning = errors.New("agent is not running")

// Bounds of SessionEvents.
const (
	DefaultSessionEvents = 20
	MaxSessionEvents     = 500
)

// liveSession returns the agent's live session, or an error wrapping
// ErrNotRunning that says how to start it; a regular DM gets only a
// session bound to it.
func (d *Control) liveSession(ctx context.Context, sc Scope, agentID string) (session.Session, error) {
	row, err := seam.Queries(d.pool).SessionGetLiveByAgent(ctx, agentID)
	s := session.Of(row)
	if errors.Is(err, choirsql.ErrNotFound) {
		return s, fmt.Errorf("%w: %s has no live session; start it first", ErrNotRunning, agentID)
	}
	if err != nil {
		return s, fmt.Errorf("load the session of %s: %w", agentID, err)
	}
	if err := sc.AllowSession(s); err != nil {
		return session.Session{}, err
	}
	return s, nil
}

// KnownAgent checks that agentID is configured.
func (d *Control) KnownAgent(agentID string) error {
	cfg, _ := d.config()
	if _, ok := cfg.Agents[agentID]; !ok {
		return fmt.Errorf("%w: agent %q is not in config.json (agents: %s)", session.ErrUnknownResource, agentID,
			strings.Join(sortedKeys(cfg.Agents), ", "))
	}
	return nil
}

// laneStatuses decodes a session's lane_status column, sorted by lane.
func laneStatuses(raw json.RawMessage) ([]admin.LaneStatus, error) {
	m := map[string]admin.LaneStatus{}
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &m); err != nil {
			return nil, fmt.Errorf("decode lane status: %w", err)
		}
	}
	out := make([]admin.LaneStatus, 0, len(m))
	for _, lane := range sortedKeys(m) {
		st := m[lane]
		st.Lane = lane
		out = append(out, st)
	}
	return out, nil
}

// SessionCores lists the core jobs of the agent's live session, or of its
// latest one, from the lane states the agent reports (REPORT_STATUS).
func (d *Control) SessionCores(ctx context.Context, sc Scope, agentID string) (admin.SessionCoresResult, error) {
	if err := sc.Allow(agentID); err != nil {
		return admin.SessionCoresResult{}, err
	}
	if err := d.KnownAgent(agentID); err != nil {
		return admin.SessionCoresResult{}, err
	}
	s, err := seam.Queries(d.pool).SessionLatestByAgent(ctx, agentID)
	if errors.Is(err, choirsql.ErrNotFound) {
		return admin.SessionCoresResult{}, fmt.Errorf("%w: %s has never run", ErrNotRunning, agentID)
	}
	if err != nil {
		return admin.SessionCoresResult{}, fmt.Errorf("load the session of %s: %w", agentID, err)
	}
	if err := sc.AllowSession(session.Of(s)); err != nil {
		return admin.SessionCoresResult{}, err
	}
	lanes, err := laneStatuses(s.LaneStatus)
	if err != nil {
		return admin.SessionCoresResult{}, err
	}
	live := s.Status == "active" || s.Status == "stopping"
	res := admin.SessionCoresResult{AgentID: agentID, SessionID: s.SessionID.String(), Live: live, Cores: []admin.CoreJob{}}
	for _, l := range lanes {
		name, ok := admin.CoreJobName(l.Lane)
		if !ok {
			continue
		}
		res.Cores = append(res.Cores, admin.CoreJob{Name: name, LaneStatus: l, Active: live && !admin.CoreDone(l.State)})
	}
	return res, nil
}

// SessionCancel asks the agent's live session to cancel a core job by name
// at its next safe point, or the edge lane's turn when name is "edge".
// A core job that the session has not reported, or that already ended, is
// refused with the names of the running ones.
func (d *Control) SessionCancel(ctx context.Context, sc Scope, agentID, name string) (admin.SessionRef, error) {
	if err := sc.Allow(agentID); err != nil {
		return admin.SessionRef{}, err
	}
	if err := d.KnownAgent(agentID); err != nil {
		return admin.SessionRef{}, err
	}
	s, err := d.liveSession(ctx, sc, agentID)
	if err != nil {
		return admin.SessionRef{}, err
	}
	cancel := &rpc.Cancel{Scope: rpc.CancelEdge, Reason: "cancelled by " + sc.Actor}
	if name != "edge" {
		cores, err := d.SessionCores(ctx, sc, agentID)
		if err != nil {
			return admin.SessionRef{}, err
		}
		var running []string
		found := false
		for _, c := range cores.Cores {
			if c.Active {
				running = append(running, c.Name)
				found = found || c.Name == name
			}
		}
		if !found {
			list := "none is running"
			if len(running) > 0 {
				list = "running: " + strings.Join(running, ", ")
			}
			return admin.SessionRef{}, fmt.Errorf("%w: %s has no running core job %q (%s; \"edge\" cancels the edge lane's turn)",
				session.ErrUnknownResource, agentID, name, list)
		}
		cancel = &rpc.Cancel{Scope: rpc.CancelCore, JobName: name, Reason: cancel.Reason}
	}
	p := rpc.Push{Kind: rpc.PushCancel, Cancel: cancel}
	if err := p.Validate(); err != nil {
		return admin.SessionRef{}, fmt.Errorf("%w: core job name %q: %w", session.ErrUnknownResource, name, err)
	}
	if _, err := d.rpc.Push(s.ID.String(), p); err != nil {
		return admin.SessionRef{}, fmt.Errorf("tell %s to cancel %s: %w", agentID, name, err)
	}
	d.logger.InfoContext(ctx, "cancel pushed", slog.String("agent_id", agentID), slog.String("session_id", s.ID.String()),
		slog.String("target", name), slog.String("by", sc.Actor))
	return admin.SessionRef{AgentID: agentID, SessionID: s.ID.String(), Target: name}, nil
}

// SessionCompact asks the agent's live session to compact the edge's
// working memory at its next safe point.
func (d *Control) SessionCompact(ctx context.Context, sc Scope, agentID string) (admin.SessionRef, error) {
	if err := sc.Allow(agentID); err != nil {
		return admin.SessionRef{}, err
	}
	if err := d.KnownAgent(agentID); err != nil {
		return admin.SessionRef{}, err
	}
	s, err := d.liveSession(ctx, sc, agentID)
	if err != nil {
		return admin.SessionRef{}, err
	}
	if _, err := d.rpc.Push(s.ID.String(), rpc.Push{Kind: rpc.PushCompact,
		Compact: &rpc.Compact{Reason: "requested by " + sc.Actor}}); err != nil {
		return admin.SessionRef{}, fmt.Errorf("tell %s to compact: %w", agentID, err)
	}
	d.logger.InfoContext(ctx, "compaction pushed", slog.String("agent_id", agentID), slog.String("session_id", s.ID.String()),
		slog.String("by", sc.Actor))
	return admin.SessionRef{AgentID: agentID, SessionID: s.ID.String()}, nil
}

// SessionEvents returns the last n replicated events (n <= 0: the
// default) of the agent's live session, or of its latest one, oldest
// first.
func (d *Control) SessionEvents(ctx context.Context, sc Scope, agentID string, n int) (admin.SessionEventsResult, error) {
	if err := sc.Allow(agentID); err != nil {
		return admin.SessionEventsResult{}, err
	}
	if err := d.KnownAgent(agentID); err != nil {
		return admin.SessionEventsResult{}, err
	}
	if n <= 0 {
		n = DefaultSessionEvents
	}
	if n > MaxSessionEvents {
		return admin.SessionEventsResult{}, fmt.Errorf("at most %d events at once, not %d", MaxSessionEvents, n)
	}
	q := seam.Queries(d.pool)
	s, err := q.SessionLatestByAgent(ctx, agentID)
	if errors.Is(err, choirsql.ErrNotFound) {
		return admin.SessionEventsResult{}, fmt.Errorf("%w: %s has never run", ErrNotRunning, agentID)
	}
	if err != nil {
		return admin.SessionEventsResult{}, fmt.Errorf("load the session of %s: %w", agentID, err)
	}
	if err := sc.AllowSession(session.Of(s)); err != nil {
		return admin.SessionEventsResult{}, err
	}
	rows, err := q.SessionEventsLast(ctx, db.SessionEventsLastParams{SessionID: s.SessionID, MaxRows: int32(n)})
	if err != nil {
		return admin.SessionEventsResult{}, fmt.Errorf("read the events of session %s: %w", s.SessionID, err)
	}
	res := admin.SessionEventsResult{AgentID: agentID, SessionID: s.SessionID.String(),
		Live: s.Status == "active" || s.Status == "stopping", Events: make([]admin.SessionEvent, len(rows))}
	for i, r := range rows {
		res.Events[len(rows)-1-i] = admin.SessionEvent{Rev: r.Rev, CreatedAt: r.CreatedAt, Lane: r.Lane, Type: r.EventType, Digest: r.Digest}
	}
	return res, nil
}

// ModelList lists the named LLM models and TTS providers. Names are no
// secret: every scope may list them.
func (d *Control) ModelList(ctx context.Context, sc Scope) (admin.ModelListResult, error) {
	cfg, _ := d.config()
	res := admin.ModelListResult{Models: []admin.NamedModel{}, TTS: []admin.NamedTTS{}}
	for _, name := range sortedKeys(cfg.Models) {
		m := cfg.Models[name]
		res.Models = append(res.Models, admin.NamedModel{Name: name, Provider: m.Provider, Model: m.Model})
	}
	for _, name := range sortedKeys(cfg.TTS) {
		t := cfg.TTS[name]
		res.TTS = append(res.TTS, admin.NamedTTS{Name: name, Provider: t.Provider, ModelID: t.ModelID})
	}
	return res, nil
}

// VoiceList lists the named voice profiles; every scope may list them.
func (d *Control) VoiceList(ctx context.Context, sc Scope) ([]admin.NamedVoice, error) {
	cfg, _ := d.config()
	out := []admin.NamedVoice{}
	for _, name := range sortedKeys(cfg.VoiceProfiles) {
		v := cfg.VoiceProfiles[name]
		out = append(out, admin.NamedVoice{Name: name, TTS: v.TTS, VoiceID: v.VoiceID})
	}
	return out, nil
}

// ModelGet shows an agent's current LLM model and voice profile.
func (d *Control) ModelGet(ctx context.Context, sc Scope, agentID string) (admin.ModelState, error) {
	if err := sc.Allow(agentID); err != nil {
		return admin.ModelState{}, err
	}
	if err := d.KnownAgent(agentID); err != nil {
		return admin.ModelState{}, err
	}
	if s, err := seam.Queries(d.pool).SessionGetLiveByAgent(ctx, agentID); err == nil {
		if err := sc.AllowSession(session.Of(s)); err != nil {
			return admin.ModelState{}, err
		}
	} else if !errors.Is(err, choirsql.ErrNotFound) {
		return admin.ModelState{}, fmt.Errorf("load the session of %s: %w", agentID, err)
	}
	return d.modelState(ctx, agentID)
}

// VoiceGet shows an agent's current voice profile (and model).
func (d *Control) VoiceGet(ctx context.Context, sc Scope, agentID string) (admin.ModelState, error) {
	return d.ModelGet(ctx, sc, agentID)
}

func (d *Control) modelState(ctx context.Context, agentID string) (admin.ModelState, error) {
	cfg, _ := d.config()
	def := cfg.Agents[agentID].Defaults
	st := admin.ModelState{AgentID: agentID, LLM: def.LLM, VoiceProfile: def.VoiceProfile}
	s, err := seam.Queries(d.pool).SessionGetLiveByAgent(ctx, agentID)
	if errors.Is(err, choirsql.ErrNotFound) {
		return st, nil
	}
	if err != nil {
		return admin.ModelState{}, fmt.Errorf("load the session of %s: %w", agentID, err)
	}
	ds, err := seam.Queries(d.pool).SessionDynamicState(ctx, s.SessionID)
	if err != nil {
		return admin.ModelState{}, fmt.Errorf("load the overrides of session %s: %w", s.SessionID, err)
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(ds.ResourceBindings, &b); err != nil {
		return admin.ModelState{}, fmt.Errorf("session %s bindings: %w", s.SessionID, err)
	}
	st.SessionID, st.Running = s.SessionID.String(), true
	st.LLM, st.VoiceProfile = b.Models["llm"], b.VoiceProfile
	if ds.LlmOverride != "" {
		st.LLM, st.LLMOverridden = ds.LlmOverride, true
	}
	if ds.VoiceProfileOverride != "" {
		st.VoiceProfile, st.VoiceOverridden = ds.VoiceProfileOverride, true
	}
	return st, nil
}

// ModelSet switches the LLM model of an agent's live session until it
// ends (spec 17.1: transient, a restart reverts it); the agent picks it up
// at once, told by push, or at its next config sync.
func (d *Control) ModelSet(ctx context.Context, sc Scope, agentID, llm string) (admin.ModelState, error) {
	cfg, _ := d.config()
	if _, ok := cfg.Models[llm]; !ok {
		if err := sc.Allow(agentID); err != nil {
			return admin.ModelState{}, err
		}
		return admin.ModelState{}, fmt.Errorf("%w: no model %q in config.json (models: %s)", session.ErrUnknownResource, llm,
			strings.Join(sortedKeys(cfg.Models), ", "))
	}
	return d.setOverride(ctx, sc, agentID, llm, "")
}

// VoiceSet switches the voice profile of an agent's live session until it
// ends, as ModelSet does the model.
func (d *Control) VoiceSet(ctx context.Context, sc Scope, agentID, voice string) (admin.ModelState, error) {
	cfg, _ := d.config()
	if _, ok := cfg.VoiceProfiles[voice]; !ok {
		if err := sc.Allow(agentID); err != nil {
			return admin.ModelState{}, err
		}
		valid := "none is configured"
		if len(cfg.VoiceProfiles) > 0 {
			valid = "voice profiles: " + strings.Join(sortedKeys(cfg.VoiceProfiles), ", ")
		}
		return admin.ModelState{}, fmt.Errorf("%w: no voice profile %q in config.json (%s)", session.ErrUnknownResource, voice, valid)
	}
	return d.setOverride(ctx, sc, agentID, "", voice)
}

func (d *Control) setOverride(ctx context.Context, sc Scope, agentID, llm, voice string) (admin.ModelState, error) {
	if err := sc.Allow(agentID); err != nil {
		return admin.ModelState{}, err
	}
	if err := d.KnownAgent(agentID); err != nil {
		return admin.ModelState{}, err
	}
	s, err := d.liveSession(ctx, sc, agentID)
	if err != nil {
		return admin.ModelState{}, fmt.Errorf("%w (an override lasts one session; to change the default, edit defaults in config.json)", err)
	}
	_, err = seam.Queries(d.pool).SessionOverrideSet(ctx, db.SessionOverrideSetParams{SessionID: s.ID, Llm: llm,
		VoiceProfile: voice, SetBy: sc.Actor})
	if errors.Is(err, choirsql.ErrNotFound) {
		return admin.ModelState{}, fmt.Errorf("%w: the session of %s just ended", ErrNotRunning, agentID)
	}
	if err != nil {
		return admin.ModelState{}, fmt.Errorf("record the override of %s: %w", agentID, err)
	}
	// A push that cannot be queued is only logged: the override stays
	// unfetched, and the agent's next FETCH_DYNAMIC_CONFIG (at a config
	// change, or when it sees a gap in its pushes) returns it.
	if _, err := d.rpc.Push(s.ID.String(), rpc.Push{Kind: rpc.PushConfigChanged,
		ConfigChanged: &rpc.ConfigChanged{ConfigVersion: max(d.runningConfigVersion(), 1)}}); err != nil {
		d.logger.WarnContext(ctx, "config change not pushed; the agent gets it at its next sync", slog.String("agent_id", agentID),
			slog.String("error", err.Error()))
	}
	d.logger.InfoContext(ctx, "session override set", slog.String("agent_id", agentID), slog.String("session_id", s.ID.String()),
		slog.String("llm", llm), slog.String("voice_profile", voice), slog.String("by", sc.Actor))
	return d.modelState(ctx, agentID)
}

// SessionStatus reports an agent and the states of its session's lanes:
// what /status shows (spec 19.3: lane states, budgets, skill, uptime).
func (d *Control) SessionStatus(ctx context.Context, sc Scope, agentID string) (admin.SessionStatusResult, error) {
	if err := sc.Allow(agentID); err != nil {
		return admin.SessionStatusResult{}, err
	}
	if err := d.KnownAgent(agentID); err != nil {
		return admin.SessionStatusResult{}, err
	}
	res := admin.SessionStatusResult{AgentStatus: d.LatestStatus(ctx, agentID)}
	if res.SessionID == "" {
		return res, nil
	}
	id, err := uuid.Parse(res.SessionID)
	if err != nil {
		return admin.SessionStatusResult{}, err
	}
	s, err := seam.Queries(d.pool).SessionGetByID(ctx, id)
	if err != nil {
		return admin.SessionStatusResult{}, fmt.Errorf("load session %s: %w", id, err)
	}
	if err := sc.AllowSession(session.Of(s)); err != nil {
		return admin.SessionStatusResult{}, err
	}
	if res.Lanes, err = laneStatuses(s.LaneStatus); err != nil {
		return admin.SessionStatusResult{}, err
	}
	return res, nil
}

// SessionList lists sessions, newest first, with the number of events
// each logged: every agent's for an admin, a regular DM only its agent's.
func (d *Control) SessionList(ctx context.Context, sc Scope, in admin.SessionListRequest) ([]admin.SessionInfo, error) {
	if err := in.Validate(); err != nil {
		return nil, err
	}
	if !sc.Admin && in.AgentID == "" {
		in.AgentID = sc.Agent
	}
	if in.AgentID != "" || !sc.Admin {
		if err := sc.Allow(in.AgentID); err != nil {
			return nil, err
		}
		if err := d.KnownAgent(in.AgentID); err != nil {
			return nil, err
		}
	}
	if in.Limit == 0 {
		in.Limit = 100
	}
	rows, err := seam.Queries(d.pool).SessionList(ctx, db.SessionListParams{AgentID: in.AgentID, Status: in.Status,
		MaxRows: int32(in.Limit)})
	if err != nil {
		return nil, fmt.Errorf("list sessions: %w", err)
	}
	out := make([]admin.SessionInfo, len(rows))
	for i, r := range rows {
		out[i] = admin.SessionInfo{SessionID: r.SessionID.String(), AgentID: r.AgentID, Status: r.Status, StartedAt: r.StartedAt,
			EndedAt: r.EndedAt, EndReason: r.EndReason, Events: r.Events}
	}
	return out, nil
}
