package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/starter"
)

func ptr[T any](v T) *T { return &v }

func TestValidate(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name   string
		mutate func(c *config.Config, s config.Secrets)
		want   []string // nil: valid
	}{
		{
			name: "DanglingWorkspace",
			mutate: func(c *config.Config, s config.Secrets) {
				setDefaults(c, "agent-1", func(d *config.AgentDefaults) { d.Workspace = "main" })
			},
			want: []string{`$.agents["agent-1"].defaults.workspace: unknown workspace "main" (defined: main-ws, scratch)`},
		},
		{
			name: "DanglingModel",
			mutate: func(c *config.Config, s config.Secrets) {
				setDefaults(c, "agent-1", func(d *config.AgentDefaults) { d.LLM = "opus" })
			},
			want: []string{`$.agents["agent-1"].defaults.llm: unknown model "opus" (defined: gpt4o, o3, sonnet)`},
		},
		{
			name: "DanglingVoiceProfile",
			mutate: func(c *config.Config, s config.Secrets) {
				setDefaults(c, "agent-1", func(d *config.AgentDefaults) { d.VoiceProfile = "default-fr" })
			},
			want: []string{`$.agents["agent-1"].defaults.voice_profile: unknown voice profile "default-fr" (defined: default-en, narrator)`},
		},
		{
			name: "DanglingGitIdentity",
			mutate: func(c *config.Config, s config.Secrets) {
				setDefaults(c, "agent-1", func(d *config.AgentDefaults) { d.GitIdentity = "x" })
			},
			want: []string{`$.agents["agent-1"].defaults.git_identity: unknown git identity "x" (defined: dev-identity, ops-identity)`},
		},
		{
			name: "DanglingNotion",
			mutate: func(c *config.Config, s config.Secrets) {
				setDefaults(c, "agent-1", func(d *config.AgentDefaults) { d.Notion = "x" })
			},
			want: []string{`$.agents["agent-1"].defaults.notion: unknown notion integration "x" (defined: personal-wiki, work-wiki)`},
		},
		{
			name: "DanglingEmail",
			mutate: func(c *config.Config, s config.Secrets) {
				setDefaults(c, "agent-1", func(d *config.AgentDefaults) { d.Email = "x" })
			},
			want: []string{`$.agents["agent-1"].defaults.email: unknown email account "x" (defined: notifications, primary-email)`},
		},
		{
			name: "DanglingDM",
			mutate: func(c *config.Config, s config.Secrets) {
				setDefaults(c, "agent-1", func(d *config.AgentDefaults) { d.DM = "x" })
			},
			want: []string{`$.agents["agent-1"].defaults.dm: unknown dm "x" (defined: admin-dm, user-dm, work-dm)`},
		},
		{
			name: "DanglingGatewayOfDM",
			mutate: func(c *config.Config, s config.Secrets) {
				c.DMs["user-dm"] = config.DM{Gateway: "bot-home", UserID: "42"}
			},
			want: []string{`$.dms["user-dm"].gateway: unknown gateway "bot-home" (defined: bot-main, bot-work)`},
		},
		{
			name: "DanglingTTSOfVoiceProfile",
			mutate: func(c *config.Config, s config.Secrets) {
				vp := c.VoiceProfiles["narrator"]
				vp.TTS = "polly"
				c.VoiceProfiles["narrator"] = vp
			},
			want: []string{`$.voice_profiles.narrator.tts: unknown tts provider "polly" (defined: eleven)`},
		},
		{
			name: "ReferenceWhenNoneDefined",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Workspaces = map[string]config.Workspace{}
			},
			want: []string{`$.agents["agent-1"].defaults.workspace: unknown workspace "main-ws": no workspaces are defined`},
		},
		{
			name: "RequiredDefaultsMissing",
			mutate: func(c *config.Config, s config.Secrets) {
				setDefaults(c, "agent-1", func(d *config.AgentDefaults) { *d = config.AgentDefaults{} })
			},
			want: []string{
				`$.agents["agent-1"].defaults.workspace: required: name a workspace`,
				`$.agents["agent-1"].defaults.llm: required: name a model`,
				`$.agents["agent-1"].defaults.dm: required: name a dm`,
			},
		},
		{
			name: "OptionalDefaultsMayBeEmpty",
			mutate: func(c *config.Config, s config.Secrets) {
				setDefaults(c, "agent-1", func(d *config.AgentDefaults) {
					d.VoiceProfile, d.GitIdentity, d.Notion, d.Email = "", "", "", ""
				})
			},
		},
		{
			name: "MissingSecretNamedAtEveryReference",
			mutate: func(c *config.Config, s config.Secrets) {
				delete(s, "openrouter-key")
			},
			want: []string{
				`$.models.gpt4o.secret: secret "openrouter-key" is not in secrets.json; set it with: choirctl secret set openrouter-key`,
				`$.models.o3.secret: secret "openrouter-key" is not in secrets.json; *`,
				`$.models.sonnet.secret: secret "openrouter-key" is not in secrets.json; *`,
				`$.embedding.secret: secret "openrouter-key" is not in secrets.json; *`,
			},
		},
		{
			name: "EmptySecretValue",
			mutate: func(c *config.Config, s config.Secrets) {
				s["brave-api-key"] = ""
			},
			want: []string{`$.search.brave.secret: secret "brave-api-key" is empty in secrets.json; set it with: choirctl secret set brave-api-key`},
		},
		{
			name: "RequiredSecretReferenceMissing",
			mutate: func(c *config.Config, s config.Secrets) {
				c.NotionIntegrations["work-wiki"] = config.NotionIntegration{}
				c.Gateways["bot-work"] = config.Gateway{Type: config.GatewayTelegram}
				c.Postgres.Secret = ""
			},
			want: []string{
				`$.notion_integrations["work-wiki"].secret: required: *`,
				`$.gateways["bot-work"].secret: required: *`,
				`$.postgres.secret: required: *`,
			},
		},
		{
			name: "NotionEndpointMustBeAURL",
			mutate: func(c *config.Config, s config.Secrets) {
				ni := c.NotionIntegrations["work-wiki"]
				ni.Endpoint = "api.notion.com"
				c.NotionIntegrations["work-wiki"] = ni
			},
			want: []string{`$.notion_integrations["work-wiki"].endpoint: must be an http or https URL`},
		},
		{
			name: "OptionalSecretsMayBeOmitted",
			mutate: func(c *config.Config, s config.Secrets) {
				for name, m := range c.Models {
					m.Secret = ""
					c.Models[name] = m
				}
				c.Embedding.Secret = ""
				tts := c.TTS["eleven"]
				tts.Secret = ""
				c.TTS["eleven"] = tts
				g := c.GitIdentities["dev-identity"]
				g.Secret = ""
				c.GitIdentities["dev-identity"] = g
			},
		},
		{
			name: "PostgresSecretNotUserPassword",
			mutate: func(c *config.Config, s config.Secrets) {
				s["postgres-admin-creds"] = distinct
			},
			want: []string{`$.postgres.secret: secret "postgres-admin-creds" must have the form user:password (the password may be empty)`},
		},
		{
			name: "CrashThresholdBelowTwiceHeartbeat",
			mutate: func(c *config.Config, s config.Secrets) {
				c.HeartbeatIntervalMS = 6000
			},
			want: []string{`$.crash_detection_threshold_ms: must be at least twice heartbeat_interval_ms (6000), so that one late heartbeat is not taken for a crash`},
		},
		{
			name: "HeartbeatTooFrequent",
			mutate: func(c *config.Config, s config.Secrets) {
				c.HeartbeatIntervalMS = 50
			},
			want: []string{`$.heartbeat_interval_ms: must be at least 100`},
		},
		{
			name: "NegativeTunables",
			mutate: func(c *config.Config, s config.Secrets) {
				c.RateLimitRetryMS = -1
				c.MidTermSessions = -1
				c.SnapshotEveryEvents = -5
			},
			want: []string{
				`$.rate_limit_retry_ms: must be positive (or omitted for the default)`,
				`$.mid_term_sessions: must be positive (or omitted for the default)`,
				`$.snapshot_every_events: must be positive (or omitted for the default)`,
			},
		},
		{
			name: "ZeroTunablesTakeDefaults",
			mutate: func(c *config.Config, s config.Secrets) {
				c.HeartbeatIntervalMS, c.CrashDetectionThresholdMS, c.ApprovalTimeoutMS = 0, 0, 0
			},
		},
		{
			name: "PortsOutOfRange",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Postgres.Port = 0
				e := c.EmailAccounts["primary-email"]
				e.SMTPPort, e.IMAPPort = 65536, -1
				c.EmailAccounts["primary-email"] = e
			},
			want: []string{
				`$.email_accounts["primary-email"].smtp_port: port must be between 1 and 65535`,
				`$.email_accounts["primary-email"].imap_port: port must be between 1 and 65535`,
				`$.postgres.port: port must be between 1 and 65535`,
			},
		},
		{
			name: "VoiceSettingsOutOfRange",
			mutate: func(c *config.Config, s config.Secrets) {
				vp := c.VoiceProfiles["default-en"]
				vp.VoiceSettings = config.VoiceSettings{Stability: 1.1, SimilarityBoost: -0.1, Style: 2, Speed: 0.4}
				c.VoiceProfiles["default-en"] = vp
			},
			want: []string{
				`$.voice_profiles["default-en"].voice_settings.stability: must be between 0 and 1`,
				`$.voice_profiles["default-en"].voice_settings.similarity_boost: must be between 0 and 1`,
				`$.voice_profiles["default-en"].voice_settings.style: must be between 0 and 1`,
				`$.voice_profiles["default-en"].voice_settings.speed: must be between 0.5 and 2`,
			},
		},
		{
			name: "EmailSharingNotInEnum",
			mutate: func(c *config.Config, s config.Secrets) {
				e := c.EmailAccounts["notifications"]
				e.Sharing = "public"
				c.EmailAccounts["notifications"] = e
			},
			want: []string{`$.email_accounts.notifications.sharing: must be "exclusive" or "shared"`},
		},
		{
			name: "BadAgentIDs",
			mutate: func(c *config.Config, s config.Secrets) {
				a := c.Agents["agent-1"]
				c.Agents["Agent1"] = a
				c.Agents["1agent"] = a
				c.Agents[strings.Repeat("a", 41)] = a
			},
			want: []string{
				`$.agents["1agent"]: agent id must match ^[a-z][a-z0-9_-]{0,39}$: it becomes the Postgres schema and role name choir_<id>`,
				`$.agents.Agent1: agent id must match *`,
				`$.agents.` + strings.Repeat("a", 41) + `: agent id must match *`,
			},
		},
		{
			name: "AgentIDsCollideAsSchemaNames",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Agents["agent_1"] = c.Agents["agent-1"]
			},
			want: []string{`$.agents.agent_1: agent ids "agent-1" and "agent_1" both map to the Postgres schema and role choir_agent_1: rename one`},
		},
		{
			name: "BadResourceNames",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Workspaces["Main WS"] = config.Workspace{Path: "/srv/other"}
				c.Search["brave.com"] = c.Search["brave"]
			},
			want: []string{
				`$.workspaces["Main WS"]: workspace name must match ^[a-z][a-z0-9_-]{0,39}$`,
				`$.search["brave.com"]: search provider name must match ^[a-z][a-z0-9_-]{0,39}$`,
			},
		},
		{
			name: "WorkspacePathRelativeOrShared",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Workspaces["scratch"] = config.Workspace{Path: "workspaces/scratch"}
				c.Workspaces["twin"] = config.Workspace{Path: "/var/lib/choir/workspaces/main/"}
			},
			want: []string{
				`$.workspaces.scratch.path: must be an absolute path`,
				`$.workspaces.twin.path: same directory as workspace "main-ws"`,
			},
		},
		{
			name: "TelegramUserIDNotNumeric",
			mutate: func(c *config.Config, s config.Secrets) {
				c.DMs["user-dm"] = config.DM{Gateway: "bot-main", UserID: "@alice"}
				c.DMs["work-dm"] = config.DM{Gateway: "bot-work", UserID: ""}
			},
			want: []string{
				`$.dms["user-dm"].user_id: must be a numeric Telegram user id`,
				`$.dms["work-dm"].user_id: required`,
			},
		},
		{
			name: "DuplicateDMBinding",
			mutate: func(c *config.Config, s config.Secrets) {
				c.DMs["user-dm"] = config.DM{Gateway: "bot-main", UserID: "123456789"}
			},
			want: []string{`$.dms["user-dm"].user_id: same gateway and user as dm "admin-dm": a user has one DM per gateway`},
		},
		{
			name: "GatewayTypes",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Gateways["console"] = config.Gateway{Type: config.GatewayConsole}
				c.Gateways["noisy"] = config.Gateway{Type: config.GatewayConsole, Secret: "tg-bot-main-token"}
				c.Gateways["slack"] = config.Gateway{Type: "slack"}
				c.DMs["me"] = config.DM{Gateway: "console", UserID: "operator", Admin: true}
			},
			want: []string{
				`$.gateways.noisy.secret: a console gateway takes no secret`,
				`$.gateways.slack.type: must be "telegram" or "console"`,
			},
		},
		{
			name: "OfflineEmbeddingNeedsNoEndpointOrSecret",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Embedding = config.Embedding{Provider: config.EmbeddingOffline, Dimensions: 384}
			},
		},
		{
			name: "OfflineEmbeddingRefusesEndpointAndSecret",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Embedding.Provider = config.EmbeddingOffline
			},
			want: []string{
				`$.embedding.endpoint: the offline provider is built in and takes no endpoint`,
				`$.embedding.secret: the offline provider is built in and takes no secret`,
			},
		},
		{
			name: "APIEmbeddingNeedsModelEndpointAndDimensions",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Embedding = config.Embedding{Provider: "openrouter", Dimensions: 3072}
			},
			want: []string{
				`$.embedding.dimensions: must be between 1 and 2000 (the most pgvector's HNSW index takes)`,
				`$.embedding.model: required`,
				`$.embedding.endpoint: required`,
			},
		},
		{
			name: "EmbeddingProviderRequired",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Embedding = config.Embedding{Dimensions: 8}
			},
			want: []string{
				`$.embedding.provider: required: name an embedding provider, or "offline" for the built-in one`,
				`$.embedding.model: required`,
				`$.embedding.endpoint: required`,
			},
		},
		{
			name: "EndpointsMustBeHTTPURLsWithoutCredentials",
			mutate: func(c *config.Config, s config.Secrets) {
				m := c.Models["sonnet"]
				m.Endpoint = "https://user:" + distinct + "@openrouter.ai/api/v1"
				c.Models["sonnet"] = m
				m = c.Models["o3"]
				m.Endpoint = "openrouter.ai/api/v1"
				c.Models["o3"] = m
			},
			want: []string{
				`$.models.o3.endpoint: must be an http or https URL`,
				`$.models.sonnet.endpoint: must not embed credentials: put them in secrets.json and name the secret`,
			},
		},
		{
			name: "ModelParameters",
			mutate: func(c *config.Config, s config.Secrets) {
				m := c.Models["sonnet"]
				m.Temperature = ptr(2.5)
				m.ReasoningEffort = ptr("")
				m.Provider = ""
				c.Models["sonnet"] = m
			},
			want: []string{
				`$.models.sonnet.provider: required`,
				`$.models.sonnet.temperature: must be between 0 and 2`,
				`$.models.sonnet.reasoning_effort: must be null or a non-empty effort such as "medium"`,
			},
		},
		{
			name: "ReasoningEffortNotInEnum",
			mutate: func(c *config.Config, s config.Secrets) {
				m := c.Models["sonnet"]
				m.ReasoningEffort = ptr("extreme")
				c.Models["sonnet"] = m
				m = c.Models["o3"]
				m.ReasoningEffort = ptr("Medium")
				c.Models["o3"] = m
			},
			want: []string{
				`$.models.o3.reasoning_effort: "Medium" is not allowed: must be null or one of none, minimal, low, medium, high, xhigh, max`,
				`$.models.sonnet.reasoning_effort: "extreme" is not allowed: must be null or one of none, minimal, low, medium, high, xhigh, max`,
			},
		},
		{
			name: "CoreLLMUnknown",
			mutate: func(c *config.Config, s config.Secrets) {
				setDefaults(c, "agent-1", func(d *config.AgentDefaults) { d.CoreLLM = "opus" })
			},
			want: []string{`$.agents["agent-1"].defaults.core_llm: unknown model "opus" (defined: gpt4o, o3, sonnet)`},
		},
		{
			name: "BudgetsOutOfRange",
			mutate: func(c *config.Config, s config.Secrets) {
				a := c.Agents["agent-1"]
				a.Budgets = config.Budgets{MaxCoreJobs: -1, PerJobWallTimeMS: 10}
				c.Agents["agent-1"] = a
			},
			want: []string{
				`$.agents["agent-1"].budgets.max_core_jobs: must be positive (or omitted for the default)`,
				`$.agents["agent-1"].budgets.per_job_wall_time_ms: must be at least 1000 (one second)`,
			},
		},
		{
			name: "ContextWindowAndCompactionOutOfRange",
			mutate: func(c *config.Config, s config.Secrets) {
				m := c.Models["sonnet"]
				m.ContextWindow = 100
				c.Models["sonnet"] = m
				c.CompactionThresholdPercent = 99
			},
			want: []string{
				`$.models.sonnet.context_window: must be at least 1024 tokens (or omitted for 128000)`,
				`$.compaction_threshold_percent: must be between 10 and 95 (or omitted for 80)`,
			},
		},
		{
			name: "EveryReasoningEffortAccepted",
			mutate: func(c *config.Config, s config.Secrets) {
				for i, e := range config.ReasoningEfforts {
					c.Models[fmt.Sprintf("effort-%d", i)] = config.Model{Provider: "p", Model: "m", Endpoint: "https://llm.example/v1", ReasoningEffort: ptr(e)}
				}
			},
		},
		{
			name: "OutputFormatNotInEnum",
			mutate: func(c *config.Config, s config.Secrets) {
				vp := c.VoiceProfiles["narrator"]
				vp.OutputFormat = "wav"
				c.VoiceProfiles["narrator"] = vp
			},
			want: []string{`$.voice_profiles.narrator.output_format: "wav" is not allowed: must be one of mp3_22050_32, *`},
		},
		{
			name: "PostgresSocketDirectory",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Postgres.Host = "/var/run/postgresql"
				c.Postgres.SSLMode = "disable"
			},
		},
		{
			name: "PostgresBadHostAndSSLMode",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Postgres.Host = "db one"
				c.Postgres.SSLMode = "on"
				c.Postgres.Database = ""
			},
			want: []string{
				`$.postgres.host: must be a hostname or an IP address`,
				`$.postgres.database: required`,
				`$.postgres.sslmode: must be one of disable, allow, prefer, require, verify-ca, verify-full`,
			},
		},
		{
			name: "PostgresMultipleHosts",
			mutate: func(c *config.Config, s config.Secrets) {
				c.Postgres.Host = "a,b"
			},
			want: []string{`$.postgres.host: must be a single host`},
		},
		{
			name: "RepoHalfSet",
			mutate: func(c *config.Config, s config.Secrets) {
				c.GlobalRepo.Ref = ""
				a := c.Agents["agent-1"]
				a.Repo = config.Repo{Ref: "main"}
				c.Agents["agent-1"] = a
			},
			want: []string{
				`$.global_repo.ref: required when url is set: name a branch, tag or commit`,
				`$.agents["agent-1"].repo.url: required when ref is set`,
			},
		},
		{
			name: "ReposAreOptional",
			mutate: func(c *config.Config, s config.Secrets) {
				c.GlobalRepo = config.Repo{}
				a := c.Agents["agent-1"]
				a.Repo = config.Repo{}
				c.Agents["agent-1"] = a
			},
		},
		{
			name: "GitIdentityEmail",
			mutate: func(c *config.Config, s config.Secrets) {
				c.GitIdentities["dev-identity"] = config.GitIdentity{Name: "Dev", Email: "Dev <dev@choir.local>"}
				c.GitIdentities["ops-identity"] = config.GitIdentity{Email: "not an address"}
			},
			want: []string{
				`$.git_identities["dev-identity"].email: must be a bare email address such as agent@example.com`,
				`$.git_identities["ops-identity"].name: required`,
				`$.git_identities["ops-identity"].email: must be a bare email address such as agent@example.com`,
			},
		},
		{
			name: "GitIdentityRepos",
			mutate: func(c *config.Config, s config.Secrets) {
				g := c.GitIdentities["dev-identity"]
				g.Repos = []string{"choirhq/choir", "choirhq/*", "repo", "owner/../x"}
				c.GitIdentities["dev-identity"] = g
			},
			want: []string{
				`$.git_identities["dev-identity"].repos[2]: want "owner/repo" or "owner/*"`,
				`$.git_identities["dev-identity"].repos[3]: segment "..": want letters, digits, '.', '_' or '-' (and '*' only as the last segment), as in "owner/repo" or "owner/*"`,
			},
		},
		{
			name: "EmailHosts",
			mutate: func(c *config.Config, s config.Secrets) {
				e := c.EmailAccounts["notifications"]
				e.SMTPHost, e.IMAPHost = "", "imap_example!com"
				c.EmailAccounts["notifications"] = e
			},
			want: []string{
				`$.email_accounts.notifications.smtp_host: required`,
				`$.email_accounts.notifications.imap_host: must be a hostname or an IP address`,
			},
		},
		{
			name: "PlaceholderReportedInsteadOfOtherProblems",
			mutate: func(c *config.Config, s config.Secrets) {
				c.DMs["admin-dm"] = config.DM{Gateway: "bot-main", UserID: config.Placeholder + ": your id"}
				c.Workspaces["main-ws"] = config.Workspace{Path: config.Placeholder}
			},
			want: []string{
				`$.workspaces["main-ws"].path: placeholder value: replace it in config.json`,
				`$.dms["admin-dm"].user_id: placeholder value: replace it in config.json`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c, s := specConfig(t), specSecrets()
			tt.mutate(c, s)
			err := c.Validate(s)
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate: %v", err)
				}
				return
			}
			checkProblems(t, problems(t, err), tt.want)
			if strings.Contains(err.Error(), distinct) {
				t.Errorf("error shows a secret value: %v", err)
			}
		})
	}
}

func setDefaults(c *config.Config, id string, f func(*config.AgentDefaults)) {
	a := c.Agents[id]
	f(&a.Defaults)
	c.Agents[id] = a
}

func TestValidateReportsAllProblemsAtOnce(t *testing.T) {
	t.Parallel()

	c, s := specConfig(t), specSecrets()
	delete(s, "tg-bot-work-token")
	s["postgres-admin-creds"] = distinct
	c.Workspaces["scratch"] = config.Workspace{Path: "relative"}
	c.Agents["Bad"] = config.Agent{Defaults: config.AgentDefaults{Workspace: "nope", LLM: "sonnet", DM: "admin-dm"}}
	c.HeartbeatIntervalMS = 9000
	c.DMs["user-dm"] = config.DM{Gateway: "bot-main", UserID: "x"}
	e := c.EmailAccounts["primary-email"]
	e.Sharing = ""
	c.EmailAccounts["primary-email"] = e

	err := c.Validate(s)
	checkProblems(t, problems(t, err), []string{
		`$.workspaces.scratch.path: must be an absolute path`,
		`$.email_accounts["primary-email"].sharing: must be "exclusive" or "shared"`,
		`$.gateways["bot-work"].secret: secret "tg-bot-work-token" is not in secrets.json; *`,
		`$.dms["user-dm"].user_id: must be a numeric Telegram user id`,
		`$.postgres.secret: secret "postgres-admin-creds" must have the form user:password *`,
		`$.agents.Bad: agent id must match *`,
		`$.agents.Bad.defaults.workspace: unknown workspace "nope" *`,
		`$.crash_detection_threshold_ms: must be at least twice heartbeat_interval_ms (9000)*`,
	})
	if got := strings.Count(err.Error(), "\n") + 1; got != 8 {
		t.Errorf("Error() has %d lines, want one per problem:\n%v", got, err)
	}
	if strings.Contains(err.Error(), distinct) {
		t.Errorf("error shows a secret value: %v", err)
	}
}

func TestValidateNilSecretsMeansNone(t *testing.T) {
	t.Parallel()

	c, _ := starter.Local(t.TempDir(), config.Postgres{})
	checkProblems(t, problems(t, c.Validate(nil)), []string{
		`$.postgres.secret: secret "postgres-admin" is not in secrets.json; set it with: choirctl secret set postgres-admin`,
	})
}
