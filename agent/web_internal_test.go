package agent

import (
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/rpc"
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
