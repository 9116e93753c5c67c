package agentapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// TestOverrideBindsItsSecret checks that a session's model and voice
// overrides (/model llm, /voice) let its agent fetch the new provider's
// secret, and list it in the dynamic configuration, which tells the agent
// to fetch it; before the override the same secret is refused.
func TestOverrideBindsItsSecret(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{Edit: func(c *config.Config, secrets config.Secrets) {
		choirdtest.FastHeartbeat(c, secrets)
		c.Models["other"] = config.Model{Provider: "other-provider", Model: "other-model", Endpoint: "http://127.0.0.1:9/v1",
			Secret: "other-llm-key"}
		c.TTS = map[string]config.TTS{"eleven": {Provider: "elevenlabs", ModelID: "eleven_v2", Endpoint: "http://127.0.0.1:9",
			Secret: "tts-key"}}
		c.VoiceProfiles = map[string]config.VoiceProfile{
			"calm": {TTS: "eleven", VoiceID: "v-calm", OutputFormat: "mp3_44100_128", VoiceSettings: config.VoiceSettings{Speed: 1}},
		}
		secrets["other-llm-key"], secrets["tts-key"] = "sk-other", "tts-secret"
	}})
	agent := d.StandIn(t, "assistant", admin.StartOverrides{})

	fetch := func() rpc.DynamicConfig {
		t.Helper()
		got, err := agent.Client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var dc rpc.DynamicConfig
		if err := json.Unmarshal(got.Config, &dc); err != nil {
			t.Fatal(err)
		}
		return dc
	}
	if dc := fetch(); slices.Contains(dc.Secrets, "other-llm-key") || slices.Contains(dc.Secrets, "tts-key") ||
		!slices.Contains(dc.Secrets, "model-key") {
		t.Errorf("secrets before any override = %v, want the bound model-key only", dc.Secrets)
	}
	if _, err := agent.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{"other-llm-key"}}); !errors.Is(err, wire.ErrPermissionDenied) {
		t.Errorf("a model's secret the session does not use: %v, want permission denied", err)
	}

	operator := control.Scope{Admin: true, Actor: "test"}
	if _, err := d.ModelSet(ctx, operator, "assistant", "other"); err != nil {
		t.Fatal(err)
	}
	if _, err := d.VoiceSet(ctx, operator, "assistant", "calm"); err != nil {
		t.Fatal(err)
	}
	dc := fetch()
	if dc.LLM != "other" || dc.VoiceProfile != "calm" {
		t.Fatalf("after the overrides: llm %q, voice %q", dc.LLM, dc.VoiceProfile)
	}
	for _, name := range []string{"model-key", "other-llm-key", "tts-key"} {
		if !slices.Contains(dc.Secrets, name) {
			t.Errorf("secrets after the overrides = %v, want %s among them", dc.Secrets, name)
		}
	}
	got, err := agent.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: dc.Secrets})
	if err != nil {
		t.Fatalf("GET_SECRETS of the listed secrets: %v", err)
	}
	if got.Secrets["other-llm-key"] != "sk-other" || got.Secrets["tts-key"] != "tts-secret" {
		t.Errorf("the overrides' secrets were not handed over")
	}
}
