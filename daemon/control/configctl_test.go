package control_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/configdiff"
	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/internal/choirctltest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/sql/seam"
	"github.com/choirhq/choir/strictjson"
)

// secretValues are the values choirdtest.StartTwoAgents writes; none may ever be shown.
var secretValues = []string{choirdtest.Canary, "ghp-test", "postgres:"}

func changeLines(cs []configdiff.Change) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.String())
	}
	return out
}

func assertNoSecret(t *testing.T, what, s string) {
	t.Helper()
	for _, v := range secretValues {
		if strings.Contains(s, v) {
			t.Errorf("%s shows the secret value %q:\n%s", what, v, s)
		}
	}
}

func TestConfigControlPermissions(t *testing.T) {
	t.Parallel()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{})
	ctx := context.Background()
	dm := control.Scope{Agent: "assistant", Actor: "telegram:dm=second"}
	stranger := control.Scope{Actor: "nobody"}
	commands := []struct {
		name string
		call func(control.Scope) error
	}{
		{"ConfigLoad", func(sc control.Scope) error { _, err := d.ConfigLoad(ctx, sc); return err }},
		{"configdiff.DiffReport", func(sc control.Scope) error { _, err := d.ConfigDiff(ctx, sc); return err }},
		{"ConfigApply", func(sc control.Scope) error { _, err := d.ConfigApply(ctx, sc); return err }},
		{"ConfigShow", func(sc control.Scope) error { _, err := d.ConfigShow(ctx, sc); return err }},
		{"SecretList", func(sc control.Scope) error { _, err := d.SecretList(ctx, sc); return err }},
	}
	for _, c := range commands {
		t.Run(c.name+"RefusesRegularDMs", func(t *testing.T) {
			for _, sc := range []control.Scope{dm, stranger} {
				if err := c.call(sc); !errors.Is(err, control.ErrForbidden) || !strings.Contains(err.Error(), "admin") {
					t.Errorf("scope %+v: err = %v, want control.ErrForbidden naming admin", sc, err)
				}
			}
		})
	}
	t.Run("AdminMayShowAndList", func(t *testing.T) {
		admin := control.Scope{Admin: true, Actor: "test"}
		names, err := d.SecretList(ctx, admin)
		if err != nil || !slices.Equal(names, []string{"git-token", "model-key", "postgres-admin"}) {
			t.Errorf("SecretList = %v, %v", names, err)
		}
		raw, err := d.ConfigShow(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		var shown config.Config
		if err := json.Unmarshal(raw, &shown); err != nil || shown.Models["local"].Secret != "model-key" {
			t.Errorf("ConfigShow = %s, %v", raw, err)
		}
		assertNoSecret(t, "ConfigShow", string(raw))
	})
}

func TestConfigLoadDiffApply(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	d := choirdtest.StartTwoAgents(t, choirdtest.Options{})
	home, logs := d.Home, d.Logs
	admin := control.Scope{Admin: true, Actor: "test"}
	q := seam.Queries(d.Pool())

	var applied []*config.Config
	d.OnConfigApplied(func(c *config.Config, s config.Secrets) { applied = append(applied, c) })

	// A live session, to see config_changed pushed and the new version
	// fetched.
	_, client, _ := d.HelloSession(t, "assistant")

	t.Run("DiffAndApplyBeforeLoadSayRunLoad", func(t *testing.T) {
		if _, err := d.ConfigDiff(ctx, admin); !errors.Is(err, control.ErrNothingStaged) || !strings.Contains(err.Error(), "config load") {
			t.Errorf("diff: %v", err)
		}
		if _, err := d.ConfigApply(ctx, admin); !errors.Is(err, control.ErrNothingStaged) {
			t.Errorf("apply: %v", err)
		}
		code, _, errs := choirctltest.Run(t, home, "config", "diff")
		if code == 0 || !strings.Contains(errs, "run choirctl config load") {
			t.Errorf("choirctl config diff: %d %s", code, errs)
		}
	})

	t.Run("InvalidConfigStagesNothing", func(t *testing.T) {
		choirdtest.EditHome(t, home, func(c *config.Config) {
			a := c.Agents["assistant"]
			a.Defaults.LLM = "no-such-model"
			c.Agents["assistant"] = a
		}, nil)
		_, err := d.ConfigLoad(ctx, admin)
		var cerr *strictjson.Error
		if !errors.As(err, &cerr) || !strings.Contains(err.Error(), "$.agents.assistant.defaults.llm") ||
			!strings.Contains(err.Error(), "nothing staged") {
			t.Fatalf("load: %v", err)
		}
		if _, err := d.ConfigDiff(ctx, admin); !errors.Is(err, control.ErrNothingStaged) {
			t.Errorf("diff after a failed load: %v", err)
		}
		choirdtest.EditHome(t, home, func(c *config.Config) {
			a := c.Agents["assistant"]
			a.Defaults.LLM = "local"
			c.Agents["assistant"] = a
		}, nil)
	})

	t.Run("HotChangesApplyAndReachAgents", func(t *testing.T) {
		before := d.ConfigVersion()
		choirdtest.EditHome(t, home, func(c *config.Config) {
			m := c.Models["local"]
			m.Endpoint = "http://10.9.9.9:8080/v1"
			c.Models["local"] = m
			c.DMs["bob"] = config.DM{Gateway: "console", UserID: "bob"}
			c.ApprovalTimeoutMS = 60000
		}, nil)
		code, out, errs := choirctltest.Run(t, home, "config", "load")
		if code != 0 {
			t.Fatalf("config load: %d %s", code, errs)
		}
		for _, want := range []string{
			"~ config.json: models.local.endpoint ",
			"      http://127.0.0.1:11434/v1 -> http://10.9.9.9:8080/v1\n",
			"+ config.json: dms.bob ",
			"~ config.json: approval_timeout_ms ",
			"      1800000 -> 60000\n",
			"→ included in: choirctl config apply",
			"run choirctl config apply",
		} {
			if !strings.Contains(out, want) {
				t.Errorf("config load output lacks %q:\n%s", want, out)
			}
		}
		// Staging changes nothing that runs.
		if cfg := d.Snapshot().Config; cfg.Models["local"].Endpoint != "http://127.0.0.1:11434/v1" || d.ConfigVersion() != before {
			t.Fatal("config load changed the running config")
		}

		code, out, errs = choirctltest.Run(t, home, "config", "diff", "--json")
		var diff configdiff.DiffReport
		if err := json.Unmarshal([]byte(out), &diff); code != 0 || err != nil || len(diff.Changes) != 3 || len(diff.Blockers) != 0 {
			t.Fatalf("config diff --json: %d %v %s %s", code, err, out, errs)
		}

		code, out, errs = choirctltest.Run(t, home, "config", "apply", "--json")
		var res configdiff.ApplyReport
		if err := json.Unmarshal([]byte(out), &res); code != 0 || err != nil {
			t.Fatalf("config apply: %d %v %s %s", code, err, out, errs)
		}
		if res.Version <= before || res.PreviousVersion != before || res.Notified != 1 || len(res.Applied) != 3 {
			t.Errorf("apply result = %+v", res)
		}
		if latest, err := q.ConfigVersionLatest(ctx); err != nil || latest != res.Version {
			t.Errorf("config_versions latest = %d, %v; want %d", latest, err, res.Version)
		}
		cfg := d.Snapshot().Config
		if cfg.Models["local"].Endpoint != "http://10.9.9.9:8080/v1" || cfg.ApprovalTimeoutMS != 60000 {
			t.Errorf("running config not swapped: %+v", cfg.Models)
		}
		if len(applied) != 1 || applied[0] != cfg {
			t.Errorf("onConfigApplied called %d times", len(applied))
		}

		// The agent learns the version by push and heartbeat, and
		// fetches the new config: the agent API serves it.
		fetched, err := client.FetchDynamicConfig(ctx, rpc.FetchDynamicConfigRequest{CurrentConfigVersion: before})
		if err != nil {
			t.Fatal(err)
		}
		var dyn rpc.DynamicConfig
		if err := json.Unmarshal(fetched.Config, &dyn); err != nil || fetched.ConfigVersion != res.Version ||
			dyn.Models["local"].Endpoint != "http://10.9.9.9:8080/v1" {
			t.Errorf("FETCH_DYNAMIC_CONFIG = v%d %s, %v", fetched.ConfigVersion, fetched.Config, err)
		}

		// Applying again has nothing staged; loading the same file again
		// changes nothing.
		if _, err := d.ConfigApply(ctx, admin); !errors.Is(err, control.ErrNothingStaged) {
			t.Errorf("second apply: %v", err)
		}
		if _, err := d.ConfigLoad(ctx, admin); err != nil {
			t.Fatal(err)
		}
		again, err := d.ConfigApply(ctx, admin)
		if err != nil || again.Version != res.Version || len(again.Applied) != 0 || !strings.Contains(again.String(), "nothing to apply") {
			t.Errorf("re-apply of the same file = %+v, %v", again, err)
		}
	})

	t.Run("RestartOnlyChangeIsRefusedAndNothingChanges", func(t *testing.T) {
		cfgBefore := d.Snapshot().Config
		version := d.ConfigVersion()
		choirdtest.EditHome(t, home, func(c *config.Config) {
			c.Embedding.Dimensions = 768
			m := c.Models["local"]
			m.Model = "llama3.2"
			c.Models["local"] = m
		}, nil)
		diff, err := d.ConfigLoad(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(diff.String(), "[choird-restart]") || !strings.Contains(diff.String(), "→ use: restart choird (config apply refuses it)") ||
			!strings.Contains(diff.String(), "      384 -> 768\n") ||
			!strings.Contains(diff.String(), "config apply would refuse") {
			t.Errorf("diff:\n%s", diff)
		}
		_, err = d.ConfigApply(ctx, admin)
		var refused *control.ConfigRefusedError
		if !errors.As(err, &refused) || len(refused.Problems) != 1 || refused.Problems[0].Path != "$.embedding.dimensions" {
			t.Fatalf("apply: %v", err)
		}
		if cfg := d.Snapshot().Config; cfg != cfgBefore || d.ConfigVersion() != version || cfg.Models["local"].Model != "llama3.1" {
			t.Error("a refused apply changed the running config")
		}
		if latest, _ := q.ConfigVersionLatest(ctx); latest != version {
			t.Errorf("a refused apply recorded version %d", latest)
		}
		code, _, errs := choirctltest.Run(t, home, "config", "apply")
		if code == 0 || !strings.Contains(errs, "$.embedding.dimensions") || !strings.Contains(errs, "nothing changed") {
			t.Errorf("choirctl config apply: %d %s", code, errs)
		}
		choirdtest.EditHome(t, home, func(c *config.Config) { c.Embedding.Dimensions = 384 }, nil)
	})

	t.Run("SecretNotYetAppliedBlocksApplyWithItsPath", func(t *testing.T) {
		version := d.ConfigVersion()
		// secrets.json gains the key and config.json names it: load
		// validates both files, but choird's running secrets lack it.
		choirdtest.EditHome(t, home, func(c *config.Config) {
			m := c.Models["local"]
			m.Secret = "new-key"
			c.Models["local"] = m
		}, config.Secrets{"postgres-admin": "postgres:", "model-key": choirdtest.Canary, "git-token": "ghp-test",
			"new-key": "sk-newcanary-9b1c"})
		diff, err := d.ConfigLoad(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		text := diff.String()
		if !strings.Contains(text, "+ secrets.json: new-key ") || !strings.Contains(text, "→ use: choirctl secret apply") ||
			!strings.Contains(text, "~ config.json: models.local.secret ") || !strings.Contains(text, "      model-key -> new-key\n") ||
			!strings.Contains(text, "[next-start]") {
			t.Errorf("diff:\n%s", text)
		}
		_, err = d.ConfigApply(ctx, admin)
		var refused *control.ConfigRefusedError
		if !errors.As(err, &refused) || refused.Problems[0].Path != "$.models.local.secret" ||
			!strings.Contains(err.Error(), "secret apply") {
			t.Fatalf("apply: %v", err)
		}
		if cfg := d.Snapshot().Config; cfg.Models["local"].Secret != "model-key" || d.ConfigVersion() != version {
			t.Error("a refused apply changed the running config")
		}
		assertNoSecret(t, "diff", text+err.Error())
		if strings.Contains(text+err.Error(), "sk-newcanary") {
			t.Error("the new secret's value is shown")
		}

		// secret apply, then the same stage applies.
		if _, err := d.SecretApply(ctx, admin); err != nil {
			t.Fatal(err)
		}
		res, err := d.ConfigApply(ctx, admin)
		if err != nil || res.Version <= version {
			t.Fatalf("apply after secret apply: %+v %v", res, err)
		}
		code, out, _ := choirctltest.Run(t, home, "secret", "list")
		if code != 0 || out != "git-token\nmodel-key\nnew-key\npostgres-admin\n" {
			t.Errorf("secret list: %d %q", code, out)
		}
	})

	t.Run("RemovingWhatARunningAgentUsesIsRefused", func(t *testing.T) {
		choirdtest.EditHome(t, home, func(c *config.Config) {
			delete(c.Agents, "assistant")
			delete(c.Workspaces, "main")
			c.Agents["helper"] = config.Agent{Defaults: config.AgentDefaults{Workspace: "other", LLM: "local", DM: "second"}}
		}, nil)
		if _, err := d.ConfigLoad(ctx, admin); err != nil {
			t.Fatal(err)
		}
		_, err := d.ConfigApply(ctx, admin)
		var refused *control.ConfigRefusedError
		if !errors.As(err, &refused) {
			t.Fatalf("apply: %v", err)
		}
		var paths []string
		for _, p := range refused.Problems {
			paths = append(paths, p.Path)
		}
		if !slices.Contains(paths, "$.agents.assistant") || !strings.Contains(err.Error(), "choirctl agent stop assistant") {
			t.Errorf("problems = %v", refused.Problems)
		}
	})

	t.Run("NewAgentIsProvisioned", func(t *testing.T) {
		choirdtest.EditHome(t, home, func(c *config.Config) {
			c.Agents["newbie"] = config.Agent{Defaults: config.AgentDefaults{Workspace: "other", LLM: "local", DM: "second"}}
		}, nil)
		// Reset what the previous subtest removed.
		choirdtest.EditHome(t, home, func(c *config.Config) {
			running := d.Snapshot().Config
			c.Agents["assistant"] = running.Agents["assistant"]
			c.Workspaces["main"] = running.Workspaces["main"]
		}, nil)
		if _, err := d.ConfigLoad(ctx, admin); err != nil {
			t.Fatal(err)
		}
		res, err := d.ConfigApply(ctx, admin)
		if err != nil || !slices.Contains(changeLines(res.Applied), "+ agents.newbie  [hot-reload]") {
			t.Fatalf("apply = %+v, %v", res, err)
		}
		if _, err := q.AgentSchemaGet(ctx, "newbie"); err != nil {
			t.Errorf("schema of the new agent: %v", err)
		}
		st, err := d.AgentStatus(ctx, admin, "newbie")
		if err != nil || st.AgentID != "newbie" {
			t.Errorf("status of the new agent: %+v, %v", st, err)
		}
	})

	t.Run("ChoirctlShowAndOutputsNeverHoldSecretValues", func(t *testing.T) {
		var all strings.Builder
		for _, args := range [][]string{
			{"config", "show"}, {"config", "show", "--json"}, {"secret", "list", "--json"},
			{"config", "load"}, {"config", "diff", "--json"}, {"config", "apply"},
		} {
			code, out, errs := choirctltest.Run(t, home, args...)
			if code != 0 {
				t.Errorf("%v: %d %s", args, code, errs)
			}
			all.WriteString(out + errs)
		}
		if !strings.Contains(all.String(), "# running config version") || !strings.Contains(all.String(), `"secret": "new-key"`) {
			t.Errorf("config show output:\n%s", all.String())
		}
		assertNoSecret(t, "choirctl", all.String())
		assertNoSecret(t, "choird's log", logs.String())
		if strings.Contains(all.String()+logs.String(), "sk-newcanary") {
			t.Error("a secret value is shown")
		}
	})
}
