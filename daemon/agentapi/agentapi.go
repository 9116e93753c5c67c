// Package agentapi is choird's side of the agent protocol: the handler of
// every verb an agent sends (hello and recovery from the replica, heartbeat
// replication, secrets, approvals, status, outbound messages, the dynamic
// configuration), the lease-token authentication and the replay store the
// protocol's server uses, and the host tools choird runs for agents
// (memory, sending a file, schedules and reminders).
package agentapi

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/agent/proposal"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/approval"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/daemon/outbox"
	"github.com/choirhq/choir/daemon/outbox/message"
	"github.com/choirhq/choir/daemon/propose"
	"github.com/choirhq/choir/daemon/session"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/usage"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// HostTool executes one host tool for an agent (EXECUTE_HOST_TOOL).
type HostTool func(ctx context.Context, agentID string, input json.RawMessage) (json.RawMessage, error)

// Typing is the typing indicator the agent protocol stops: when a
// session's reply is queued or its edge goes idle.
type Typing interface {
	Stop(sessionID uuid.UUID)
}

// Progress shows core jobs' progress live in their DMs: it takes every
// lane status a live session reports, and must not block.
type Progress interface {
	Report(sessionID uuid.UUID, st rpc.ReportStatusRequest)
}

// Options configure the agent protocol's handlers.
type Options struct {
	Pool   *pgxpool.Pool
	Logger *slog.Logger
	// HeartbeatPool, when set, serves HEARTBEAT alone.
	HeartbeatPool *pgxpool.Pool
	// Config is the running configuration.
	Config func() *control.Snapshot
	// HostTools are the tools choird executes for agents, by name;
	// SendFileTool is added to them.
	HostTools map[string]HostTool
	// Jobs enqueues the work an ended session causes.
	Jobs jobs.Inserter
	// CloseSession drops a session's push stream when it ends.
	CloseSession func(ctx context.Context, sessionID string)
	// HelloDone is told of each successful hello (undelivered inbox rows
	// are pushed to the new session).
	HelloDone func(ctx context.Context, agentID string, sessionID uuid.UUID)
	// Typing is the typing indicator of sessions' chats.
	Typing Typing
	// Progress, when set, shows core jobs' progress live.
	Progress Progress
	// UsageBaseline, when set, is what an agent spent before, sent with
	// its configuration for its usage caps (daemon/usage).
	UsageBaseline func(ctx context.Context, agentID string, sessionID uuid.UUID) (*usage.Baseline, error)
	// Proposals, when set, checks and records choir.propose.* requests.
	Proposals *propose.Proposer
	// Approvals are the registered approval kinds, which say how a
	// request is asked (nil: every request is asked as a plain one).
	Approvals *approval.Registry
}

// API is choird's side of the agent protocol: every verb checked against
// the session and answered from Postgres.
type API struct {
	pool   *pgxpool.Pool
	logger *slog.Logger
	// heartbeatPool, when set, serves HEARTBEAT alone.
	heartbeatPool *pgxpool.Pool
	snapshot      func() *control.Snapshot
	usageBaseline func(ctx context.Context, agentID string, sessionID uuid.UUID) (*usage.Baseline, error)

	mu sync.RWMutex
	// hostTools are the tools choird executes for agents, by name.
	hostTools map[string]HostTool
	// jobs enqueues the work an ended session causes.
	jobs jobs.Inserter
	// closeSession drops a session's push stream when it ends.
	closeSession func(ctx context.Context, sessionID string)
	// helloDone is told of each successful hello.
	helloDone func(ctx context.Context, agentID string, sessionID uuid.UUID)
	// typing is the typing indicator of sessions' chats.
	typing Typing
	// progress shows core jobs' progress live; nil shows nothing.
	progress Progress
	// proposals checks and records proposals; nil files them unchecked.
	proposals *propose.Proposer
	// approvals are the registered approval kinds.
	approvals *approval.Registry
}

var _ rpc.ControlPlaneHandler = (*API)(nil)

// New makes the agent protocol's handlers.
func New(o Options) *API {
	a := &API{pool: o.Pool, logger: o.Logger, heartbeatPool: o.HeartbeatPool, snapshot: o.Config,
		hostTools: map[string]HostTool{}, jobs: o.Jobs, closeSession: o.CloseSession, helloDone: o.HelloDone, typing: o.Typing,
		progress: o.Progress, usageBaseline: o.UsageBaseline, proposals: o.Proposals, approvals: o.Approvals}
	maps.Copy(a.hostTools, o.HostTools)
	a.hostTools[SendFileTool] = a.sendFile
	return a
}

func (a *API) config() (*config.Config, config.Secrets) {
	s := a.snapshot()
	return s.Config, s.Secrets
}

// Config is the configuration the handlers answer with: the control
// layer's running one.
func (a *API) Config() *config.Config {
	cfg, _ := a.config()
	return cfg
}

func sessionUUID(call rpc.Call) (uuid.UUID, error) {
	id, err := uuid.Parse(call.Session.ID)
	if err != nil {
		return uuid.UUID{}, fmt.Errorf("session id %q: %w", call.Session.ID, wire.ErrBadRequest)
	}
	return id, nil
}

func (a *API) bindings(ctx context.Context, id uuid.UUID) (rpc.ResourceBindings, error) {
	b, _, err := a.bindingsAcked(ctx, id)
	return b, err
}

// bindingsAcked returns the session's bindings and the revision its
// replica is acknowledged through.
func (a *API) bindingsAcked(ctx context.Context, id uuid.UUID) (rpc.ResourceBindings, int64, error) {
	s, err := seam.Queries(a.pool).SessionGetByID(ctx, id)
	if err != nil {
		return rpc.ResourceBindings{}, 0, fmt.Errorf("load session %s: %w", id, err)
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(s.ResourceBindings, &b); err != nil {
		return rpc.ResourceBindings{}, 0, fmt.Errorf("session %s bindings: %w", id, err)
	}
	return b, s.AckedRev, nil
}

// HandleInitHello implements rpc.ControlPlaneHandler.
func (a *API) HandleInitHello(ctx context.Context, call rpc.Call, req rpc.InitHelloRequest) (rpc.InitHelloResponse, error) {
	resp, err := HelloWith(ctx, a.pool, a.logger, call, req)
	if err == nil {
		// The agent fetches the secrets its hello lists: none that
		// choird's egress gateway adds itself.
		var st db.SessionDynamicStateRow
		if st, err = seam.Queries(a.pool).SessionDynamicState(ctx, uuid.MustParse(call.Session.ID)); err != nil {
			return rpc.InitHelloResponse{}, fmt.Errorf("load session %s: %w", call.Session.ID, err)
		}
		resp.ResourceBindings.Secrets = sessionSecrets(a.Config(), call.Session.AgentID, resp.ResourceBindings, hasGateway(st.Runtime))
	}
	if err == nil && a.helloDone != nil {
		if id, perr := uuid.Parse(call.Session.ID); perr == nil {
			a.helloDone(context.WithoutCancel(ctx), call.Session.AgentID, id)
		}
	}
	return resp, err
}

// HandleHeartbeat implements rpc.ControlPlaneHandler.
func (a *API) HandleHeartbeat(ctx context.Context, call rpc.Call, req rpc.HeartbeatRequest) (rpc.HeartbeatResponse, error) {
	id, err := sessionUUID(call)
	if err != nil {
		return rpc.HeartbeatResponse{}, err
	}
	resp, err := Replicate(ctx, cmp.Or(a.heartbeatPool, a.pool), id, req)
	if err != nil && (errors.Is(err, ErrChainGap) || errors.Is(err, ErrChainBroken)) {
		a.logger.WarnContext(ctx, "heartbeat rejected", slog.String("session_id", call.Session.ID),
			slog.String("agent_id", call.Session.AgentID), slog.String("error", err.Error()))
	}
	return resp, err
}

// HandleRequestApproval records a pending approval and, in the same
// transaction, queues its notification with [Approve] [Reject] to the
// session's DM and the job that rejects it at its expiry. A replay with the
// same request ID returns the first row and queues nothing.
func (a *API) HandleRequestApproval(ctx context.Context, call rpc.Call, req rpc.ApprovalRequest) (rpc.ApprovalResponse, error) {
	id, err := sessionUUID(call)
	if err != nil {
		return rpc.ApprovalResponse{}, err
	}
	b, err := a.bindings(ctx, id)
	if err != nil {
		return rpc.ApprovalResponse{}, err
	}
	cfg, _ := a.config()
	gw, chat, err := control.OutboundAddress(cfg, b)
	if err != nil {
		return rpc.ApprovalResponse{}, err
	}
	var checked *propose.Checked
	if a.proposals != nil && proposal.IsProposal(req.RequestType) {
		c, err := a.proposals.Check(ctx, call.Session.AgentID, call.Session.ID, req)
		if err != nil {
			a.logger.WarnContext(ctx, "proposal refused before any person saw it", slog.String("agent_id", call.Session.AgentID),
				slog.String("request_type", req.RequestType), slog.String("reason", err.Error()))
			return rpc.ApprovalResponse{}, wire.Errorf(wire.CodeBadRequest, "proposal refused before any person saw it: %v", err)
		}
		checked = &c
		if strings.TrimSpace(req.Summary) == "" {
			req.Summary = c.Summary
		}
	}
	askDM := b.DM
	if req.RequestType == proposal.TypeConfig {
		// A config change is an admin's to decide, whatever DM the agent
		// serves: it is asked where an admin reads it.
		if dm, ok := control.AdminDMFor(cfg, b.DM); ok && dm != b.DM {
			askDM = dm
			gw, chat, _ = control.DMAddressIn(cfg, dm)
		}
	}
	var resp rpc.ApprovalResponse
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		q := seam.Queries(tx)
		row, err := q.ApprovalCreate(ctx, db.ApprovalCreateParams{SessionID: id, AgentID: call.Session.AgentID,
			RequestID: call.RequestID, RequestType: req.RequestType, Summary: req.Summary, Payload: req.Payload,
			ExpiresAt: time.Now().Add(cfg.ApprovalTimeout()), Sources: req.Sources})
		if errors.Is(err, choirsql.ErrNotFound) {
			prev, err := q.ApprovalGetByRequest(ctx, db.ApprovalGetByRequestParams{SessionID: id, RequestID: call.RequestID,
				AgentID: call.Session.AgentID})
			if err != nil {
				return fmt.Errorf("load approval of request %s: %w", call.RequestID, err)
			}
			resp = rpc.ApprovalResponse{ApprovalID: prev.ApprovalID.String(), Status: rpc.ApprovalStatus(prev.Status)}
			return nil
		}
		if err != nil {
			return fmt.Errorf("record approval: %w", err)
		}
		full, err := q.ApprovalGet(ctx, row.ApprovalID)
		if err != nil {
			return fmt.Errorf("load approval %s: %w", row.ApprovalID, err)
		}
		to := approval.Address{Gateway: gw, DM: askDM, ChatID: chat}
		if checked != nil {
			if err := a.proposals.RecordTx(ctx, tx, a.jobs, approval.Of(full), *checked, to); err != nil {
				return err
			}
		}
		if err := a.approvals.RequestTx(ctx, tx, a.jobs, approval.Of(full), to); err != nil {
			return err
		}
		resp = rpc.ApprovalResponse{ApprovalID: row.ApprovalID.String(), Status: rpc.ApprovalStatus(row.Status)}
		return nil
	})
	if err != nil {
		return rpc.ApprovalResponse{}, err
	}
	a.logger.InfoContext(ctx, "approval requested", slog.String("agent_id", call.Session.AgentID),
		slog.String("approval_id", resp.ApprovalID), slog.String("request_type", req.RequestType))
	return resp, nil
}

// HandleReportStatus keeps the lane's latest state for /status, /cores and
// choirctl, and shows a core job's progress live in the session's DM. A
// report of a session that is no longer live changes nothing.
func (a *API) HandleReportStatus(ctx context.Context, call rpc.Call, req rpc.ReportStatusRequest) (rpc.ReportStatusResponse, error) {
	id, err := sessionUUID(call)
	if err != nil {
		return rpc.Ack{}, err
	}
	status, err := json.Marshal(req)
	if err != nil {
		return rpc.Ack{}, err
	}
	n, err := seam.Queries(a.pool).SessionLaneStatusSet(ctx, db.SessionLaneStatusSetParams{SessionID: id,
		Lane: req.Lane, Status: status})
	if err != nil {
		return rpc.Ack{}, fmt.Errorf("record lane status: %w", err)
	}
	if n > 0 && a.progress != nil {
		a.progress.Report(id, req)
	}
	if req.Lane == "edge" && (req.State == "EDGE_IDLE" || req.State == "IDLE") {
		a.typing.Stop(id)
	}
	return rpc.Ack{Ack: true}, nil
}

// HandleTerminateSelf ends the session: leases released, token revoked.
func (a *API) HandleTerminateSelf(ctx context.Context, call rpc.Call, req rpc.TerminateSelfRequest) (rpc.TerminateSelfResponse, error) {
	id, err := sessionUUID(call)
	if err != nil {
		return rpc.Ack{}, err
	}
	if req.BudgetSpent {
		// Marked while the session is live, before its end: an end that
		// fails leaves a mark the rollover reads only on an ended session.
		if err := seam.Queries(a.pool).SessionMarkSuccessorDue(ctx, db.SessionMarkSuccessorDueParams{SessionID: id}); err != nil {
			return rpc.Ack{}, fmt.Errorf("mark session %s's budget used up: %w", id, err)
		}
	}
	if _, err := session.EndSession(ctx, a.pool, a.jobs, id, "ended", "terminated by the agent: "+req.Reason); err != nil {
		return rpc.Ack{}, err
	}
	a.logger.InfoContext(ctx, "session ended by the agent", slog.String("session_id", call.Session.ID),
		slog.String("agent_id", call.Session.AgentID), slog.String("reason", req.Reason))
	if a.closeSession != nil {
		a.closeSession(context.WithoutCancel(ctx), call.Session.ID)
	}
	return rpc.Ack{Ack: true}, nil
}

// dynamicConfig is the hot-reloadable configuration of the agent agentID,
// whose session is bound to b. Of the per-agent resources (email accounts,
// git identities, Notion integrations) it carries only the one the session
// is bound to: another agent's servers, hosts and secret names are none of
// this agent's business.
func dynamicConfig(cfg *config.Config, agentID string, b rpc.ResourceBindings) rpc.DynamicConfig {
	return rpc.DynamicConfig{Models: cfg.Models, TTS: cfg.TTS, VoiceProfiles: cfg.VoiceProfiles, Search: cfg.Search,
		GitIdentities: onlyBound(cfg.GitIdentities, b.GitIdentity), NotionIntegrations: onlyBound(cfg.NotionIntegrations, b.Notion),
		Web: cfg.WebFor(agentID).WithDefaults(), EmailAccounts: onlyBound(cfg.EmailAccounts, b.Email),
		HeartbeatIntervalMS: cfg.HeartbeatInterval().Milliseconds(), RateLimitRetryMS: cfg.RateLimitRetry().Milliseconds(),
		SessionSummaryTimeout: cfg.SessionSummaryTimeout().Milliseconds(), SnapshotEveryEvents: cfg.SnapshotInterval(),
		Budgets: cfg.Agents[agentID].Budgets.WithDefaults(), CompactionThresholdPercent: cfg.CompactionThreshold(),
		ToolMode: cfg.Agents[agentID].ToolMode, UntrustedInput: cfg.Agents[agentID].UntrustedInput,
		CrashDetectionThresholdMS: cfg.CrashDetectionThreshold().Milliseconds(),
		OrphanGraceMS:             OrphanGrace.Milliseconds()}
}

// onlyBound is the entry of m named bound, alone, or nil.
func onlyBound[V any](m map[string]V, bound string) map[string]V {
	v, ok := m[bound]
	if bound == "" || !ok {
		return nil
	}
	return map[string]V{bound: v}
}

// OrphanGrace is what choird adds to its crash-detection threshold to tell
// an agent how long it may go without reaching choird before it stops
// (rpc.DynamicConfig.OrphanAfter). Past the threshold a session is taken
// for crashed as soon as crash detection runs; the grace covers what
// separates that from the threshold when choird itself was down: the
// agent's retry backoff (at most 2 s) and, in a restarted choird, River's
// leader election and the first crash-detection round (about 2 s).
const OrphanGrace = 5 * time.Second

// HandleFetchDynamicConfig returns the full hot-reloadable configuration,
// with the session's current model and voice profile, as one versioned
// blob when the agent's copy is stale: its version is behind, or the
// session's overrides changed since its last fetch (an override changes no
// config version, so the version alone would hide it).
func (a *API) HandleFetchDynamicConfig(ctx context.Context, call rpc.Call, req rpc.FetchDynamicConfigRequest) (rpc.FetchDynamicConfigResponse, error) {
	id, err := sessionUUID(call)
	if err != nil {
		return rpc.FetchDynamicConfigResponse{}, err
	}
	q := seam.Queries(a.pool)
	latest, err := q.ConfigVersionLatest(ctx)
	if err != nil {
		return rpc.FetchDynamicConfigResponse{}, fmt.Errorf("latest config version: %w", err)
	}
	st, err := q.SessionDynamicState(ctx, id)
	if err != nil {
		return rpc.FetchDynamicConfigResponse{}, fmt.Errorf("load session %s: %w", id, err)
	}
	if req.CurrentConfigVersion == latest && st.OverrideRev == st.FetchedRev {
		return rpc.FetchDynamicConfigResponse{ConfigVersion: latest}, nil
	}
	var b rpc.ResourceBindings
	if err := json.Unmarshal(st.ResourceBindings, &b); err != nil {
		return rpc.FetchDynamicConfigResponse{}, fmt.Errorf("session %s bindings: %w", id, err)
	}
	cfg, _ := a.config()
	dc := dynamicConfig(cfg, call.Session.AgentID, b)
	dc.LLM, dc.VoiceProfile = b.Models["llm"], b.VoiceProfile
	if st.LlmOverride != "" {
		dc.LLM = st.LlmOverride
	}
	if st.VoiceProfileOverride != "" {
		dc.VoiceProfile = st.VoiceProfileOverride
	}
	dc.Secrets = sessionSecrets(cfg, call.Session.AgentID, b, hasGateway(st.Runtime))
	if a.usageBaseline != nil {
		if dc.Usage, err = a.usageBaseline(ctx, call.Session.AgentID, id); err != nil {
			return rpc.FetchDynamicConfigResponse{}, err
		}
	}
	out, err := json.Marshal(dc)
	if err != nil {
		return rpc.FetchDynamicConfigResponse{}, err
	}
	if st.OverrideRev != st.FetchedRev {
		// Recorded before the answer leaves: a change made meanwhile has a
		// higher rev and stays unfetched, so the agent is told again.
		if err := q.SessionOverrideFetched(ctx, db.SessionOverrideFetchedParams{SessionID: id, Rev: st.OverrideRev}); err != nil {
			return rpc.FetchDynamicConfigResponse{}, fmt.Errorf("record the overrides fetched by session %s: %w", id, err)
		}
	}
	return rpc.FetchDynamicConfigResponse{ConfigVersion: latest, Config: out}, nil
}

// HandleExecuteHostTool dispatches to the host tool named in the request.
// A tool failure is a result with status error, not a protocol error.
func (a *API) HandleExecuteHostTool(ctx context.Context, call rpc.Call, req rpc.ExecuteHostToolRequest) (rpc.ExecuteHostToolResponse, error) {
	a.mu.RLock()
	fn, ok := a.hostTools[req.ToolName]
	names := make([]string, 0, len(a.hostTools))
	for n := range a.hostTools {
		names = append(names, n)
	}
	a.mu.RUnlock()
	if !ok {
		sort.Strings(names)
		return rpc.ExecuteHostToolResponse{}, fmt.Errorf("no host tool %q (host tools: %s): %w",
			req.ToolName, strings.Join(names, ", "), wire.ErrNotFound)
	}
	if sid, err := uuid.Parse(call.Session.ID); err == nil {
		ctx = withHostCall(ctx, hostCall{sessionID: sid, agentID: call.Session.AgentID, callID: req.CallID,
			key: req.IdempotencyKey, sources: req.Sources})
	}
	out, err := fn(ctx, call.Session.AgentID, req.Input)
	if err != nil {
		// The tool's own failures (bad input, another agent's memory, a
		// full outbox) go back to the model as an error result, not as a
		// protocol error.
		if tf := (*ToolFailure)(nil); errors.As(err, &tf) {
			return rpc.ExecuteHostToolResponse{CallID: req.CallID, Status: rpc.ToolError, Output: tf.Output}, nil
		}
		if errors.Is(err, wire.ErrBadRequest) || errors.Is(err, wire.ErrPermissionDenied) || errors.Is(err, wire.ErrRateLimited) {
			msg, _ := json.Marshal(map[string]string{"error": err.Error()})
			return rpc.ExecuteHostToolResponse{CallID: req.CallID, Status: rpc.ToolError, Output: msg}, nil
		}
		return rpc.ExecuteHostToolResponse{}, fmt.Errorf("host tool %s: %w", req.ToolName, err)
	}
	return rpc.ExecuteHostToolResponse{CallID: req.CallID, Status: rpc.ToolSuccess, Output: out}, nil
}

// HandleSendOutbound queues a message for the user: the outbox row and its
// delivery job in one transaction, addressed to the session's bound DM,
// once per message ID.
//
// A message produced by a committed event is refused until the session's
// replica holds that event (the agent flushes its heartbeat first). The
// outbox thus never runs ahead of the log: whatever dies afterwards, the
// session that resumes from the replica sees the answer in its tail and
// sends it again under the same message ID, which the outbox recognises,
// instead of answering the same inbox row anew. acked_rev only grows, so
// checking it before the insert is as good as checking it within.
func (a *API) HandleSendOutbound(ctx context.Context, call rpc.Call, req rpc.SendOutboundRequest) (rpc.SendOutboundResponse, error) {
	id, err := sessionUUID(call)
	if err != nil {
		return rpc.SendOutboundResponse{}, err
	}
	b, acked, err := a.bindingsAcked(ctx, id)
	if err != nil {
		return rpc.SendOutboundResponse{}, err
	}
	if req.EventRev > acked {
		return rpc.SendOutboundResponse{}, fmt.Errorf("message %s comes from event %d, but the session's log is acknowledged only through %d; "+
			"send a heartbeat that carries the event first: %w", req.MessageID, req.EventRev, acked, wire.ErrConflict)
	}
	cfg, _ := a.config()
	gw, chat, err := control.OutboundAddress(cfg, b)
	if err != nil {
		return rpc.SendOutboundResponse{}, err
	}
	p := outbox.Params{AgentID: call.Session.AgentID, SessionID: &id, MessageID: req.MessageID, Gateway: gw,
		DM: b.DM, ChatID: chat, Kind: string(req.Kind), Text: req.Text, MaxPending: outbox.AgentMaxPending}
	if req.FilePath != "" {
		ws, ok := cfg.Workspaces[b.Workspace]
		if !ok {
			return rpc.SendOutboundResponse{}, fmt.Errorf("the session's workspace %q is no longer configured: %w", b.Workspace, wire.ErrNotFound)
		}
		if p.FilePath, err = message.FilePath(req.FilePath); err != nil {
			return rpc.SendOutboundResponse{}, fmt.Errorf("%w: %w", wire.ErrBadRequest, err)
		}
		p.Workspace = b.Workspace
		if _, err := (message.File{Dir: ws.Path, Path: p.FilePath}).Stat(); err != nil {
			return rpc.SendOutboundResponse{}, fmt.Errorf("file %s to send: %w: %w", req.FilePath, wire.ErrBadRequest, err)
		}
	}
	var q outbox.Queued
	err = pgx.BeginFunc(ctx, a.pool, func(tx pgx.Tx) error {
		q, err = outbox.EnqueueTx(ctx, tx, a.jobs, p)
		return err
	})
	switch {
	case errors.Is(err, outbox.ErrFull):
		return rpc.SendOutboundResponse{}, outboxFull(err)
	case err != nil && fromDatabase(err):
		return rpc.SendOutboundResponse{}, fmt.Errorf("queue message %s: %w", req.MessageID, err)
	case err != nil:
		return rpc.SendOutboundResponse{}, fmt.Errorf("%w: %w", wire.ErrBadRequest, err)
	}
	if req.Kind == rpc.OutboundText {
		a.typing.Stop(id)
	}
	return rpc.SendOutboundResponse{MessageID: req.MessageID, OutboxID: q.Row.OutboxID,
		Status: rpc.OutboundStatus(q.Row.Status), Duplicate: !q.Created}, nil
}

// outboxFullRetry is how long an agent whose outbox is full is asked to
// wait: Telegram sends about a message a second to a chat, so by then a
// message or two has gone out.
const outboxFullRetry = 2 * time.Second

// outboxFull answers a message refused by outbox.ErrFull: rate_limited,
// saying what to do.
func outboxFull(err error) error {
	return &wire.Error{Code: wire.CodeRateLimited, RetryAfter: outboxFullRetry,
		Message: err.Error() + "; wait until some of them are delivered, then send again"}
}
