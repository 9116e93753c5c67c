package admin

import (
	"context"
	"errors"
	"net/http"
	"strconv"

	"github.com/google/uuid"

	"github.com/choirhq/choir/config/configdiff"
	"github.com/choirhq/choir/rpc/wire"
)

// The typed client: one method per admin command, each on its path of
// paths.go with its request and result types.

// call sends in to method path and returns the decoded result.
func call[Out any](ctx context.Context, c *Client, method, path string, in any) (Out, error) {
	var out Out
	err := c.Do(ctx, method, path, in, &out)
	return out, err
}

// IsBadRequest reports whether err is choird refusing a request as
// malformed or naming something unknown (code bad_request): what
// choirctl reports as a usage error.
func IsBadRequest(err error) bool {
	var e *wire.Error
	return errors.As(err, &e) && e.Code == wire.CodeBadRequest
}

// AgentList lists every configured agent and its state, sorted by ID.
func (c *Client) AgentList(ctx context.Context) ([]AgentStatus, error) {
	return call[[]AgentStatus](ctx, c, http.MethodGet, PathAgents, nil)
}

// AgentStatus returns an agent's state.
func (c *Client) AgentStatus(ctx context.Context, agentID string) (AgentStatus, error) {
	return call[AgentStatus](ctx, c, http.MethodGet, Fill(PathAgent, agentID), nil)
}

// AgentStart starts an agent, with o replacing its default resources.
func (c *Client) AgentStart(ctx context.Context, agentID string, o StartOverrides) (AgentStatus, error) {
	return call[AgentStatus](ctx, c, http.MethodPost, Fill(PathAgentStart, agentID), o)
}

// AgentStop stops an agent gracefully.
func (c *Client) AgentStop(ctx context.Context, agentID string) (AgentStatus, error) {
	return call[AgentStatus](ctx, c, http.MethodPost, Fill(PathAgentStop, agentID), nil)
}

// AgentRestart stops and starts an agent with the same resources.
func (c *Client) AgentRestart(ctx context.Context, agentID string) (AgentStatus, error) {
	return call[AgentStatus](ctx, c, http.MethodPost, Fill(PathAgentRestart, agentID), nil)
}

// AgentBuild builds an agent's image; force builds even when nothing
// changed.
func (c *Client) AgentBuild(ctx context.Context, agentID string, force bool) (BuildResult, error) {
	return call[BuildResult](ctx, c, http.MethodPost, Fill(PathAgentBuild, agentID), BuildRequest{Force: force})
}

// AgentUpdate builds an agent's image if needed and redeploys it.
func (c *Client) AgentUpdate(ctx context.Context, agentID string) (UpdateResult, error) {
	return call[UpdateResult](ctx, c, http.MethodPost, Fill(PathAgentUpdate, agentID), nil)
}

// AgentUpdateAll builds and redeploys every agent, one after the other.
func (c *Client) AgentUpdateAll(ctx context.Context) ([]UpdateResult, error) {
	return call[[]UpdateResult](ctx, c, http.MethodPost, PathAgentUpdateAll, nil)
}

// SecretApply reloads secrets.json in choird and has running agents
// refresh their secrets.
func (c *Client) SecretApply(ctx context.Context) (SecretApplyResult, error) {
	return call[SecretApplyResult](ctx, c, http.MethodPost, PathSecretApply, nil)
}

// SecretList lists the names of the secrets choird runs with.
func (c *Client) SecretList(ctx context.Context) ([]string, error) {
	return call[[]string](ctx, c, http.MethodGet, PathSecrets, nil)
}

// WorkspaceList lists the workspaces and who leases each.
func (c *Client) WorkspaceList(ctx context.Context) ([]WorkspaceInfo, error) {
	return call[[]WorkspaceInfo](ctx, c, http.MethodGet, PathWorkspaces, nil)
}

// WorkspaceReset deletes a workspace's contents.
func (c *Client) WorkspaceReset(ctx context.Context, name string) (WorkspaceInfo, error) {
	return call[WorkspaceInfo](ctx, c, http.MethodPost, Fill(PathWorkspaceReset, name), nil)
}

// ConfigLoad has choird read, validate and stage .choir.d/, and returns the
// diff against the running config.
func (c *Client) ConfigLoad(ctx context.Context) (configdiff.DiffReport, error) {
	return call[configdiff.DiffReport](ctx, c, http.MethodPost, PathConfigLoad, nil)
}

// ConfigDiff returns the staged config against the running one.
func (c *Client) ConfigDiff(ctx context.Context) (configdiff.DiffReport, error) {
	return call[configdiff.DiffReport](ctx, c, http.MethodGet, PathConfigDiff, nil)
}

// ConfigApply makes the staged config the running one.
func (c *Client) ConfigApply(ctx context.Context) (configdiff.ApplyReport, error) {
	return call[configdiff.ApplyReport](ctx, c, http.MethodPost, PathConfigApply, nil)
}

// ConfigShow returns the config choird runs with (secret names only).
func (c *Client) ConfigShow(ctx context.Context) (ConfigShowResponse, error) {
	return call[ConfigShowResponse](ctx, c, http.MethodGet, PathConfig, nil)
}

// ChatSend puts a message into an agent's inbox, as its DM's user would.
func (c *Client) ChatSend(ctx context.Context, agentID string, in ChatSendRequest) (ChatSent, error) {
	return call[ChatSent](ctx, c, http.MethodPost, Fill(PathChatSend, agentID), in)
}

// ChatPoll returns an agent's messages after a cursor, waiting for the
// first one as in asks.
func (c *Client) ChatPoll(ctx context.Context, agentID string, in ChatPollRequest) ([]ChatMessage, error) {
	return call[[]ChatMessage](ctx, c, http.MethodPost, Fill(PathChatPoll, agentID), in)
}

// SessionCores lists the core jobs of an agent's session.
func (c *Client) SessionCores(ctx context.Context, agentID string) (SessionCoresResult, error) {
	return call[SessionCoresResult](ctx, c, http.MethodGet, Fill(PathSessionCores, agentID), nil)
}

// SessionCancel cancels a core job of an agent's session by name (edge:
// the edge lane's turn).
func (c *Client) SessionCancel(ctx context.Context, agentID, job string) (SessionRef, error) {
	return call[SessionRef](ctx, c, http.MethodPost, Fill(PathSessionCancel, agentID, job), nil)
}

// SessionCompact asks an agent to compact its working memory.
func (c *Client) SessionCompact(ctx context.Context, agentID string) (SessionRef, error) {
	return call[SessionRef](ctx, c, http.MethodPost, Fill(PathSessionCompact, agentID), nil)
}

// SessionEvents returns the last n events of an agent's live or latest
// session; n of 0 asks for choird's default number.
func (c *Client) SessionEvents(ctx context.Context, agentID string, n int) (SessionEventsResult, error) {
	path := Fill(PathSessionEvents, agentID)
	if n != 0 {
		path = Fill(PathSessionEventsN, agentID, strconv.Itoa(n))
	}
	return call[SessionEventsResult](ctx, c, http.MethodGet, path, nil)
}

// ModelList lists the named LLM models and TTS providers.
func (c *Client) ModelList(ctx context.Context) (ModelListResult, error) {
	return call[ModelListResult](ctx, c, http.MethodGet, PathModels, nil)
}

// ModelGet returns an agent's current model and voice profile.
func (c *Client) ModelGet(ctx context.Context, agentID string) (ModelState, error) {
	return call[ModelState](ctx, c, http.MethodGet, Fill(PathAgentModel, agentID), nil)
}

// ModelSet switches a running agent's LLM model until it restarts.
func (c *Client) ModelSet(ctx context.Context, agentID, llm string) (ModelState, error) {
	return call[ModelState](ctx, c, http.MethodPost, Fill(PathAgentModel, agentID), ModelSetRequest{LLM: llm})
}

// VoiceList lists the named voice profiles.
func (c *Client) VoiceList(ctx context.Context) ([]NamedVoice, error) {
	return call[[]NamedVoice](ctx, c, http.MethodGet, PathVoices, nil)
}

// VoiceGet returns an agent's current voice profile (and model).
func (c *Client) VoiceGet(ctx context.Context, agentID string) (ModelState, error) {
	return call[ModelState](ctx, c, http.MethodGet, Fill(PathAgentVoice, agentID), nil)
}

// VoiceSet switches a running agent's voice profile until it restarts.
func (c *Client) VoiceSet(ctx context.Context, agentID, profile string) (ModelState, error) {
	return call[ModelState](ctx, c, http.MethodPost, Fill(PathAgentVoice, agentID), VoiceSetRequest{VoiceProfile: profile})
}

// ApprovalList lists pending approvals, oldest first: every agent's, or
// with agentID one agent's.
func (c *Client) ApprovalList(ctx context.Context, agentID string) ([]Approval, error) {
	path := PathApprovals
	if agentID != "" {
		path = Fill(PathAgentApprovals, agentID)
	}
	return call[[]Approval](ctx, c, http.MethodGet, path, nil)
}

// ApprovalShow returns an approval.
func (c *Client) ApprovalShow(ctx context.Context, id string) (Approval, error) {
	return call[Approval](ctx, c, http.MethodGet, Fill(PathApproval, id), nil)
}

// ApprovalApprove approves a pending approval.
func (c *Client) ApprovalApprove(ctx context.Context, id string) (Approval, error) {
	return call[Approval](ctx, c, http.MethodPost, Fill(PathApprovalApprove, id), nil)
}

// ApprovalAlways approves a pending approval for good (an egress host:
// allowed from then on).
func (c *Client) ApprovalAlways(ctx context.Context, id string) (Approval, error) {
	return call[Approval](ctx, c, http.MethodPost, Fill(PathApprovalAlways, id), nil)
}

// ApprovalReject rejects a pending approval.
func (c *Client) ApprovalReject(ctx context.Context, id string) (Approval, error) {
	return call[Approval](ctx, c, http.MethodPost, Fill(PathApprovalReject, id), nil)
}

// MemorySearch searches an agent's session memory or knowledge.
func (c *Client) MemorySearch(ctx context.Context, agentID string, in MemorySearchRequest) (MemoryQueryResult, error) {
	return call[MemoryQueryResult](ctx, c, http.MethodPost, Fill(PathMemorySearch, agentID), in)
}

// MemoryShow returns the knowledge document ref names (by key or id), else
// the memory chunk or the session of that id.
func (c *Client) MemoryShow(ctx context.Context, agentID, ref string) (MemoryItem, error) {
	return call[MemoryItem](ctx, c, http.MethodPost, Fill(PathMemoryShow, agentID), MemoryRef{Ref: ref})
}

// MemoryPut writes text as the agent's knowledge document with key, as
// the operator: a new document, a new version, or nothing when unchanged.
func (c *Client) MemoryPut(ctx context.Context, agentID string, in MemoryPutRequest) (MemoryWriteResult, error) {
	return call[MemoryWriteResult](ctx, c, http.MethodPost, Fill(PathMemoryPut, agentID), in)
}

// IsNotFound reports whether err is choird saying the named object does
// not exist (code not_found).
func IsNotFound(err error) bool {
	var e *wire.Error
	return errors.As(err, &e) && e.Code == wire.CodeNotFound
}

// IsConflict reports whether err is choird refusing a request that
// conflicts with the current state (code conflict), such as a knowledge
// write that expected a version the document is no longer at.
func IsConflict(err error) bool {
	var e *wire.Error
	return errors.As(err, &e) && e.Code == wire.CodeConflict
}

// MemorySessions lists the sessions in an agent's memory, newest first.
func (c *Client) MemorySessions(ctx context.Context, agentID string, limit int) ([]MemorySession, error) {
	return call[[]MemorySession](ctx, c, http.MethodGet, Fill(PathMemorySessions, agentID, strconv.Itoa(limit)), nil)
}

// MemoryHistory lists every version of a knowledge document, newest first.
func (c *Client) MemoryHistory(ctx context.Context, agentID, ref string) ([]MemoryKnowledgeVersion, error) {
	return call[[]MemoryKnowledgeVersion](ctx, c, http.MethodPost, Fill(PathMemoryHistory, agentID), MemoryRef{Ref: ref})
}

// MemoryDelete deletes a knowledge document by key or id (its history is
// kept).
func (c *Client) MemoryDelete(ctx context.Context, agentID, ref string) (MemoryWriteResult, error) {
	return call[MemoryWriteResult](ctx, c, http.MethodPost, Fill(PathMemoryDelete, agentID), MemoryRef{Ref: ref})
}

// MemoryRestore makes a version of a knowledge document current again.
func (c *Client) MemoryRestore(ctx context.Context, agentID string, documentID uuid.UUID, version int) (MemoryWriteResult, error) {
	return call[MemoryWriteResult](ctx, c, http.MethodPost, Fill(PathMemoryRestore, agentID, documentID.String()),
		MemoryRestoreRequest{Version: version})
}

// MemorySessionDelete deletes a session's chunks, vectors and event
// references from an agent's memory.
func (c *Client) MemorySessionDelete(ctx context.Context, agentID string, sessionID uuid.UUID) (MemorySessionDeleted, error) {
	return call[MemorySessionDeleted](ctx, c, http.MethodPost, Fill(PathMemorySessionDelete, agentID, sessionID.String()), nil)
}

// MemoryReembed re-embeds agents' memory with choird's embedder.
func (c *Client) MemoryReembed(ctx context.Context, in MemoryReembedRequest) ([]MemoryReembedResult, error) {
	return call[[]MemoryReembedResult](ctx, c, http.MethodPost, PathMemoryReembed, in)
}

// MemoryStatus returns the embedder and the documents waiting for vectors.
func (c *Client) MemoryStatus(ctx context.Context) (MemoryReport, error) {
	return call[MemoryReport](ctx, c, http.MethodGet, PathMemoryStatus, nil)
}
