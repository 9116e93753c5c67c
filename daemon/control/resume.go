package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/sql/seam"
)

// Agents come back by themselves after choird restarts. choird's death
// takes every agent's connection with it, so a choird that starts with a
// runtime resumes each session that was active in a successor session:
// same bindings (DM, workspace, model and the rest, and with them the same
// leases), the same transient model and voice overrides, continuing the
// old session's chain from its acknowledged revision (INIT_HELLO returns
// snapshot and tail). The surviving instance is not adopted: a process
// runtime's children cannot be watched by a choird that is not their
// parent, a container may run an image or a config choird no longer has,
// and the successor loses only the tail that no heartbeat acknowledged,
// as after any crash; undelivered inbox rows are delivered again.
//
// The order keeps crash detection out of it: the live sessions are closed
// (CloseLiveSessions) before River starts, so the crash detection job never
// sees them and sends no crash notice; they are resumed (ResumeSessions)
// once choird serves agents. Each is tried once: a failed resume leaves the
// old session crashed and nothing live, so the next start of choird does
// not try again, and the DM is told what failed and how to start the agent.

// Why a session closed at start-up ended.
const (
	ResumeEndReason   = "choird restarted; resumed in a new session"
	StoppingEndReason = "choird restarted while the session was stopping"
)

// resumeActor is the actor of the starts choird makes on its own.
const resumeActor = "choird (resume after restart)"

// PendingResume is a session that was active when choird last stopped,
// closed at start-up for a successor to resume.
type PendingResume struct {
	SessionID uuid.UUID
	AgentID   string
	Bindings  json.RawMessage
	AckedRev  int64
}

// errAgentRemoved reports a session whose agent config.json no longer has.
var errAgentRemoved = errors.New("it is no longer in config.json")

// CloseLiveSessions closes every session that was live when choird last
// stopped, releases its leases, forgets its replay records and enqueues
// the chunking of its events, all in one transaction; it returns the
// sessions that were active, to resume. It runs only when choird starts a
// runtime: without one, agents started elsewhere keep their sessions and
// reconnect with their lease tokens.
func (d *Control) CloseLiveSessions(ctx context.Context) ([]PendingResume, error) {
	var rows []db.SessionsCloseLiveRow
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		q := seam.Queries(tx)
		var err error
		rows, err = q.SessionsCloseLive(ctx, db.SessionsCloseLiveParams{ActiveReason: ResumeEndReason,
			StoppingReason: StoppingEndReason})
		if err != nil {
			return fmt.Errorf("close the sessions live before choird restarted: %w", err)
		}
		for _, r := range rows {
			if _, err := q.ReplayForgetSession(ctx, r.SessionID); err != nil {
				return fmt.Errorf("forget replays of %s: %w", r.SessionID, err)
			}
			if err := memory.InsertChunkSessionTx(ctx, d.river, tx, r.SessionID); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []PendingResume
	for _, r := range rows {
		d.logger.InfoContext(ctx, "step 7: session live before the restart closed, leases released",
			slog.String("agent_id", r.AgentID), slog.String("session_id", r.SessionID.String()),
			slog.String("status", r.Status), slog.Int("leases_released", int(r.LeasesReleased)),
			slog.Bool("resume", r.Status == "crashed"))
		if r.Status == "crashed" {
			out = append(out, PendingResume{SessionID: r.SessionID, AgentID: r.AgentID, Bindings: r.ResourceBindings,
				AckedRev: r.AckedRev})
		}
	}
	return out, nil
}

// ResumeSessions starts a successor of every pending session, one after
// the other, and tells each one's DM how it went.
func (d *Control) ResumeSessions(ctx context.Context, pending []PendingResume) {
	for i, p := range pending {
		if ctx.Err() != nil {
			d.AbandonResumes(context.WithoutCancel(ctx), pending[i:], errors.New("choird stopped first"))
			return
		}
		st, err := d.resumeSession(ctx, p)
		if err != nil {
			d.logger.ErrorContext(ctx, "step 10: session not resumed", slog.String("agent_id", p.AgentID),
				slog.String("session_id", p.SessionID.String()), slog.String("error", err.Error()))
			d.resumeNotice(context.WithoutCancel(ctx), p, fmt.Sprintf("%s did not come back after choird restarted: %v. "+
				"Everything it had acknowledged is kept; choirctl agent start %s (or /start %s from an admin DM) "+
				"resumes it where it left off.", p.AgentID, err, p.AgentID, p.AgentID))
			continue
		}
		d.logger.InfoContext(ctx, "step 10: session resumed", slog.String("agent_id", p.AgentID),
			slog.String("session_id", st.SessionID), slog.String("resumed_from", p.SessionID.String()),
			slog.Int64("acked_rev", p.AckedRev))
		d.resumeNotice(ctx, p, fmt.Sprintf("%s is back: choird restarted, and it resumed where it left off "+
			"(revision %d) in session %s.", p.AgentID, p.AckedRev, st.SessionID))
	}
}

// resumeSession starts the successor of p with p's bindings, and carries
// p's transient overrides over to it.
func (d *Control) resumeSession(ctx context.Context, p PendingResume) (admin.AgentStatus, error) {
	cfg, _ := d.config()
	if _, ok := cfg.Agents[p.AgentID]; !ok {
		return admin.AgentStatus{}, errAgentRemoved
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(p.Bindings, &b); err != nil {
		return admin.AgentStatus{}, fmt.Errorf("read the bindings of session %s: %w", p.SessionID, err)
	}
	st, err := d.AgentStart(ctx, Scope{Admin: true, Actor: resumeActor, Unattended: true}, p.AgentID, overridesOf(b))
	if err != nil {
		return admin.AgentStatus{}, err
	}
	if err := d.carryOverrides(ctx, p.SessionID, st.SessionID); err != nil {
		// The agent runs; only its transient override is lost.
		d.logger.WarnContext(ctx, "transient overrides not carried to the resumed session", slog.String("agent_id", p.AgentID),
			slog.String("session_id", st.SessionID), slog.String("error", err.Error()))
	}
	return st, nil
}

// overridesOf are the start overrides that bind a new session exactly as
// b binds an old one (restart and resume keep the bindings).
func overridesOf(b rpc.ResourceBindings) admin.StartOverrides {
	return admin.StartOverrides{Workspace: b.Workspace, LLM: b.Models["llm"], VoiceProfile: b.VoiceProfile,
		GitIdentity: b.GitIdentity, Notion: b.Notion, Email: b.Email, DM: b.DM}
}

// carryOverrides sets the transient model and voice overrides of session
// from on session to, those that config.json still defines, and tells the
// agent to fetch its dynamic configuration again. The push is queued even
// before the agent connects, so an agent that fetched before the override
// was set fetches again.
func (d *Control) carryOverrides(ctx context.Context, from uuid.UUID, to string) error {
	q := seam.Queries(d.pool)
	old, err := q.SessionDynamicState(ctx, from)
	if err != nil {
		return fmt.Errorf("read the overrides of %s: %w", from, err)
	}
	cfg, _ := d.config()
	llm, voice := old.LlmOverride, old.VoiceProfileOverride
	if _, ok := cfg.Models[llm]; !ok {
		llm = ""
	}
	if _, ok := cfg.VoiceProfiles[voice]; !ok {
		voice = ""
	}
	if llm == "" && voice == "" {
		return nil
	}
	id, err := uuid.Parse(to)
	if err != nil {
		return err
	}
	if _, err := q.SessionOverrideSet(ctx, db.SessionOverrideSetParams{SessionID: id, Llm: llm, VoiceProfile: voice,
		SetBy: resumeActor + ", from session " + from.String()}); err != nil {
		return fmt.Errorf("set the overrides of %s: %w", to, err)
	}
	if _, err := d.rpc.Push(to, rpc.Push{Kind: rpc.PushConfigChanged,
		ConfigChanged: &rpc.ConfigChanged{ConfigVersion: max(d.runningConfigVersion(), 1)}}); err != nil {
		d.logger.WarnContext(ctx, "config change not pushed; the agent gets it at its next sync", slog.String("session_id", to),
			slog.String("error", err.Error()))
	}
	return nil
}

// AbandonResumes tells the DMs of sessions that choird closed for resuming
// but will not resume, because it stopped or failed first.
func (d *Control) AbandonResumes(ctx context.Context, pending []PendingResume, cause error) {
	for _, p := range pending {
		d.logger.ErrorContext(ctx, "session not resumed", slog.String("agent_id", p.AgentID),
			slog.String("session_id", p.SessionID.String()), slog.String("error", cause.Error()))
		d.resumeNotice(ctx, p, fmt.Sprintf("%s did not come back after choird restarted: %v. "+
			"Everything it had acknowledged is kept; choirctl agent start %s resumes it where it left off.",
			p.AgentID, cause, p.AgentID))
	}
}

// resumeNotice queues text to the DM session p was bound to. It is keyed by
// the session, so it is queued once whatever happens.
func (d *Control) resumeNotice(ctx context.Context, p PendingResume, text string) {
	d.notice(ctx, p, "resume:", text)
}

// notice queues text to the DM session p was bound to, under message id
// prefix plus the session: once per session and prefix.
func (d *Control) notice(ctx context.Context, p PendingResume, prefix, text string) {
	var b rpc.ResourceBindings
	if json.Unmarshal(p.Bindings, &b) != nil || b.DM == "" {
		return
	}
	gw, chat, ok := d.DMAddress(b.DM)
	if !ok {
		d.logger.WarnContext(ctx, "no DM to tell about the resume: it is no longer in config.json", slog.String("agent_id", p.AgentID),
			slog.String("dm", b.DM), slog.String("text", text))
		return
	}
	err := pgx.BeginFunc(ctx, d.pool, func(tx pgx.Tx) error {
		_, err := outbox.EnqueueTx(ctx, tx, d.river, outbox.Params{AgentID: p.AgentID, SessionID: &p.SessionID,
			MessageID: prefix + p.SessionID.String(), Gateway: gw, DM: b.DM, ChatID: chat, Kind: message.Text, Text: text})
		return err
	})
	if err != nil {
		d.logger.WarnContext(ctx, "resume notice not queued", slog.String("session_id", p.SessionID.String()),
			slog.String("error", err.Error()))
	}
}
