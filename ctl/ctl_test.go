package ctl_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/ctl"
	"github.com/choirhq/choir/dbtest"
	choirsql "github.com/choirhq/choir/sql"
)

type result struct {
	code           int
	stdout, stderr string
}

func run(t *testing.T, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	code := ctl.Run(context.Background(), args, &out, &errb)
	return result{code, out.String(), errb.String()}
}

// localInit runs `choirctl init --local` pointing at the Postgres database
// behind url.
func localInit(t *testing.T, home, url string) {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	r := run(t, "--home", home, "init", "--local", "--pg-host", cfg.Host,
		"--pg-port", strconv.Itoa(int(cfg.Port)), "--pg-database", cfg.Database)
	if r.code != 0 {
		t.Fatalf("init --local: %d %s", r.code, r.stderr)
	}
}

// migrationCount is the number of known migrations, SQL and Go.
func migrationCount(t *testing.T) int {
	t.Helper()
	vs, err := choirsql.Versions()
	if err != nil {
		t.Fatal(err)
	}
	return len(vs)
}

// latestMigration is the highest migration version.
func latestMigration(t *testing.T) int {
	t.Helper()
	vs, err := choirsql.Versions()
	if err != nil {
		t.Fatal(err)
	}
	return int(vs[len(vs)-1])
}

func TestInit(t *testing.T) {
	t.Parallel()

	t.Run("CreatesTheDirectoryStructureWithPrivateSecrets", func(t *testing.T) {
		t.Parallel()
		home := filepath.Join(t.TempDir(), ".choir.d")
		r := run(t, "--home", home, "init")
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
		for _, p := range []string{"config.json", "secrets.json", "repos/global", "repos/agents", "socks", "logs/archive"} {
			if _, err := os.Stat(filepath.Join(home, p)); err != nil {
				t.Errorf("missing %s: %v", p, err)
			}
		}
		st, err := os.Stat(filepath.Join(home, "secrets.json"))
		if err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("secrets.json mode = %v, %v; want 0600", st.Mode().Perm(), err)
		}
		if !strings.Contains(r.stdout, "db migrate") || !strings.Contains(r.stdout, "config validate") {
			t.Errorf("instructions missing steps:\n%s", r.stdout)
		}
		raw, err := os.ReadFile(filepath.Join(home, "config.json"))
		if err != nil || strings.Contains(string(raw), `"console"`) {
			t.Errorf("init without --local turned the console on: %v\n%s", err, raw)
		}
	})

	t.Run("RefusesToOverwriteAnExistingSetup", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		if r := run(t, "--home", home, "init"); r.code != 0 {
			t.Fatal(r.stderr)
		}
		if err := os.WriteFile(filepath.Join(home, "config.json"), []byte(`{"edited": true}`), 0o644); err != nil {
			t.Fatal(err)
		}
		r := run(t, "--home", home, "init", "--local")
		if r.code == 0 || !strings.Contains(r.stderr, "refusing to overwrite") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
		b, _ := os.ReadFile(filepath.Join(home, "config.json"))
		if string(b) != `{"edited": true}` {
			t.Errorf("config.json was changed: %s", b)
		}
	})

	t.Run("LocalConfigurationIsValid", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, dbtest.DefaultURL)
		r := run(t, "--home", home, "config", "validate")
		if r.code != 0 {
			t.Fatalf("validate: %d %s", r.code, r.stderr)
		}
		if _, err := os.Stat(filepath.Join(home, "workspaces", "main")); err != nil {
			t.Errorf("local workspace not created: %v", err)
		}
		// A local install has the web console on; choirctl init without
		// --local leaves it off.
		if cfg, _, err := config.Load(home); err != nil || cfg.Console == nil || cfg.Console.Address() != config.DefaultConsoleListen {
			t.Errorf("init --local console = %+v, %v", cfg.Console, err)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()

	t.Run("MalformedConfigReportsEveryProblemWithPathAndExit2", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, dbtest.DefaultURL)
		path := filepath.Join(home, "config.json")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatal(err)
		}
		agents := doc["agents"].(map[string]any)
		defaults := agents["assistant"].(map[string]any)["defaults"].(map[string]any)
		defaults["workspace"] = "no-such-workspace"
		defaults["wrkspace"] = "typo"
		doc["heartbeat_interval_ms"] = 5000
		doc["crash_detection_threshold_ms"] = 6000
		b, _ = json.MarshalIndent(doc, "", "  ")
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		r := run(t, "--home", home, "config", "validate")
		if r.code != 2 {
			t.Fatalf("exit %d, want 2; stderr %s", r.code, r.stderr)
		}
		for _, want := range []string{"wrkspace", "assistant"} {
			if !strings.Contains(r.stderr, want) {
				t.Errorf("stderr does not mention %q:\n%s", want, r.stderr)
			}
		}

		// Unknown fields stop parsing; fix that one and the reference and
		// range problems must be reported together.
		delete(defaults, "wrkspace")
		b, _ = json.MarshalIndent(doc, "", "  ")
		os.WriteFile(path, b, 0o644)
		r = run(t, "--home", home, "config", "validate", "--json")
		if r.code != 2 {
			t.Fatalf("exit %d, want 2", r.code)
		}
		var out struct {
			Valid    bool
			Problems []struct{ Path, Message string }
		}
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("--json output: %v\n%s", err, r.stdout)
		}
		paths := map[string]bool{}
		for _, p := range out.Problems {
			paths[p.Path] = true
		}
		if out.Valid || !paths[`$.agents.assistant.defaults.workspace`] || !paths[`$.crash_detection_threshold_ms`] {
			t.Errorf("problems = %+v", out.Problems)
		}
	})

	t.Run("TrailingDataAndDuplicateKeysAreErrors", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, dbtest.DefaultURL)
		path := filepath.Join(home, "config.json")
		b, _ := os.ReadFile(path)
		for name, bad := range map[string]string{
			"trailing":  string(b) + "\n{}",
			"duplicate": strings.Replace(string(b), "{", `{"heartbeat_interval_ms": 5000, "heartbeat_interval_ms": 5000,`, 1),
		} {
			os.WriteFile(path, []byte(bad), 0o644)
			r := run(t, "--home", home, "config", "validate")
			if r.code != 2 {
				t.Errorf("%s: exit %d, want 2: %s", name, r.code, r.stderr)
			}
		}
	})

	t.Run("InsecureSecretsFileIsRefusedWithTheFix", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, dbtest.DefaultURL)
		os.Chmod(filepath.Join(home, "secrets.json"), 0o644)
		r := run(t, "--home", home, "config", "validate")
		if r.code != 2 || !strings.Contains(r.stderr, "chmod 600") {
			t.Fatalf("exit %d, stderr %q", r.code, r.stderr)
		}
	})
}

func TestDBMigrate(t *testing.T) {
	t.Parallel()

	t.Run("InitThenMigrateCreatesEveryTableDownToZeroAndBackUp", func(t *testing.T) {
		t.Parallel()
		url := dbtest.NewEmptyDatabase(t)
		home := t.TempDir()
		localInit(t, home, url)

		r := run(t, "--home", home, "db", "migrate")
		if r.code != 0 {
			t.Fatalf("migrate: %d %s", r.code, r.stderr)
		}
		n, latest := migrationCount(t), latestMigration(t)
		if !strings.Contains(r.stdout, "00003_river.go") || !strings.Contains(r.stdout, fmt.Sprintf("schema version %d of %d", latest, latest)) {
			t.Errorf("migrate output:\n%s", r.stdout)
		}
		conn, err := pgx.Connect(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(context.Background())
		var tables int
		conn.QueryRow(context.Background(), `SELECT count(*) FROM information_schema.tables
			WHERE (table_schema, table_name) IN (('choir_control', 'sessions'), ('choir_control', 'session_events'),
				('choir_control', 'resource_leases'), ('choir_control', 'pending_approvals'), ('choir_control', 'inbox'),
				('choir_control', 'outbox'), ('public', 'river_job'), ('public', 'river_queue'), ('public', 'river_leader'))`).Scan(&tables)
		if tables != 9 {
			t.Errorf("%d of the 9 control and River tables checked exist", tables)
		}

		r = run(t, "--home", home, "db", "migrate", "status", "--json")
		var st []struct {
			Version int64
			Applied bool
		}
		if err := json.Unmarshal([]byte(r.stdout), &st); err != nil || len(st) != n || !st[n-1].Applied {
			t.Fatalf("status --json: %v %+v", err, st)
		}

		if r = run(t, "--home", home, "db", "migrate", "down", "--to", "0"); r.code != 0 {
			t.Fatalf("down --to 0: %s", r.stderr)
		}
		if r = run(t, "--home", home, "db", "migrate", "version"); !strings.Contains(r.stdout, fmt.Sprintf("schema version 0 of %d", latest)) {
			t.Errorf("version after down: %q", r.stdout)
		}
		if r = run(t, "--home", home, "db", "migrate", "up"); r.code != 0 {
			t.Fatalf("up again: %s", r.stderr)
		}
		if r = run(t, "--home", home, "db", "migrate", "redo"); r.code != 0 {
			t.Fatalf("redo: %s", r.stderr)
		}
	})

	t.Run("DatabaseURLFlagOverridesConfig", func(t *testing.T) {
		t.Parallel()
		url := dbtest.NewEmptyDatabase(t)
		r := run(t, "--home", t.TempDir(), "db", "migrate", "--database-url", url)
		if r.code != 0 {
			t.Fatalf("exit %d: %s", r.code, r.stderr)
		}
	})

	t.Run("UnreachablePostgresGetsOneLineNamingHostPortAndKey", func(t *testing.T) {
		t.Parallel()
		home := t.TempDir()
		localInit(t, home, "postgres://postgres@127.0.0.1:1/choir")
		r := run(t, "--home", home, "db", "migrate")
		if r.code != 1 {
			t.Fatalf("exit %d", r.code)
		}
		line := strings.TrimSpace(r.stderr)
		if strings.Contains(line, "\n") {
			t.Errorf("error spans several lines:\n%s", line)
		}
		for _, want := range []string{"127.0.0.1:1", "config.json postgres.host/postgres.port"} {
			if !strings.Contains(line, want) {
				t.Errorf("error %q does not name %q", line, want)
			}
		}
		r = run(t, "db", "migrate", "--database-url", "postgres://postgres@127.0.0.1:1/x")
		if !strings.Contains(r.stderr, "127.0.0.1:1 (from --database-url)") {
			t.Errorf("flag error %q", r.stderr)
		}
	})

	t.Run("UnknownActionIsAUsageError", func(t *testing.T) {
		t.Parallel()
		if r := run(t, "db", "migrate", "sideways"); r.code != 2 {
			t.Errorf("exit %d, want 2: %s", r.code, r.stderr)
		}
	})
}

func TestAgentInit(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	localInit(t, home, dbtest.DefaultURL)
	repo := filepath.Join(t.TempDir(), "agent-two.git")
	r := run(t, "--home", home, "agent", "init", "agent-two", "--repo-dir", repo)
	if r.code != 0 {
		t.Fatalf("init: %s", r.stderr)
	}
	b, _ := os.ReadFile(filepath.Join(home, "config.json"))
	if !strings.Contains(string(b), `"agent-two"`) || !strings.Contains(string(b), "file://"+repo) {
		t.Errorf("config.json lacks the agent:\n%s", b)
	}
	out, err := exec.Command("git", "--git-dir", repo, "ls-tree", "-r", "--name-only", "main").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "identity/SOUL-CORE.md") || !strings.Contains(string(out), "Dockerfile") {
		t.Errorf("scaffolded repo: %s %v", out, err)
	}
	// Placeholders are reported until filled in.
	if r := run(t, "--home", home, "config", "validate"); r.code != 2 || !strings.Contains(r.stderr, "agent-two") {
		t.Errorf("validate with placeholders: %d %s", r.code, r.stderr)
	}
	if r := run(t, "--home", home, "agent", "init", "agent-two"); r.code == 0 {
		t.Error("a second init of the same agent succeeded")
	}
	if r := run(t, "--home", home, "agent", "init", "Bad Name"); r.code != 2 {
		t.Errorf("bad id: exit %d", r.code)
	}
}
