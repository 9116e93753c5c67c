package agent

import (
	"testing"

	"github.com/choirhq/choir/agent/netout"
	"github.com/choirhq/choir/agent/tool/builtin"
	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/egress"
)

// TestSearchProviderReachesOnlyItsKey picks the search provider from the
// dynamic configuration and hands the search tool that provider's key,
// and nothing else of the session's secrets.
func TestSearchProviderReachesOnlyItsKey(t *testing.T) {
	t.Parallel()
	s := &session{secrets: &secretStore{}}
	s.secrets.swap(map[string]string{"brave-api-key": "k-brave", "other-key": "k-other", "openai": "k-llm"})

	if _, err := s.searchProvider(); err == nil {
		t.Fatal("no configuration: want an error saying what to configure")
	}
	s.dyn.Store(&rpc.DynamicConfig{Search: map[string]config.SearchProvider{
		"other": {Secret: "other-key"}, "brave": {Secret: "brave-api-key", Endpoint: "http://127.0.0.1:9/res/v1"}},
		Web: config.Web{AllowHosts: []string{"x.example"}}})
	p, err := s.searchProvider()
	if err != nil || p.Name != "brave" || p.Key != "k-brave" || p.Endpoint != "http://127.0.0.1:9/res/v1" {
		t.Fatalf("provider %+v, %v", p, err)
	}
	if w := s.webTools().SettingsFunc(); len(w.AllowHosts) != 1 {
		t.Fatalf("settings %+v", w)
	}
	s.dyn.Store(&rpc.DynamicConfig{Search: map[string]config.SearchProvider{"other": {Secret: "other-key"}}})
	if p, _ := s.searchProvider(); p.Name != "other" || p.Key != "k-other" {
		t.Fatalf("sole provider %+v", p)
	}
}

// TestServiceClientsUseTheGatewayRoutes: a session that goes out through
// choird's egress gateway sends search, speech and Notion to their service
// routes and holds none of their keys.
func TestServiceClientsUseTheGatewayRoutes(t *testing.T) {
	t.Parallel()
	s := &session{secrets: &secretStore{}, egress: &netout.Dialer{}}
	s.hello.ResourceBindings = rpc.ResourceBindings{Notion: "notes", VoiceProfile: "calm"}
	s.dyn.Store(&rpc.DynamicConfig{Search: map[string]config.SearchProvider{"brave": {Secret: "brave-api-key"}},
		TTS:                map[string]config.TTS{"eleven": {Provider: "elevenlabs", Endpoint: "https://api.elevenlabs.io/v1", Secret: "k"}},
		VoiceProfiles:      map[string]config.VoiceProfile{"calm": {TTS: "eleven", VoiceID: "v"}},
		NotionIntegrations: map[string]config.NotionIntegration{"notes": {Secret: "n"}}})
	p, err := s.searchProvider()
	if err != nil || !p.Gateway || p.Key != "" || p.Endpoint != egress.ServiceURL("search", "brave") {
		t.Errorf("search provider %+v, %v", p, err)
	}
	v, err := s.toolVoice()
	if err != nil || !v.Gateway || v.Endpoint != egress.ServiceURL("tts", "eleven") {
		t.Errorf("voice %+v, %v", v, err)
	}
	var cfg builtin.Config
	s.serviceTools(&cfg)
	if !cfg.Notion.Gateway || cfg.Notion.EndpointFunc() != egress.ServiceURL("notion", "notes") {
		t.Errorf("notion: gateway %v, endpoint %q", cfg.Notion.Gateway, cfg.Notion.EndpointFunc())
	}
}
