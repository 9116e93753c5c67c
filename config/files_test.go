package config_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/config/starter"
	"github.com/choirhq/choir/strictjson"
)

// writeDir writes config.json and secrets.json into a new directory, with
// secrets.json at mode secretsMode.
func writeDir(t *testing.T, configData, secretsData string, secretsMode fs.FileMode) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, config.ConfigFile), []byte(configData), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, config.SecretsFile)
	if err := os.WriteFile(p, []byte(secretsData), 0o600); err != nil {
		t.Fatal(err)
	}
	// Chmod, since WriteFile's mode is subject to the umask.
	if err := os.Chmod(p, secretsMode); err != nil {
		t.Fatal(err)
	}
	return dir
}

func specSecretsJSON(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	b.WriteString("{\n")
	for i, name := range specSecrets().Names() {
		if i > 0 {
			b.WriteString(",\n")
		}
		b.WriteString(`  "` + name + `": "` + specSecrets()[name] + `"`)
	}
	b.WriteString("\n}\n")
	return b.String()
}

func TestLoad(t *testing.T) {
	t.Parallel()

	spec, err := os.ReadFile("testdata/spec-example.json")
	if err != nil {
		t.Fatal(err)
	}

	t.Run("LoadsSpecExample", func(t *testing.T) {
		t.Parallel()
		dir := writeDir(t, string(spec), specSecretsJSON(t), 0o600)
		c, s, err := config.Load(dir)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if !reflect.DeepEqual(c, specConfig(t)) || !reflect.DeepEqual(s, specSecrets()) {
			t.Errorf("Load returned %+v, %v", c, s)
		}
	})

	t.Run("RefusesSecretsOthersCanAccess", func(t *testing.T) {
		t.Parallel()
		for _, mode := range []fs.FileMode{0o644, 0o640, 0o604, 0o620, 0o602, 0o610} {
			dir := writeDir(t, string(spec), specSecretsJSON(t), mode)
			_, _, err := config.Load(dir)
			var ie *config.InsecureSecretsError
			if !errors.As(err, &ie) || ie.Mode.Perm() != mode {
				t.Errorf("mode %04o: err = %v, want InsecureSecretsError", mode, err)
			}
		}
		dir := writeDir(t, string(spec), specSecretsJSON(t), 0o644)
		_, _, err := config.Load(dir)
		want := "secrets.json: mode 0644 lets other users read secrets; run: chmod 600 " + filepath.Join(dir, "secrets.json")
		if err == nil || err.Error() != want {
			t.Errorf("err = %v\nwant %s", err, want)
		}
		dir = writeDir(t, string(spec), specSecretsJSON(t), 0o620)
		if _, _, err := config.Load(dir); err == nil || !strings.Contains(err.Error(), "mode 0620 lets other users change secrets") {
			t.Errorf("err = %v, want it to say others can change secrets", err)
		}
	})

	t.Run("AcceptsOwnerOnlyModes", func(t *testing.T) {
		t.Parallel()
		for _, mode := range []fs.FileMode{0o600, 0o400} {
			dir := writeDir(t, string(spec), specSecretsJSON(t), mode)
			if _, _, err := config.Load(dir); err != nil {
				t.Errorf("mode %04o: %v", mode, err)
			}
		}
	})

	t.Run("MissingFilesSayRunInit", func(t *testing.T) {
		t.Parallel()
		for _, missing := range []string{config.ConfigFile, config.SecretsFile} {
			dir := writeDir(t, string(spec), specSecretsJSON(t), 0o600)
			if err := os.Remove(filepath.Join(dir, missing)); err != nil {
				t.Fatal(err)
			}
			_, _, err := config.Load(dir)
			if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "run choirctl init") || !strings.Contains(err.Error(), missing) {
				t.Errorf("without %s: err = %v, want not-exist naming the file and choirctl init", missing, err)
			}
		}
		if _, _, err := config.Load(filepath.Join(t.TempDir(), "absent")); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("missing directory: err = %v", err)
		}
	})

	t.Run("ParseProblemsOfBothFilesAtOnce", func(t *testing.T) {
		t.Parallel()
		dir := writeDir(t, `{"workspaces": {}, "workspaces": {}}`, `{"a": "`+distinct+`"} x`, 0o600)
		_, _, err := config.Load(dir)
		if err == nil {
			t.Fatal("Load succeeded")
		}
		for _, want := range []string{
			"parse " + filepath.Join(dir, "config.json") + ":\n$.workspaces: duplicate key",
			"parse " + filepath.Join(dir, "secrets.json") + ":\n$: unexpected data after top-level value",
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("err = %v\nwant it to contain %q", err, want)
			}
		}
		var ce *strictjson.Error
		if !errors.As(err, &ce) {
			t.Errorf("err does not wrap *strictjson.Error")
		}
		if strings.Contains(err.Error(), distinct) {
			t.Errorf("error shows a secret value: %v", err)
		}
	})

	t.Run("ValidationProblemsAreWrapped", func(t *testing.T) {
		t.Parallel()
		dir := writeDir(t, string(spec), `{}`, 0o600)
		_, _, err := config.Load(dir)
		var ce *strictjson.Error
		if !errors.As(err, &ce) || len(ce.Problems) != 15 {
			t.Fatalf("err = %v, want a *strictjson.Error with a problem per secret reference", err)
		}
		if !strings.HasPrefix(err.Error(), "invalid "+filepath.Join(dir, "config.json")+":\n$.models.gpt4o.secret: ") {
			t.Errorf("err = %v", err)
		}
	})
}

func TestWriteFiles(t *testing.T) {
	t.Parallel()

	t.Run("WritesModesAndRefusesToOverwrite", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), ".choir.d")
		c, s := starter.Local(dir, config.Postgres{})
		if err := config.WriteFiles(dir, c, s, false); err != nil {
			t.Fatal(err)
		}
		for name, want := range map[string]fs.FileMode{config.ConfigFile: 0o644, config.SecretsFile: 0o600, ".": 0o700} {
			info, err := os.Stat(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if got := info.Mode().Perm(); got != want {
				t.Errorf("%s: mode %04o, want %04o", name, got, want)
			}
		}

		err := config.WriteFiles(dir, starter.Skeleton(), nil, false)
		if !errors.Is(err, fs.ErrExist) {
			t.Fatalf("second WriteFiles: err = %v, want fs.ErrExist", err)
		}
		if got, _, err := config.Load(dir); err != nil || !reflect.DeepEqual(got, c) {
			t.Errorf("refused write changed the files: %v", err)
		}

		if err := config.WriteFiles(dir, starter.Skeleton(), config.Secrets{}, true); err != nil {
			t.Fatalf("WriteFiles with overwrite: %v", err)
		}
		data, err := os.ReadFile(filepath.Join(dir, config.SecretsFile))
		if err != nil || string(data) != "{}\n" {
			t.Errorf("secrets.json = %q, %v", data, err)
		}
		entries, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if len(entries) != 2 {
			t.Errorf("directory holds %v, want only the two files", entries)
		}
	})

	t.Run("RefusesWhenOnlyOneFileExists", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, config.SecretsFile), []byte("{}"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := config.WriteFiles(dir, starter.Skeleton(), nil, false); !errors.Is(err, fs.ErrExist) {
			t.Fatalf("err = %v, want fs.ErrExist", err)
		}
		if _, err := os.Stat(filepath.Join(dir, config.ConfigFile)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("config.json was written despite the refusal")
		}
	})

	t.Run("WritesRealSecretValues", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		c, _ := starter.Local(dir, config.Postgres{})
		s := config.Secrets{"postgres-admin": "postgres:" + distinct}
		if err := config.WriteFiles(dir, c, s, false); err != nil {
			t.Fatal(err)
		}
		_, got, err := config.Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if got["postgres-admin"] != "postgres:"+distinct {
			t.Errorf("secret did not survive the round trip")
		}
	})
}

func TestLocal(t *testing.T) {
	t.Parallel()

	t.Run("ValidatesAndRoundTrips", func(t *testing.T) {
		t.Parallel()
		dir := filepath.Join(t.TempDir(), ".choir.d")
		c, s := starter.Local(dir, config.Postgres{Host: "/var/tmp/choir-pg/sock", Port: 55432, Database: "choir_dev"})
		if err := c.Validate(s); err != nil {
			t.Fatalf("Validate: %v", err)
		}
		if err := config.WriteFiles(dir, c, s, false); err != nil {
			t.Fatal(err)
		}
		gotC, gotS, err := config.Load(dir)
		if err != nil {
			t.Fatalf("Load: %v", err)
		}
		if !reflect.DeepEqual(gotC, c) || !reflect.DeepEqual(gotS, s) {
			t.Errorf("round trip changed the configuration")
		}
		dsn, err := gotC.PostgresDSN(gotS)
		if err != nil {
			t.Fatal(err)
		}
		if want := `host='/var/tmp/choir-pg/sock' port='55432' dbname='choir_dev' user='postgres'`; dsn != want {
			t.Errorf("dsn = %s, want %s", dsn, want)
		}
	})

	t.Run("UsesQuickstartResources", func(t *testing.T) {
		t.Parallel()
		c, s := starter.Local("/home/op/.choir.d", config.Postgres{})
		want := map[string]any{
			"workspace": c.Workspaces["main"].Path,
			"model":     c.Models["local"],
			"embedding": c.Embedding,
			"gateway":   c.Gateways["console"],
			"dm":        c.DMs["console"],
			"agent":     c.Agents["assistant"].Defaults,
			"postgres":  c.Postgres,
			"secrets":   map[string]string(s),
		}
		expected := map[string]any{
			"workspace": "/home/op/.choir.d/workspaces/main",
			"model":     config.Model{Provider: "openai-compatible", Model: "llama3.1", Endpoint: "http://127.0.0.1:11434/v1"},
			"embedding": config.Embedding{Provider: "offline", Dimensions: 384},
			"gateway":   config.Gateway{Type: config.GatewayConsole},
			"dm":        config.DM{Gateway: "console", UserID: "operator", Admin: true},
			"agent":     config.AgentDefaults{Workspace: "main", LLM: "local", DM: "console"},
			"postgres":  config.Postgres{Host: "localhost", Port: 5432, Database: "choir", Secret: "postgres-admin"},
			"secrets":   map[string]string{"postgres-admin": "postgres:"},
		}
		for k := range expected {
			if !reflect.DeepEqual(want[k], expected[k]) {
				t.Errorf("%s = %+v, want %+v", k, want[k], expected[k])
			}
		}
	})

	t.Run("RelativeDirIsMadeAbsolute", func(t *testing.T) {
		t.Parallel()
		c, s := starter.Local("relative/.choir.d", config.Postgres{})
		if !filepath.IsAbs(c.Workspaces["main"].Path) {
			t.Errorf("workspace path %q is relative", c.Workspaces["main"].Path)
		}
		if err := c.Validate(s); err != nil {
			t.Error(err)
		}
	})
}

func TestSkeleton(t *testing.T) {
	t.Parallel()

	t.Run("ReportsOnlyItsPlaceholdersAndMissingSecrets", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		if err := config.WriteFiles(dir, starter.Skeleton(), config.Secrets{}, false); err != nil {
			t.Fatal(err)
		}
		_, _, err := config.Load(dir)
		checkProblems(t, problems(t, err), []string{
			`$.workspaces.main.path: placeholder value: replace it in config.json`,
			`$.models.default.model: placeholder value: replace it in config.json`,
			`$.dms.admin.user_id: placeholder value: replace it in config.json`,
			`$.models.default.secret: secret "openrouter-key" is not in secrets.json; set it with: choirctl secret set openrouter-key`,
			`$.gateways.telegram.secret: secret "telegram-bot-token" is not in secrets.json; set it with: choirctl secret set telegram-bot-token`,
			`$.postgres.secret: secret "postgres-admin" is not in secrets.json; set it with: choirctl secret set postgres-admin`,
		})
	})

	t.Run("ValidOnceFilledIn", func(t *testing.T) {
		t.Parallel()
		c := starter.Skeleton()
		c.Workspaces["main"] = config.Workspace{Path: "/srv/choir/main"}
		m := c.Models["default"]
		m.Model = "anthropic/claude-sonnet-4"
		c.Models["default"] = m
		c.DMs["admin"] = config.DM{Gateway: "telegram", UserID: "123456789", Admin: true}
		s := config.Secrets{"openrouter-key": "k", "telegram-bot-token": "t", "postgres-admin": "choir:pw"}
		if err := c.Validate(s); err != nil {
			t.Error(err)
		}
	})

	t.Run("MarshalRoundTrips", func(t *testing.T) {
		t.Parallel()
		c := starter.Skeleton()
		data, err := c.MarshalIndent()
		if err != nil {
			t.Fatal(err)
		}
		back, err := config.Parse(data)
		if err != nil {
			t.Fatalf("Parse: %v", err)
		}
		if !reflect.DeepEqual(back, c) {
			t.Errorf("round trip changed the skeleton:\n%s", data)
		}
		for _, section := range []string{`"tts": {}`, `"heartbeat_interval_ms": 5000`, `"approval_timeout_ms": 1800000`, `"temperature": null`} {
			if !strings.Contains(string(data), section) {
				t.Errorf("skeleton does not show %s:\n%s", section, data)
			}
		}
	})
}
