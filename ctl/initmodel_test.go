package ctl

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc/admin"
)

// clearModelEnv unsets every variable init --local takes a model from.
func clearModelEnv(t *testing.T) {
	for _, k := range []string{"OPENAI_API_KEY", "OPENROUTER_API_KEY", "CHOIR_LLM_URL", "CHOIR_LLM_KEY", "CHOIR_LLM_MODEL"} {
		t.Setenv(k, "")
	}
}

// initLocal runs init --local on the database behind url.
func initLocal(t *testing.T, home, url string) (int, string, string) {
	t.Helper()
	pc, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	return runSessionCommands(home, "init", "--local", "--pg-host", pc.Host, "--pg-port", strconv.Itoa(int(pc.Port)),
		"--pg-database", pc.Database)
}

// TestInitLocalTakesTheModelFromTheEnvironment sets environment
// variables, so it is not parallel.
func TestInitLocalTakesTheModelFromTheEnvironment(t *testing.T) {
	const key = "sk-test-0123456789abcdef"
	t.Run("OpenAIKeyGoesToSecretsOnly", func(t *testing.T) {
		clearModelEnv(t)
		t.Setenv("OPENAI_API_KEY", key)
		home := t.TempDir()
		code, out, errs := initLocal(t, home, dbtest.DefaultURL)
		if code != ExitOK || !strings.Contains(out, "The model is gpt-4o-mini at https://api.openai.com/v1 (from OPENAI_API_KEY") {
			t.Fatalf("exit %d: %s%s", code, out, errs)
		}
		raw, _ := os.ReadFile(filepath.Join(home, "config.json"))
		if strings.Contains(string(raw), key) {
			t.Errorf("config.json holds the key:\n%s", raw)
		}
		cfg, secrets, err := config.Load(home)
		if err != nil {
			t.Fatalf("the configuration does not load: %v", err)
		}
		m := cfg.Models["openai"]
		if len(cfg.Models) != 1 || m.Endpoint != "https://api.openai.com/v1" || m.Model != "gpt-4o-mini" || m.Secret != "openai-api-key" ||
			cfg.Agents["assistant"].Defaults.LLM != "openai" {
			t.Errorf("models %+v, assistant's llm %q", cfg.Models, cfg.Agents["assistant"].Defaults.LLM)
		}
		if secrets["openai-api-key"] != key {
			t.Errorf("secrets.json has no openai-api-key")
		}
		if st, err := os.Stat(filepath.Join(home, "secrets.json")); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("secrets.json: %v, %v; want mode 0600", st, err)
		}
	})
	t.Run("WithoutOneTheLocalEndpointStaysAndInitSaysHowToSetOne", func(t *testing.T) {
		clearModelEnv(t)
		home := t.TempDir()
		code, out, errs := initLocal(t, home, dbtest.DefaultURL)
		if code != ExitOK || !strings.Contains(out, "local Ollama endpoint") || !strings.Contains(out, "OPENROUTER_API_KEY") {
			t.Fatalf("exit %d: %s%s", code, out, errs)
		}
		cfg, _, err := config.Load(home)
		if err != nil || cfg.Models["local"].Endpoint != "http://127.0.0.1:11434/v1" {
			t.Errorf("models %+v, %v", cfg.Models, err)
		}
	})
	t.Run("AnIncompleteEndpointIsBadInput", func(t *testing.T) {
		clearModelEnv(t)
		t.Setenv("CHOIR_LLM_URL", "https://llm.example/v1")
		home := t.TempDir()
		code, _, errs := initLocal(t, home, dbtest.DefaultURL)
		if code != ExitUsage || !strings.Contains(errs, "CHOIR_LLM_MODEL is not") {
			t.Errorf("exit %d: %s", code, errs)
		}
		if _, err := os.Stat(filepath.Join(home, "config.json")); err == nil {
			t.Errorf("config.json written despite the bad environment")
		}
	})

	t.Run("ChoirdSaysTheProviderRejectsTheKeyNamingTheVariable", func(t *testing.T) {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/models" {
				http.NotFound(w, r)
				return
			}
			if r.Header.Get("Authorization") != "Bearer good-key" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Write([]byte(`{"object":"list","data":[{"id":"m1","object":"model"}]}`))
		}))
		defer srv.Close()
		clearModelEnv(t)
		t.Setenv("CHOIR_LLM_URL", srv.URL+"/v1")
		t.Setenv("CHOIR_LLM_KEY", key)
		t.Setenv("CHOIR_LLM_MODEL", "m1")
		url := dbtest.NewDatabase(t)
		home := t.TempDir()
		if code, out, errs := initLocal(t, home, url); code != ExitOK {
			t.Fatalf("init: exit %d: %s%s", code, out, errs)
		}
		c := choirdtest.Start(t, choirdtest.Options{Home: home, DatabaseURL: url})
		logs := c.Logs.String()
		for _, want := range []string{"rejects the key in secret choir-llm-key (from the environment variable CHOIR_LLM_KEY at choirctl init) with HTTP 401",
			"no model is reachable"} {
			if !strings.Contains(logs, want) {
				t.Errorf("choird's start-up log lacks %q:\n%s", want, logs)
			}
		}
		code, out, errs := runSessionCommands(home, "status")
		if code != ExitOK || !strings.Contains(out, "model llm: m1 at "+srv.URL+"/v1, UNREACHABLE") ||
			!strings.Contains(out, "CHOIR_LLM_KEY") || !strings.Contains(out, "models: no model is reachable") {
			t.Errorf("status: exit %d: %s%s", code, out, errs)
		}

		// A good key, applied: status asks again and finds the model.
		if code, out, errs := runSessionCommands(home, "secret", "set", "choir-llm-key", "good-key"); code != ExitOK {
			t.Fatalf("secret set: exit %d: %s%s", code, out, errs)
		}
		if code, out, errs := runSessionCommands(home, "secret", "apply"); code != ExitOK {
			t.Fatalf("secret apply: exit %d: %s%s", code, out, errs)
		}
		code, out, errs = runSessionCommands(home, "status", "--json")
		var st admin.StatusResponse
		if code != ExitOK || json.Unmarshal([]byte(out), &st) != nil || len(st.Models) != 1 || !st.Models[0].Reachable || st.NoModel != "" {
			t.Errorf("status --json: exit %d: %s%s", code, out, errs)
		}
	})
}
