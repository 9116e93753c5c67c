// Package config defines Choir's static configuration: the resources named in
// .choir.d/config.json and the secret values in .choir.d/secrets.json (spec
// section 6.3).
//
// Both files are parsed strictly with [strictjson]: unknown fields, duplicate
// keys and trailing data are errors located by JSON path. [Config.Validate]
// then checks that every named reference resolves, that every referenced
// secret exists and that values are in range, reporting all problems at once
// as an [*Error]. [Load] does all of it for a .choir.d directory, and
// [WriteFiles] writes the files back, secrets.json with mode 0600.
//
// Secret values never appear in errors, logs or formatted output: [Secrets]
// redacts itself, and messages name secrets rather than quote them.
package config

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/choirhq/choir/strictjson"
)

// File names inside a .choir.d directory.
const (
	ConfigFile  = "config.json"
	SecretsFile = "secrets.json"
)

// Defaults of the tunables, applied when a tunable is omitted or zero.
const (
	DefaultHeartbeatIntervalMS       = 5000
	DefaultCrashDetectionThresholdMS = 10000
	DefaultRateLimitRetryMS          = 1000
	DefaultLogArchiveThresholdLines  = 100000
	DefaultApprovalTimeoutMS         = 30 * 60 * 1000
	DefaultSessionSummaryTimeoutMS   = 30 * 1000
	DefaultMidTermSessions           = 10
	DefaultSnapshotEveryEvents       = 100
)

// Config is the content of .choir.d/config.json. Resources are kept in maps
// keyed by their names, which other resources use to refer to them.
type Config struct {
	// GlobalRepo is the shared repository of tools, skills and identity
	// files (spec 6.5). Optional: without it agents get only what their
	// own repository and the base image provide.
	GlobalRepo         Repo                         `json:"global_repo,omitzero"`
	Workspaces         map[string]Workspace         `json:"workspaces"`
	Models             map[string]Model             `json:"models"`
	TTS                map[string]TTS               `json:"tts"`
	VoiceProfiles      map[string]VoiceProfile      `json:"voice_profiles"`
	GitIdentities      map[string]GitIdentity       `json:"git_identities"`
	NotionIntegrations map[string]NotionIntegration `json:"notion_integrations"`
	EmailAccounts      map[string]EmailAccount      `json:"email_accounts"`
	Search             map[string]SearchProvider    `json:"search"`
	Embedding          Embedding                    `json:"embedding"`
	Gateways           map[string]Gateway           `json:"gateways"`
	DMs                map[string]DM                `json:"dms"`
	Postgres           Postgres                     `json:"postgres"`
	// Agents is keyed by agent id, which must be a valid name: it also
	// names the agent's Postgres schema and role (see [SchemaName]).
	Agents map[string]Agent `json:"agents"`
	// Web limits the web tools and opens hosts to them (see [Web]).
	Web Web `json:"web,omitzero"`
	// Console is the operator's web console; nil (no block) serves none.
	Console *Console `json:"console,omitempty"`
	// Caps are the host-wide caps across all agents (see caps.go).
	Caps HostCaps `json:"caps,omitzero"`

	// Tunables. Zero means the default; the accessor methods such as
	// [Config.HeartbeatInterval] apply it, and [Config.ApplyDefaults]
	// writes it into the field.

	// HeartbeatIntervalMS is how often agents heartbeat to choird
	// (default 5000, at least 100).
	HeartbeatIntervalMS int64 `json:"heartbeat_interval_ms"`
	// CrashDetectionThresholdMS is how long choird waits without a
	// heartbeat before it declares an agent crashed (default 10000, at
	// least twice the heartbeat interval so one late heartbeat is not a
	// crash).
	CrashDetectionThresholdMS int64 `json:"crash_detection_threshold_ms"`
	// RateLimitRetryMS is the delay before retrying a rate-limited RPC
	// (default 1000).
	RateLimitRetryMS int64 `json:"rate_limit_retry_ms"`
	// LogArchiveThresholdLines is the length at which an active log file
	// is compressed into logs/archive/ (default 100000).
	LogArchiveThresholdLines int64 `json:"log_archive_threshold_lines"`
	// ApprovalTimeoutMS is how long an approval waits for a decision
	// before it is rejected automatically (default 30 minutes, spec 19.6).
	ApprovalTimeoutMS int64 `json:"approval_timeout_ms"`
	// SessionSummaryTimeoutMS bounds the summary made when a session ends
	// (default 30 seconds).
	SessionSummaryTimeoutMS int64 `json:"session_summary_timeout_ms"`
	// MidTermSessions is how many recent sessions count as mid-term memory
	// (default 10).
	MidTermSessions int `json:"mid_term_sessions"`
	// SnapshotEveryEvents is how many session events choird folds between
	// snapshots (default 100).
	SnapshotEveryEvents int `json:"snapshot_every_events"`
	// CompactionThresholdPercent is the share of a model's context window
	// that a lane's compactable content may fill before it is compacted
	// (default 80, between 10 and 95).
	CompactionThresholdPercent int `json:"compaction_threshold_percent"`
}

// Repo is a git repository and the ref to check out.
type Repo struct {
	URL string `json:"url"`
	Ref string `json:"ref"`
}

// Workspace is a host directory bind-mounted into an agent's container.
type Workspace struct {
	// Path is absolute.
	Path string `json:"path"`
}

// Model is an LLM reachable through an OpenAI-compatible chat completions
// endpoint.
type Model struct {
	Provider string `json:"provider"`
	Model    string `json:"model"`
	// Endpoint is the http or https base URL of the API.
	Endpoint string `json:"endpoint"`
	// Temperature is between 0 and 2; nil leaves it to the provider.
	Temperature *float64 `json:"temperature"`
	// ReasoningEffort is passed through to the provider; nil omits it.
	// It is one of [ReasoningEfforts].
	ReasoningEffort *string `json:"reasoning_effort"`
	// Secret names the API key. Optional: local endpoints may need none.
	Secret string `json:"secret,omitempty"`
	// ContextWindow is the model's context window in tokens (default
	// 128000); compaction keeps each prompt under its threshold share.
	ContextWindow int64 `json:"context_window,omitempty"`
	// Prices price the model's calls when the provider reports no cost
	// (see prices.go); nil leaves such calls unpriced.
	Prices *Prices `json:"prices,omitempty"`
}

// ReasoningEfforts are the values of a model's reasoning_effort: those of
// the OpenAI-compatible chat completions API.
var ReasoningEfforts = []string{"none", "minimal", "low", "medium", "high", "xhigh", "max"}

// OutputFormats are the values of a voice profile's output_format: the
// audio formats of the ElevenLabs text-to-speech API (codec, sample rate,
// bit rate).
var OutputFormats = []string{
	"mp3_22050_32", "mp3_24000_48", "mp3_44100_32", "mp3_44100_64", "mp3_44100_96", "mp3_44100_128", "mp3_44100_192",
	"opus_48000_32", "opus_48000_64", "opus_48000_96", "opus_48000_128", "opus_48000_192",
	"pcm_8000", "pcm_16000", "pcm_22050", "pcm_24000", "pcm_32000", "pcm_44100", "pcm_48000",
	"ulaw_8000", "alaw_8000",
}

// TTS is a text-to-speech provider.
type TTS struct {
	Provider string `json:"provider"`
	ModelID  string `json:"model_id"`
	Endpoint string `json:"endpoint"`
	// Secret names the API key. Optional, as for models.
	Secret string `json:"secret,omitempty"`
	// PricePer1KCharacters is what the provider charges, in US dollars
	// per 1000 characters spoken, e.g. 0.3; zero or omitted leaves speech
	// unpriced (ElevenLabs bills by plan).
	PricePer1KCharacters float64 `json:"price_per_1k_characters,omitempty"`
}

// VoiceProfile is a voice of a TTS provider. OutputFormat is one of
// [OutputFormats].
type VoiceProfile struct {
	// TTS names the provider.
	TTS           string        `json:"tts"`
	VoiceID       string        `json:"voice_id"`
	OutputFormat  string        `json:"output_format"`
	VoiceSettings VoiceSettings `json:"voice_settings"`
}

// VoiceSettings tune a voice. Stability, SimilarityBoost and Style are
// between 0 and 1, Speed between 0.5 and 2.
type VoiceSettings struct {
	Stability       float64 `json:"stability"`
	SimilarityBoost float64 `json:"similarity_boost"`
	Style           float64 `json:"style"`
	UseSpeakerBoost bool    `json:"use_speaker_boost"`
	Speed           float64 `json:"speed"`
}

// GitIdentity is the author of an agent's commits.
type GitIdentity struct {
	Name  string `json:"name"`
	Email string `json:"email"`
	// Secret names the token used to push. Optional: an identity without
	// one can still commit locally.
	Secret string `json:"secret,omitempty"`
	// Hosts are the git remote hosts (host or host:port) the token may be
	// sent to over HTTPS, by the egress gateway's git route, which refuses
	// all others. Empty sends the token nowhere.
	Hosts []string `json:"hosts,omitempty"`
	// Repos are the repositories on those hosts the route serves:
	// "owner/repo" or "owner/*" (internal/repopattern). Empty serves every
	// repository on the hosts.
	Repos []string `json:"repos,omitempty"`
}

// NotionIntegration is a Notion integration token.
type NotionIntegration struct {
	Secret string `json:"secret"`
	// Endpoint is the Notion API root; empty means
	// https://api.notion.com/v1.
	Endpoint string `json:"endpoint,omitempty"`
}

// EmailSharing says whether several agents may use an email account at once.
type EmailSharing string

// The email sharing modes.
const (
	EmailExclusive EmailSharing = "exclusive"
	EmailShared    EmailSharing = "shared"
)

// EmailAccount is a mailbox reached over SMTP and IMAP.
type EmailAccount struct {
	SMTPHost string       `json:"smtp_host"`
	SMTPPort int          `json:"smtp_port"`
	IMAPHost string       `json:"imap_host"`
	IMAPPort int          `json:"imap_port"`
	Sharing  EmailSharing `json:"sharing"`
	// Secret names the credentials.
	Secret string `json:"secret"`
	// EmailPolicy is the sender, the recipients, approval and wake
	// (config/email.go), flat in the account's JSON.
	EmailPolicy
}

// SearchProvider is a web search API such as Brave.
type SearchProvider struct {
	Secret string `json:"secret"`
	// Endpoint overrides the API's base URL (default Brave's,
	// https://api.search.brave.com/res/v1).
	Endpoint string `json:"endpoint,omitempty"`
	// PricePer1KQueries is what the provider charges, in US dollars per
	// 1000 queries, e.g. 5; zero or omitted leaves queries unpriced.
	PricePer1KQueries float64 `json:"price_per_1k_queries,omitempty"`
}

// EmbeddingOffline is the embedding provider built into choird: a
// deterministic lexical embedder for machines without an embedding API. It
// takes no endpoint or secret.
const EmbeddingOffline = "offline"

// MaxEmbeddingDimensions is the largest embedding size accepted. Agent
// schemas index embeddings with pgvector HNSW indexes, which take at most
// 2000 dimensions (see sql/00004_agent_schema.sql).
const MaxEmbeddingDimensions = 2000

// Embedding is the embedding model used for memory.
type Embedding struct {
	// Provider is EmbeddingOffline or the name of an API provider.
	Provider string `json:"provider"`
	// Model is required except for the offline provider.
	Model string `json:"model,omitempty"`
	// Dimensions is between 1 and MaxEmbeddingDimensions.
	Dimensions int `json:"dimensions"`
	// Endpoint is required except for the offline provider.
	Endpoint string `json:"endpoint,omitempty"`
	// Secret names the API key; optional, and not taken by the offline
	// provider.
	Secret string `json:"secret,omitempty"`
	// PricePerMTok is the provider's price in US dollars per million input
	// tokens, e.g. 0.02; zero or omitted leaves embeddings unpriced. Their
	// cost counts against the agent's cost caps.
	PricePerMTok float64 `json:"price_per_mtok,omitempty"`
}

// GatewayType is the kind of channel a gateway connects users through.
type GatewayType string

// The gateway types.
const (
	// GatewayTelegram is a Telegram bot; its secret is the bot token.
	GatewayTelegram GatewayType = "telegram"
	// GatewayConsole is the local console channel of `choirctl chat`. It
	// takes no secret: it is reached through choird's socket.
	GatewayConsole GatewayType = "console"
)

// Gateway is a channel users reach agents through.
type Gateway struct {
	Type   GatewayType `json:"type"`
	Secret string      `json:"secret,omitempty"`
}

// DM binds a user of a gateway. The DMs of a gateway are its allowlist.
type DM struct {
	// Gateway names the gateway.
	Gateway string `json:"gateway"`
	// UserID is the user on that gateway: numeric for Telegram.
	UserID string `json:"user_id"`
	// Admin DMs may use every command, not only those of their agent.
	Admin bool `json:"admin"`
	// TimeZone is the user's IANA time zone ("Europe/Berlin"): the zone
	// of the DM's schedules unless one says otherwise. Empty means UTC.
	TimeZone string `json:"time_zone,omitempty"`
}

// DefaultTimeZone is a DM's time zone when it names none.
const DefaultTimeZone = "UTC"

// Zone is the DM's time_zone, or DefaultTimeZone.
func (d DM) Zone() string {
	if d.TimeZone == "" {
		return DefaultTimeZone
	}
	return d.TimeZone
}

// Postgres locates the database and names the secret holding the admin
// credentials, in the form user:password.
type Postgres struct {
	// Host is a hostname, an IP address or the absolute path of the
	// directory holding the server's Unix socket.
	Host     string `json:"host"`
	Port     int    `json:"port"`
	Database string `json:"database"`
	Secret   string `json:"secret"`
	// SSLMode is a libpq sslmode (disable, allow, prefer, require,
	// verify-ca, verify-full); empty leaves the driver's default.
	SSLMode string `json:"sslmode,omitempty"`
}

// Agent is a configured agent.
type Agent struct {
	// Repo is the agent's own repository (spec 6.5); optional.
	Repo     Repo          `json:"repo,omitzero"`
	Defaults AgentDefaults `json:"defaults"`
	// Budgets bound each session of the agent; omitted budgets take
	// their defaults.
	Budgets Budgets `json:"budgets,omitzero"`
	// SchedulesNeedApproval makes a schedule or reminder the agent
	// creates itself (choir.schedule, choir.remind) wait for a person's
	// approval before it is active. Off by default: a schedule only ever
	// sends the agent a message.
	SchedulesNeedApproval bool `json:"schedules_need_approval,omitempty"`
	// ToolMode forces how the agent's models are offered tools: direct,
	// compact or discovery. Empty chooses from the model's context window
	// (see toolmode.go).
	ToolMode string `json:"tool_mode,omitempty"`
	// MCPSecrets name the secrets the agent's MCP servers (its repo's
	// .choir/mcp.json) send as bearer tokens; they are bound to its
	// sessions.
	MCPSecrets []string `json:"mcp_secrets,omitempty"`
	// MCPServers are the agent's MCP servers over HTTP that take a secret,
	// by their name in its mcp.json; see MCPServer.
	MCPServers map[string]MCPServer `json:"mcp_servers,omitempty"`
	// MemoryReadableBy names the other agents that may read this agent's
	// memory (choir.memory.query with target_agent). Empty, the default:
	// none may.
	MemoryReadableBy []string `json:"memory_readable_by,omitempty"`
	// Web is what the agent's web tools may reach beyond the global web
	// section; see Config.WebFor.
	Web AgentWeb `json:"web,omitzero"`
	// UntrustedInput is what the agent's lanes may do once they have read
	// strangers' words; see UntrustedInput. Omitted: approve.
	UntrustedInput UntrustedInput `json:"untrusted_input,omitzero"`
	// Egress is where the agent's tools may connect through choird's
	// egress gateway; see Egress. Omitted: approve every host.
	Egress Egress `json:"egress,omitzero"`
}

// AgentWeb is an agent's own web settings.
type AgentWeb struct {
	// AllowHosts, when set, replaces web.allow_hosts for this agent's
	// choir.web.fetch and choir.web.browse; an empty list opens nothing.
	// Unset, the agent gets web.allow_hosts.
	AllowHosts []string `json:"allow_hosts,omitempty"`
}

// AgentDefaults name the resources an agent starts with unless overridden
// at start. Workspace, LLM and DM are required; the others may be empty when
// the agent does not use that kind of resource.
type AgentDefaults struct {
	Workspace string `json:"workspace"`
	LLM       string `json:"llm"`
	// CoreLLM is the flagship model of the agent's core jobs; empty means
	// the edge's LLM.
	CoreLLM      string `json:"core_llm,omitempty"`
	VoiceProfile string `json:"voice_profile,omitempty"`
	GitIdentity  string `json:"git_identity,omitempty"`
	Notion       string `json:"notion,omitempty"`
	Email        string `json:"email,omitempty"`
	DM           string `json:"dm"`
}

// NamePattern is what resource names and agent ids must match.
const NamePattern = `^[a-z][a-z0-9_-]{0,39}$`

var nameRE = regexp.MustCompile(NamePattern)

// ValidName reports whether name is a valid resource name or agent id.
func ValidName(name string) bool { return nameRE.MatchString(name) }

// SchemaName returns the name of the Postgres schema, and of the role, that
// hold an agent's memory: choir_ followed by the agent id with '-' replaced
// by '_', so that the name needs no quoting in SQL. It matches the SQL
// function choir_control.agent_schema_name. Two ids differing only in '-'
// versus '_' map to the same schema, which Validate rejects.
func SchemaName(agentID string) string {
	return "choir_" + strings.ReplaceAll(agentID, "-", "_")
}

// Parse parses config.json strictly and applies defaults. It does not
// validate; see [Config.Validate].
func Parse(data []byte) (*Config, error) {
	var c Config
	if err := strictjson.Decode(data, &c, strictjson.Limits{}); err != nil {
		return nil, err
	}
	c.ApplyDefaults()
	return &c, nil
}

// ApplyDefaults replaces zero tunables by their defaults and nil maps by
// empty ones, so that a marshaled configuration shows every section.
func (c *Config) ApplyDefaults() {
	c.HeartbeatIntervalMS = c.HeartbeatInterval().Milliseconds()
	c.CrashDetectionThresholdMS = c.CrashDetectionThreshold().Milliseconds()
	c.RateLimitRetryMS = c.RateLimitRetry().Milliseconds()
	c.LogArchiveThresholdLines = c.LogArchiveThreshold()
	c.ApprovalTimeoutMS = c.ApprovalTimeout().Milliseconds()
	c.SessionSummaryTimeoutMS = c.SessionSummaryTimeout().Milliseconds()
	c.MidTermSessions = c.MidTermSessionCount()
	c.SnapshotEveryEvents = c.SnapshotInterval()
	c.CompactionThresholdPercent = c.CompactionThreshold()
	emptyIfNil(&c.Workspaces)
	emptyIfNil(&c.Models)
	emptyIfNil(&c.TTS)
	emptyIfNil(&c.VoiceProfiles)
	emptyIfNil(&c.GitIdentities)
	emptyIfNil(&c.NotionIntegrations)
	emptyIfNil(&c.EmailAccounts)
	emptyIfNil(&c.Search)
	emptyIfNil(&c.Gateways)
	emptyIfNil(&c.DMs)
	emptyIfNil(&c.Agents)
}

func emptyIfNil[V any](m *map[string]V) {
	if *m == nil {
		*m = map[string]V{}
	}
}

func orDefault[T int | int64](v, def T) T {
	if v == 0 {
		return def
	}
	return v
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }

// HeartbeatInterval returns heartbeat_interval_ms, or its default.
func (c *Config) HeartbeatInterval() time.Duration {
	return ms(orDefault(c.HeartbeatIntervalMS, DefaultHeartbeatIntervalMS))
}

// CrashDetectionThreshold returns crash_detection_threshold_ms, or its
// default.
func (c *Config) CrashDetectionThreshold() time.Duration {
	return ms(orDefault(c.CrashDetectionThresholdMS, DefaultCrashDetectionThresholdMS))
}

// RateLimitRetry returns rate_limit_retry_ms, or its default.
func (c *Config) RateLimitRetry() time.Duration {
	return ms(orDefault(c.RateLimitRetryMS, DefaultRateLimitRetryMS))
}

// LogArchiveThreshold returns log_archive_threshold_lines, or its default.
func (c *Config) LogArchiveThreshold() int64 {
	return orDefault(c.LogArchiveThresholdLines, DefaultLogArchiveThresholdLines)
}

// ApprovalTimeout returns approval_timeout_ms, or its default.
func (c *Config) ApprovalTimeout() time.Duration {
	return ms(orDefault(c.ApprovalTimeoutMS, DefaultApprovalTimeoutMS))
}

// SessionSummaryTimeout returns session_summary_timeout_ms, or its default.
func (c *Config) SessionSummaryTimeout() time.Duration {
	return ms(orDefault(c.SessionSummaryTimeoutMS, DefaultSessionSummaryTimeoutMS))
}

// MidTermSessionCount returns mid_term_sessions, or its default.
func (c *Config) MidTermSessionCount() int {
	return orDefault(c.MidTermSessions, DefaultMidTermSessions)
}

// SnapshotInterval returns snapshot_every_events, or its default.
func (c *Config) SnapshotInterval() int {
	return orDefault(c.SnapshotEveryEvents, DefaultSnapshotEveryEvents)
}

// MarshalIndent renders the configuration as config.json: indented JSON
// ending in a newline, which [Parse] reads back into an equal Config.
func (c *Config) MarshalIndent() ([]byte, error) {
	data, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("marshal config: %w", err)
	}
	return append(data, '\n'), nil
}
