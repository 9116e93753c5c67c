// Package modelenv finds a real model in the environment for choirctl
// init --local and make demo: OPENAI_API_KEY, OPENROUTER_API_KEY, or
// CHOIR_LLM_URL with CHOIR_LLM_MODEL and CHOIR_LLM_KEY.
package modelenv

import (
	"errors"
	"fmt"
	"strings"

	"github.com/choirhq/choir/config"
)

// A real model from the environment: choirctl init --local uses the first
// of these that is set, instead of the local endpoint that only works when
// an Ollama server runs. The key goes into secrets.json under a name
// derived from its environment variable (OPENAI_API_KEY becomes
// openai-api-key), never into config.json; ModelKeyEnv maps the name back,
// so that choird, when the provider rejects the key, names the variable it
// came from. Strict JSON has no comments, and a field recording where a
// secret came from would be one more thing to keep true; the name is
// enough.

// EnvModel is the model an environment names.
type EnvModel struct {
	// Name is the model's name in config.json: openai, openrouter or llm.
	Name  string
	Model config.Model
	// Key is the API key, stored in secrets.json as Model.Secret; empty
	// for an endpoint that needs none (CHOIR_LLM_URL without CHOIR_LLM_KEY).
	Key string
	// From names the environment variables it came from.
	From string
}

// ModelKeyEnv maps the name of a model's key in secrets.json to the
// environment variable choirctl init --local took it from.
var ModelKeyEnv = map[string]string{
	"openai-api-key":     "OPENAI_API_KEY",
	"openrouter-api-key": "OPENROUTER_API_KEY",
	"choir-llm-key":      "CHOIR_LLM_KEY",
}

// ModelEnvHelp says how to give choird a real model, in one sentence.
const ModelEnvHelp = "set OPENAI_API_KEY, OPENROUTER_API_KEY, or CHOIR_LLM_URL with CHOIR_LLM_MODEL (and CHOIR_LLM_KEY) " +
	"before choirctl init --local; or add a model to config.json with its key in secrets.json (choirctl secret set <name>)"

// ModelFromEnv returns the model getenv names, and false when it names
// none. CHOIR_LLM_URL comes first (an explicit endpoint), then
// OPENAI_API_KEY, then OPENROUTER_API_KEY; CHOIR_LLM_MODEL, when set,
// replaces the default model of the last two (gpt-4o-mini). An incomplete
// CHOIR_LLM_* is an error naming what is missing.
func ModelFromEnv(getenv func(string) string) (EnvModel, bool, error) {
	model := func(def string) string {
		if m := strings.TrimSpace(getenv("CHOIR_LLM_MODEL")); m != "" {
			return m
		}
		return def
	}
	key := func(name string) string { return strings.TrimSpace(getenv(name)) }
	switch {
	case key("CHOIR_LLM_URL") != "":
		url := key("CHOIR_LLM_URL")
		if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
			return EnvModel{}, false, fmt.Errorf("CHOIR_LLM_URL %q is not an http or https URL (e.g. https://api.example.com/v1)", url)
		}
		if key("CHOIR_LLM_MODEL") == "" {
			return EnvModel{}, false, errors.New("CHOIR_LLM_URL is set but CHOIR_LLM_MODEL is not: set it to the model's name at that endpoint")
		}
		m := EnvModel{Name: "llm", Model: config.Model{Provider: "openai-compatible", Model: model(""), Endpoint: strings.TrimRight(url, "/")},
			From: "CHOIR_LLM_URL and CHOIR_LLM_MODEL"}
		if k := key("CHOIR_LLM_KEY"); k != "" {
			m.Key, m.Model.Secret, m.From = k, "choir-llm-key", "CHOIR_LLM_URL, CHOIR_LLM_MODEL and CHOIR_LLM_KEY"
		}
		return m, true, nil
	case key("CHOIR_LLM_KEY") != "" || key("CHOIR_LLM_MODEL") != "" && key("OPENAI_API_KEY") == "" && key("OPENROUTER_API_KEY") == "":
		return EnvModel{}, false, errors.New("CHOIR_LLM_KEY or CHOIR_LLM_MODEL is set but CHOIR_LLM_URL is not: set it to the endpoint's base URL (e.g. https://api.example.com/v1)")
	case key("OPENAI_API_KEY") != "":
		return EnvModel{Name: "openai", Model: config.Model{Provider: "openai", Model: model("gpt-4o-mini"),
			Endpoint: "https://api.openai.com/v1", Secret: "openai-api-key"}, Key: key("OPENAI_API_KEY"), From: "OPENAI_API_KEY"}, true, nil
	case key("OPENROUTER_API_KEY") != "":
		return EnvModel{Name: "openrouter", Model: config.Model{Provider: "openrouter", Model: model("openai/gpt-4o-mini"),
			Endpoint: "https://openrouter.ai/api/v1", Secret: "openrouter-api-key"}, Key: key("OPENROUTER_API_KEY"),
			From: "OPENROUTER_API_KEY"}, true, nil
	}
	return EnvModel{}, false, nil
}

// UseModel makes m the only model of a local configuration, the one its
// agents talk to, with its key in s.
func UseModel(c *config.Config, s config.Secrets, m EnvModel) {
	c.Models = map[string]config.Model{m.Name: m.Model}
	for id, a := range c.Agents {
		a.Defaults.LLM = m.Name
		c.Agents[id] = a
	}
	if m.Key != "" {
		s[m.Model.Secret] = m.Key
	}
	c.ApplyDefaults()
}
