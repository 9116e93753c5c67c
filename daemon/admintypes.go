package daemon

import "github.com/choirhq/choir/rpc/admin"

// The control layer's request and result types are the admin API's, which
// rpc/admin defines for choird and choirctl alike.
type (
	StartOverrides      = admin.StartOverrides
	BuildResult         = admin.BuildResult
	UpdateResult        = admin.UpdateResult
	WorkspaceInfo       = admin.WorkspaceInfo
	SecretApplyResult   = admin.SecretApplyResult
	ConfigShowResponse  = admin.ConfigShowResponse
	ChatSendRequest     = admin.ChatSendRequest
	ChatSent            = admin.ChatSent
	ChatPollRequest     = admin.ChatPollRequest
	ChatMessage         = admin.ChatMessage
	LaneStatus          = admin.LaneStatus
	CoreJob             = admin.CoreJob
	SessionCoresResult  = admin.SessionCoresResult
	SessionRef          = admin.SessionRef
	SessionEvent        = admin.SessionEvent
	SessionEventsResult = admin.SessionEventsResult
	SessionStatusResult = admin.SessionStatusResult
	NamedModel          = admin.NamedModel
	NamedTTS            = admin.NamedTTS
	NamedVoice          = admin.NamedVoice
	ModelListResult     = admin.ModelListResult
	ModelState          = admin.ModelState
	ModelSetRequest     = admin.ModelSetRequest
	VoiceSetRequest     = admin.VoiceSetRequest
	Approval            = admin.Approval
)
