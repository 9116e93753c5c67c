package agentapi_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/admin"
	"github.com/choirhq/choir/rpc/wire"
)

// TestOverridesBringNoSecret checks that a session's model and voice
// overrides (/model llm, /voice) bring the agent no provider's secret:
// choird's egress gateway adds those keys itself, so neither the bound
// model's key nor the new providers' are listed in the dynamic
// configuration or handed over by GET_SECRETS, before or after.
func TestOverridesBringNoSecret(t *testing.T) {
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
	refused := func(when string) {
		t.Helper()
		for _, name := range []string{"model-key", "other-llm-key", "tts-key"} {
			_, err := agent.Client.GetSecrets(ctx, rpc.GetSecretsRequest{Resources: []string{name}})
			if !errors.Is(err, wire.ErrPermissionDenied) || !strings.Contains(err.Error(), "egress gateway") {
				t.Errorf("%s: GET_SECRETS %s: %v, want a refusal naming the egress gateway", when, name, err)
			}
		}
	}
	if dc := fetch(); len(dc.Secrets) != 0 {
		t.Errorf("secrets before any override = %v, want none", dc.Secrets)
	}
	refused("before the overrides")

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
	if len(dc.Secrets) != 0 {
		t.Errorf("secrets after the overrides = %v, want none", dc.Secrets)
	}
	refused("after the overrides")
}
