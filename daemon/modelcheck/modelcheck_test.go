package modelcheck_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/modelcheck"
)

// openAI is a stand-in for the OpenAI /models endpoint: it lists one
// model for the key "good" and answers 401 to any other.
func openAI(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/v1/models" {
			http.NotFound(w, r)
			return
		}
		if r.Header.Get("Authorization") != "Bearer good" {
			w.WriteHeader(http.StatusUnauthorized)
			w.Write([]byte(`{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","code":"invalid_api_key"}}`))
			return
		}
		w.Write([]byte(`{"object":"list","data":[{"id":"gpt-4o-mini","object":"model"}]}`))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestProbe(t *testing.T) {
	t.Parallel()
	srv := openAI(t)
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	cfg := &config.Config{Models: map[string]config.Model{
		"good":     {Model: "gpt-4o-mini", Endpoint: srv.URL + "/v1", Secret: "good-key"},
		"rejected": {Model: "gpt-4o-mini", Endpoint: srv.URL + "/v1/", Secret: "openai-api-key"},
		"custom":   {Model: "m", Endpoint: srv.URL + "/v1", Secret: "custom-key"},
		"nokey":    {Model: "m", Endpoint: srv.URL + "/v1"},
		"down":     {Model: "llama3.1", Endpoint: downURL + "/v1"},
		"missing":  {Model: "m", Endpoint: srv.URL + "/v1", Secret: "absent"},
	}}
	secrets := config.Secrets{"good-key": "good", "openai-api-key": "sk-bad", "custom-key": "bad"}
	got := map[string]string{}
	reachable := map[string]bool{}
	for _, s := range modelcheck.Probe(context.Background(), srv.Client(), cfg, secrets) {
		got[s.Name], reachable[s.Name] = s.Error, s.Reachable
	}
	if !reachable["good"] || got["good"] != "" {
		t.Errorf("good: reachable %t, %q", reachable["good"], got["good"])
	}
	for name, want := range map[string][]string{
		"rejected": {"rejects the key in secret openai-api-key", "environment variable OPENAI_API_KEY", "HTTP 401", "choirctl secret set openai-api-key"},
		"custom":   {"rejects the key in secret custom-key with HTTP 401"},
		"nokey":    {"rejects requests without a key (HTTP 401)"},
		"down":     {"nothing answers at " + downURL + "/v1", "connection refused"},
		"missing":  {"secret absent, is not in secrets.json"},
	} {
		if reachable[name] {
			t.Errorf("%s: reachable", name)
		}
		for _, w := range want {
			if !strings.Contains(got[name], w) {
				t.Errorf("%s: %q lacks %q", name, got[name], w)
			}
		}
	}
	if strings.Contains(got["custom"], "environment variable") {
		t.Errorf("custom names an environment variable it did not come from: %q", got["custom"])
	}
}

func TestNoneReachable(t *testing.T) {
	t.Parallel()
	srv := openAI(t)
	cfg := &config.Config{Models: map[string]config.Model{"a": {Model: "m", Endpoint: srv.URL + "/v1", Secret: "k"}}}
	st := modelcheck.Probe(context.Background(), srv.Client(), cfg, config.Secrets{"k": "bad"})
	if msg := modelcheck.NoneReachable(st); !strings.Contains(msg, "no model is reachable") || !strings.Contains(msg, "OPENAI_API_KEY") {
		t.Errorf("NoneReachable = %q", msg)
	}
	st = modelcheck.Probe(context.Background(), srv.Client(), cfg, config.Secrets{"k": "good"})
	if msg := modelcheck.NoneReachable(st); msg != "" {
		t.Errorf("NoneReachable with a good key = %q", msg)
	}
}
