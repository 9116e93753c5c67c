package admin

import (
	"net/url"
	"strings"
)

// The admin API's paths, as net/http patterns: choird mounts its handlers
// on them, and Client fills their wildcards (see Fill). An agent's
// approvals have a path of their own rather than GET /v1/approvals?agent=:
// handlers see path values, not the query.
const (
	PathStatus = "/v1/status"

	PathAgents         = "/v1/agents"
	PathAgent          = "/v1/agents/{id}"
	PathAgentStart     = "/v1/agents/{id}/start"
	PathAgentStop      = "/v1/agents/{id}/stop"
	PathAgentRestart   = "/v1/agents/{id}/restart"
	PathAgentBuild     = "/v1/agents/{id}/build"
	PathAgentUpdate    = "/v1/agents/{id}/update"
	PathAgentUpdateAll = "/v1/agents/update-all"
	PathSecretApply    = "/v1/secrets/apply"
	PathSecrets        = "/v1/secrets"
	PathWorkspaces     = "/v1/workspaces"
	PathWorkspaceReset = "/v1/workspaces/{name}/reset"

	PathConfig      = "/v1/config"
	PathConfigLoad  = "/v1/config/load"
	PathConfigDiff  = "/v1/config/diff"
	PathConfigApply = "/v1/config/apply"

	PathChatSend = "/v1/agents/{id}/chat/send"
	PathChatPoll = "/v1/agents/{id}/chat/poll"

	PathSessionList     = "/v1/sessions/list"
	PathSessionReplay   = "/v1/sessions/replay"
	PathSessionCores    = "/v1/agents/{id}/session/cores"
	PathSessionCancel   = "/v1/agents/{id}/session/cancel/{name}"
	PathSessionCompact  = "/v1/agents/{id}/session/compact"
	PathSessionEvents   = "/v1/agents/{id}/session/events"
	PathSessionEventsN  = "/v1/agents/{id}/session/events/{n}"
	PathModels          = "/v1/models"
	PathAgentModel      = "/v1/agents/{id}/model"
	PathVoices          = "/v1/voices"
	PathAgentVoice      = "/v1/agents/{id}/voice"
	PathApprovals       = "/v1/approvals"
	PathAgentApprovals  = "/v1/agents/{id}/approvals"
	PathApproval        = "/v1/approvals/{id}"
	PathApprovalApprove = "/v1/approvals/{id}/approve"
	PathApprovalReject  = "/v1/approvals/{id}/reject"
	PathApprovalAlways  = "/v1/approvals/{id}/always"

	PathMemorySearch        = "/v1/agents/{id}/memory/search"
	PathMemoryShow          = "/v1/agents/{id}/memory/show"
	PathMemoryPut           = "/v1/agents/{id}/memory/put"
	PathMemoryHistory       = "/v1/agents/{id}/memory/history"
	PathMemoryDelete        = "/v1/agents/{id}/memory/delete"
	PathMemoryRestore       = "/v1/agents/{id}/memory/documents/{doc}/restore"
	PathMemorySessions      = "/v1/agents/{id}/memory/sessions/{limit}"
	PathMemorySessionDelete = "/v1/agents/{id}/memory/sessions/{session}/delete"
	PathMemoryReembed       = "/v1/memory/reembed"
	PathMemoryStatus        = "/v1/memory/status"

	PathSchedules      = "/v1/schedules"
	PathAgentSchedules = "/v1/agents/{id}/schedules"
	PathScheduleCancel = "/v1/schedules/{id}/cancel"
	PathSchedulePause  = "/v1/schedules/{id}/pause"
	PathScheduleResume = "/v1/schedules/{id}/resume"
)

// Fill returns pattern with its wildcards ({id}, {name}, ...) replaced, in
// order, by values, each escaped as one path segment (url.PathEscape), so
// that the handler's PathValue gives the value back unchanged. Names and
// ids only: a segment of "." or ".." would be cleaned away by the server's
// routing, so free-form values (a knowledge document's key) go in the
// request body. It panics when the counts differ: that is a programming
// error.
func Fill(pattern string, values ...string) string {
	segs := strings.Split(pattern, "/")
	n := 0
	for i, s := range segs {
		if strings.HasPrefix(s, "{") && strings.HasSuffix(s, "}") {
			if n == len(values) {
				panic("admin.Fill: too few values for " + pattern)
			}
			segs[i] = url.PathEscape(values[n])
			n++
		}
	}
	if n != len(values) {
		panic("admin.Fill: too many values for " + pattern)
	}
	return strings.Join(segs, "/")
}
