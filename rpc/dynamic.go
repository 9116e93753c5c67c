package rpc

import (
	"time"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc/usage"
)

// DynamicConfig is the hot-reloadable part of the configuration an agent
// receives by FETCH_DYNAMIC_CONFIG (spec 16.1): never a secret value, only
// secret names. It travels as FetchDynamicConfigResponse.Config.
type DynamicConfig struct {
	Models                map[string]config.Model          `json:"models"`
	TTS                   map[string]config.TTS            `json:"tts,omitempty"`
	VoiceProfiles         map[string]config.VoiceProfile   `json:"voice_profiles,omitempty"`
	Search                map[string]config.SearchProvider `json:"search,omitempty"`
	GitIdentities         map[string]config.GitIdentity    `json:"git_identities,omitempty"`
	HeartbeatIntervalMS   int64                            `json:"heartbeat_interval_ms"`
	RateLimitRetryMS      int64                            `json:"rate_limit_retry_ms"`
	SessionSummaryTimeout int64                            `json:"session_summary_timeout_ms"`
	SnapshotEveryEvents   int                              `json:"snapshot_every_events"`
	// Budgets are the agent's budgets with the defaults applied (spec
	// 7.6); CompactionThresholdPercent is the share of a model's context
	// window a lane's compactable content may fill (spec 11.3).
	Budgets                    config.Budgets `json:"budgets"`
	CompactionThresholdPercent int            `json:"compaction_threshold_percent"`
	// Web is the web tools' limits and allowlist, defaults applied.
	Web config.Web `json:"web,omitzero"`
	// UntrustedInput is the agent's untrusted-input policy (issue 30).
	UntrustedInput config.UntrustedInput `json:"untrusted_input,omitzero"`
	// LLM and VoiceProfile are the session's current model and voice
	// profile: a transient override (choirctl model set / voice set, spec
	// 17.1) when one is set, else what the session was started with.
	LLM          string `json:"llm,omitempty"`
	VoiceProfile string `json:"voice_profile,omitempty"`
	// Secrets names the secrets the session may fetch now (GET_SECRETS):
	// those bound at its start and those of its current model and voice
	// profile. The agent fetches them again when the list changes, so a
	// switch to another provider's model carries that provider's key. Nil
	// (an older choird) leaves the agent with the list bound at its start.
	Secrets []string `json:"secrets"`

	// NotionIntegrations name each integration's secret; the agent finds
	// its bound one's there (choir.notion.query).
	NotionIntegrations map[string]config.NotionIntegration `json:"notion_integrations,omitempty"`
	// ToolMode is the agent's forced tool injection mode; empty: chosen
	// per session from the model's context window.
	ToolMode string `json:"tool_mode,omitempty"`
	// EmailAccounts are the configured email accounts (servers and policy,
	// never the password); the agent uses the one its session leased.
	EmailAccounts map[string]config.EmailAccount `json:"email_accounts,omitempty"`
	// Usage is what the agent had spent when this was fetched, which its
	// usage caps count on from (nil from an older choird).
	Usage *usage.Baseline `json:"usage,omitempty"`
	// CrashDetectionThresholdMS is choird's crash-detection threshold and
	// OrphanGraceMS the grace choird adds to it: an agent that cannot
	// reach choird for their sum stops by itself, because its session can
	// no longer be adopted (choird marks it crashed and a successor
	// resumes it). Zero (an older choird) leaves the agent with its own
	// bound. They travel here and not in INIT_HELLO's answer because this
	// document is decoded leniently: an older agent ignores them, where
	// its strict decoding of the hello would refuse a field it does not
	// know.
	CrashDetectionThresholdMS int64 `json:"crash_detection_threshold_ms,omitempty"`
	OrphanGraceMS             int64 `json:"orphan_grace_ms,omitempty"`
}

// OrphanAfter is how long an agent may go without reaching choird before
// it stops: the threshold plus the grace, or def when choird said
// nothing.
func (d *DynamicConfig) OrphanAfter(def time.Duration) time.Duration {
	if d == nil || d.CrashDetectionThresholdMS <= 0 {
		return def
	}
	return time.Duration(d.CrashDetectionThresholdMS+max(d.OrphanGraceMS, 0)) * time.Millisecond
}
