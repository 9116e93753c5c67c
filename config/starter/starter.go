// Package starter holds the configurations choirctl init writes: a
// skeleton for a real installation, whose placeholders say what to fill
// in, and a complete local one for trying Choir on one machine.
package starter

import (
	"path/filepath"

	"github.com/choirhq/choir/config"
)

// Skeleton returns the configuration choirctl init writes (spec 6.2): one
// agent "assistant" with a workspace, a model reached through OpenRouter, a
// Telegram bot with an admin DM, the built-in offline embedder and a local
// Postgres, with every tunable at its default.
//
// It does not validate until the user edits it. With no secrets, Validate
// reports exactly:
//
//   - placeholders at $.workspaces.main.path, $.models.default.model and
//     $.dms.admin.user_id (values starting with [Placeholder], which say
//     what to put there);
//   - the missing secrets openrouter-key ($.models.default.secret),
//     telegram-bot-token ($.gateways.telegram.secret) and postgres-admin
//     ($.postgres.secret).
func Skeleton() *config.Config {
	c := &config.Config{
		Workspaces: map[string]config.Workspace{
			"main": {Path: config.Placeholder + ": absolute path of the directory the agent works in"},
		},
		Models: map[string]config.Model{
			"default": {
				Provider: "openrouter",
				Model:    config.Placeholder + ": a model with tool calling, such as anthropic/claude-sonnet-4",
				Endpoint: "https://openrouter.ai/api/v1",
				Secret:   "openrouter-key",
			},
		},
		Embedding: config.Embedding{Provider: config.EmbeddingOffline, Dimensions: 384},
		Gateways: map[string]config.Gateway{
			"telegram": {Type: config.GatewayTelegram, Secret: "telegram-bot-token"},
		},
		DMs: map[string]config.DM{
			"admin": {Gateway: "telegram", UserID: config.Placeholder + ": your numeric Telegram user id", Admin: true},
		},
		Postgres: config.Postgres{Host: "localhost", Port: 5432, Database: "choir", Secret: "postgres-admin"},
		Agents: map[string]config.Agent{
			"assistant": {Defaults: config.AgentDefaults{Workspace: "main", LLM: "default", DM: "admin"}},
		},
	}
	c.ApplyDefaults()
	return c
}

// Local returns a complete, valid configuration for trying Choir on one
// machine without accounts anywhere, as in the README quickstart:
//
//   - workspace "main" at dir/workspaces/main (dir is made absolute);
//   - model "local", an OpenAI-compatible server such as Ollama at
//     http://127.0.0.1:11434/v1 serving llama3.1, with no secret;
//   - the offline embedder with 384 dimensions;
//   - gateway "console" of type console, and an admin DM "console" on it
//     for the user "operator" (choirctl chat);
//   - agent "assistant" using them;
//   - Postgres at pg's host, port, database and sslmode (localhost, 5432
//     and choir where zero), as user postgres with an empty password,
//     through the secret postgres-admin.
//
// It returns the secrets to go with it.
func Local(dir string, pg config.Postgres) (*config.Config, config.Secrets) {
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	if pg.Host == "" {
		pg.Host = "localhost"
	}
	if pg.Port == 0 {
		pg.Port = 5432
	}
	if pg.Database == "" {
		pg.Database = "choir"
	}
	pg.Secret = "postgres-admin"
	c := &config.Config{
		Workspaces: map[string]config.Workspace{
			"main": {Path: filepath.Join(dir, "workspaces", "main")},
		},
		Models: map[string]config.Model{
			"local": {
				Provider: "openai-compatible",
				Model:    "llama3.1",
				Endpoint: "http://127.0.0.1:11434/v1",
			},
		},
		Embedding: config.Embedding{Provider: config.EmbeddingOffline, Dimensions: 384},
		Gateways: map[string]config.Gateway{
			"console": {Type: config.GatewayConsole},
		},
		DMs: map[string]config.DM{
			"console": {Gateway: "console", UserID: "operator", Admin: true},
		},
		Postgres: pg,
		Agents: map[string]config.Agent{
			"assistant": {Defaults: config.AgentDefaults{Workspace: "main", LLM: "local", DM: "console"}},
		},
	}
	c.ApplyDefaults()
	return c, config.Secrets{"postgres-admin": "postgres:"}
}
