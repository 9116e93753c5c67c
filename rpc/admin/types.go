package admin

import (
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/choirhq/choir/rpc/wire"
)

// The request and result types of the control commands (spec 17): agents,
// builds, workspaces, secrets, configuration, chat, sessions, models,
// voices and approvals.

// StartOverrides replace an agent's default resources for one session
// (choirctl agent start flags, /start key=value arguments). Empty keeps the
// default. It is the body of POST PathAgentStart.
type StartOverrides struct {
	Workspace    string `json:"workspace,omitempty"`
	LLM          string `json:"llm,omitempty"`
	VoiceProfile string `json:"voice_profile,omitempty"`
	GitIdentity  string `json:"git_identity,omitempty"`
	Notion       string `json:"notion,omitempty"`
	Email        string `json:"email,omitempty"`
	DM           string `json:"dm,omitempty"`
}

// BuildRequest is the body of POST PathAgentBuild.
type BuildRequest struct {
	Force bool `json:"force,omitempty"`
}

// BuildResult is the outcome of one agent's build (spec 17.3).
type BuildResult struct {
	AgentID string `json:"agent_id"`
	Image   string `json:"image"`
	// Built is false when the image was already up to date.
	Built   bool         `json:"built"`
	Version BuildVersion `json:"version"`
}

// BuildVersion is an agent image's /choir/version.json (spec 15.1), and its
// choir.version label.
type BuildVersion struct {
	AgentID string `json:"agent_id"`
	// ImageVersion is the image's tag: 12 hex digits of the hash of the
	// other fields.
	ImageVersion      string `json:"image_version"`
	GlobalRepoCommit  string `json:"global_repo_commit"`
	AgentRepoCommit   string `json:"agent_repo_commit,omitempty"`
	ToolManifestHash  string `json:"tool_manifest_hash"`
	SkillManifestHash string `json:"skill_manifest_hash"`
	IdentityHash      string `json:"identity_hash"`
	AgentBinaryHash   string `json:"agent_binary_hash"`
	// BaseImage is the base image built from Dockerfile.base.
	BaseImage string `json:"base_image"`
	// OSImage and OSImageID are CHOIR_OS_IMAGE and its image ID, if set.
	OSImage   string `json:"os_image,omitempty"`
	OSImageID string `json:"os_image_id,omitempty"`
	Format    string `json:"format"`
}

// UpdateResult is one agent's outcome in agent update / update-all
// (spec 17.5): built, redeployed, skipped or failed.
type UpdateResult struct {
	AgentID string `json:"agent_id"`
	Image   string `json:"image,omitempty"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

// WorkspaceInfo is one configured workspace and its holder.
type WorkspaceInfo struct {
	Name   string `json:"name"`
	Path   string `json:"path"`
	Holder string `json:"holder,omitempty"`
}

// SecretApplyResult says what secret apply did.
type SecretApplyResult struct {
	Secrets int `json:"secrets"`
	// Notified is how many live agents were told to refresh.
	Notified int `json:"notified"`
}

// ConfigShowResponse is the body of GET PathConfig.
type ConfigShowResponse struct {
	ConfigVersion int64           `json:"config_version"`
	Config        json.RawMessage `json:"config"`
}

// ChatSendRequest is one message from choirctl chat.
type ChatSendRequest struct {
	// MessageID is the client's idempotency key: positive, random per
	// message, reused when the send is retried.
	MessageID int64  `json:"message_id"`
	Text      string `json:"text"`
}

// Validate checks the request.
func (r ChatSendRequest) Validate() error {
	switch {
	case r.MessageID <= 0:
		return errors.New("message_id must be a positive number, unique per message")
	case len(r.Text) == 0:
		return errors.New("text is empty: type a message")
	case len(r.Text) > 1<<20:
		return errors.New("text is longer than 1 MiB")
	}
	return nil
}

// ChatSent is the outcome of a chat send.
type ChatSent struct {
	InboxID int64 `json:"inbox_id"`
	// Pushed is false when the agent is not running: the message waits in
	// the inbox for its next session.
	Pushed    bool `json:"pushed"`
	Duplicate bool `json:"duplicate,omitempty"`
	// After is the outbox cursor at the time of sending: replies to this
	// message come after it.
	After int64 `json:"after"`
}

// ChatPollRequest asks for an agent's messages after a cursor.
type ChatPollRequest struct {
	After int64 `json:"after"`
	// WaitMS is how long to wait for a first message (at most 30 s).
	WaitMS int64 `json:"wait_ms"`
}

// ChatMessage is one message of the agent to its user.
type ChatMessage struct {
	OutboxID  int64     `json:"outbox_id"`
	Kind      string    `json:"kind"`
	Text      string    `json:"text"`
	FilePath  string    `json:"file_path,omitempty"`
	Status    string    `json:"status"`
	CreatedAt time.Time `json:"created_at"`
}

// LaneStatus is a lane's latest REPORT_STATUS.
type LaneStatus struct {
	Lane            string      `json:"lane"`
	State           string      `json:"state"`
	Skill           string      `json:"skill,omitempty"`
	Step            string      `json:"step,omitempty"`
	BudgetRemaining wire.Budget `json:"budget_remaining"`
	// Steps counts the model steps a core job has taken; Progress is its
	// latest progress line.
	Steps    int64  `json:"steps,omitempty"`
	Progress string `json:"progress,omitempty"`
	// Sources are the untrusted sources the lane's context holds (issue
	// 30): a web page, a mail, a Notion page, an MCP server, a received
	// file. Its calls that may act need approval by the agent's
	// untrusted_input policy.
	Sources []string `json:"sources,omitempty"`
}

// CoreJob is one core job of a session, as its lane last reported it.
type CoreJob struct {
	Name string `json:"name"`
	LaneStatus
	// Active is false once the job completed or was terminated.
	Active bool `json:"active"`
}

// SessionCoresResult lists the core jobs of an agent's session.
type SessionCoresResult struct {
	AgentID   string    `json:"agent_id"`
	SessionID string    `json:"session_id"`
	Live      bool      `json:"live"`
	Cores     []CoreJob `json:"cores"`
}

// SessionRef names the session a command acted on.
type SessionRef struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id"`
	// Target is what was acted on: a core job's name, "edge", or empty.
	Target string `json:"target,omitempty"`
}

// SessionEvent is one replicated event, digested for reading.
type SessionEvent struct {
	Rev       int64     `json:"rev"`
	CreatedAt time.Time `json:"created_at"`
	Lane      string    `json:"lane"`
	Type      string    `json:"event_type"`
	Digest    string    `json:"digest"`
}

// SessionEventsResult is the tail of a session's event log, oldest first.
type SessionEventsResult struct {
	AgentID   string         `json:"agent_id"`
	SessionID string         `json:"session_id"`
	Live      bool           `json:"live"`
	Events    []SessionEvent `json:"events"`
}

// SessionStatusResult is an agent's status with the lane states its live
// (or crashed) session last reported (AgentStatus.Lanes).
type SessionStatusResult struct {
	AgentStatus
}

// NamedModel is an LLM model of config.json.
type NamedModel struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	Model    string `json:"model"`
}

// NamedTTS is a text-to-speech provider of config.json.
type NamedTTS struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	ModelID  string `json:"model_id"`
}

// NamedVoice is a voice profile of config.json.
type NamedVoice struct {
	Name    string `json:"name"`
	TTS     string `json:"tts"`
	VoiceID string `json:"voice_id"`
}

// ModelListResult lists the named models and TTS providers.
type ModelListResult struct {
	Models []NamedModel `json:"models"`
	TTS    []NamedTTS   `json:"tts"`
}

// ModelState is an agent's current model and voice profile: a session's
// transient override when set, else what the session started with; for an
// agent that is not running, its configured defaults.
type ModelState struct {
	AgentID   string `json:"agent_id"`
	SessionID string `json:"session_id,omitempty"`
	Running   bool   `json:"running"`
	LLM       string `json:"llm"`
	// LLMOverridden is true when LLM is a transient override (model set).
	LLMOverridden bool   `json:"llm_overridden"`
	VoiceProfile  string `json:"voice_profile,omitempty"`
	// VoiceOverridden is true when VoiceProfile is a transient override.
	VoiceOverridden bool `json:"voice_profile_overridden"`
}

// ModelSetRequest is the body of POST PathAgentModel.
type ModelSetRequest struct {
	LLM string `json:"llm"`
}

// Validate checks that a model is named.
func (r ModelSetRequest) Validate() error {
	if r.LLM == "" {
		return errors.New("llm is empty: name a model of config.json (choirctl model list)")
	}
	return nil
}

// VoiceSetRequest is the body of POST PathAgentVoice.
type VoiceSetRequest struct {
	VoiceProfile string `json:"voice_profile"`
}

// Validate checks that a voice profile is named.
func (r VoiceSetRequest) Validate() error {
	if r.VoiceProfile == "" {
		return errors.New("voice_profile is empty: name a voice profile of config.json (choirctl voice list)")
	}
	return nil
}

// Approval is a pending or resolved approval, as the control layer shows it.
type Approval struct {
	ID          string          `json:"approval_id"`
	AgentID     string          `json:"agent_id"`
	SessionID   string          `json:"session_id"`
	RequestType string          `json:"request_type"`
	Summary     string          `json:"summary"`
	Payload     json.RawMessage `json:"payload"`
	// Status is pending, approved or rejected (a timeout rejects).
	Status     string     `json:"status"`
	CreatedAt  time.Time  `json:"created_at"`
	ExpiresAt  time.Time  `json:"expires_at"`
	ResolvedAt *time.Time `json:"resolved_at,omitempty"`
	// ResolvedBy is "choirctl:uid=<n>", "telegram:<dm>", "console:<session>"
	// or "timeout".
	ResolvedBy string `json:"resolved_by,omitempty"`
}

// DescribeSources says in words what a lane's untrusted sources are:
// "mail from bob@ext.test, https://evil.test/page, the MCP server github".
func DescribeSources(srcs []string) string {
	var out []string
	for _, s := range srcs {
		kind, detail, _ := strings.Cut(s, ":")
		switch {
		case detail == "":
			out = append(out, kind)
		case kind == "mail":
			out = append(out, "mail from "+detail)
		case kind == "web":
			out = append(out, detail)
		case kind == "mcp":
			out = append(out, "the MCP server "+detail)
		case kind == "notion":
			out = append(out, "Notion "+detail)
		case kind == "file":
			out = append(out, "the received file(s) "+detail)
		case kind == "schedule":
			out = append(out, "schedule "+detail)
		default:
			out = append(out, s)
		}
	}
	return strings.Join(out, ", ")
}
