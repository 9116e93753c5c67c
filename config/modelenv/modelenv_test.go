package modelenv_test

import (
	"strings"
	"testing"

	"github.com/choirhq/choir/config/modelenv"
)

func TestModelFromEnv(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                              string
		env                               map[string]string
		ok                                bool
		wantName, model, endpoint, secret string
		wantErr                           string
	}{
		{name: "NoneLeavesTheLocalModel", env: map[string]string{}},
		{name: "OpenAI", env: map[string]string{"OPENAI_API_KEY": "sk-1"}, ok: true,
			wantName: "openai", model: "gpt-4o-mini", endpoint: "https://api.openai.com/v1", secret: "openai-api-key"},
		{name: "OpenRouter", env: map[string]string{"OPENROUTER_API_KEY": "or-1"}, ok: true,
			wantName: "openrouter", model: "openai/gpt-4o-mini", endpoint: "https://openrouter.ai/api/v1", secret: "openrouter-api-key"},
		{name: "OpenAIBeforeOpenRouter", env: map[string]string{"OPENROUTER_API_KEY": "or-1", "OPENAI_API_KEY": "sk-1"}, ok: true,
			wantName: "openai", model: "gpt-4o-mini", endpoint: "https://api.openai.com/v1", secret: "openai-api-key"},
		{name: "ModelOverridesTheDefault", env: map[string]string{"OPENAI_API_KEY": "sk-1", "CHOIR_LLM_MODEL": "gpt-4.1"}, ok: true,
			wantName: "openai", model: "gpt-4.1", endpoint: "https://api.openai.com/v1", secret: "openai-api-key"},
		{name: "ExplicitEndpointFirst", env: map[string]string{"OPENAI_API_KEY": "sk-1", "CHOIR_LLM_URL": "http://llm.test/v1/",
			"CHOIR_LLM_KEY": "k", "CHOIR_LLM_MODEL": "qwen"}, ok: true,
			wantName: "llm", model: "qwen", endpoint: "http://llm.test/v1", secret: "choir-llm-key"},
		{name: "ExplicitEndpointWithoutKey", env: map[string]string{"CHOIR_LLM_URL": "http://llm.test/v1", "CHOIR_LLM_MODEL": "qwen"},
			ok: true, wantName: "llm", model: "qwen", endpoint: "http://llm.test/v1"},
		{name: "EndpointNeedsAModel", env: map[string]string{"CHOIR_LLM_URL": "http://llm.test/v1", "CHOIR_LLM_KEY": "k"},
			wantErr: "CHOIR_LLM_MODEL is not"},
		{name: "EndpointMustBeAURL", env: map[string]string{"CHOIR_LLM_URL": "llm.test", "CHOIR_LLM_MODEL": "m"},
			wantErr: "not an http or https URL"},
		{name: "KeyNeedsAnEndpoint", env: map[string]string{"CHOIR_LLM_KEY": "k", "CHOIR_LLM_MODEL": "m"},
			wantErr: "CHOIR_LLM_URL is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			m, ok, err := modelenv.ModelFromEnv(func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || ok != tc.ok {
				t.Fatalf("ok %t, err %v; want ok %t", ok, err, tc.ok)
			}
			if !ok {
				return
			}
			if m.Name != tc.wantName || m.Model.Model != tc.model || m.Model.Endpoint != tc.endpoint || m.Model.Secret != tc.secret {
				t.Errorf("got %+v", m)
			}
			if env, named := modelenv.ModelKeyEnv[m.Model.Secret]; tc.secret != "" && (!named || tc.env[env] != m.Key) {
				t.Errorf("secret %s maps to %q, whose value is not the key %q", m.Model.Secret, env, m.Key)
			}
		})
	}
}
