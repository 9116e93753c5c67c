package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/internal/choirdtest"
	"github.com/choirhq/choir/internal/logbuf"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/strictjson"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

// secondAgent adds an agent like assistant, whose schema name must be made
// from an id that is not an SQL identifier.
func secondAgent(cfg *config.Config, _ config.Secrets) {
	cfg.Agents["second-agent"] = cfg.Agents["assistant"]
}

// home writes a home with secondAgent's configuration for the database
// behind url, for a choird the test runs itself.
func home(t *testing.T, url string) string {
	t.Helper()
	return choirdtest.WriteHome(t, choirdtest.Options{DatabaseURL: url, Edit: secondAgent}).Dir
}

func TestRun(t *testing.T) {
	t.Parallel()

	t.Run("StartsInOrderReachesReadyAndStopsOnCancel", func(t *testing.T) {
		t.Parallel()
		d := choirdtest.Start(t, choirdtest.Options{Edit: secondAgent})
		ctx := context.Background()
		if d.ConfigVersion() < 1 {
			t.Errorf("config version %d", d.ConfigVersion())
		}
		var schemas int
		d.Pool().QueryRow(ctx, `SELECT count(*) FROM choir_control.agent_schemas
			WHERE schema_name IN ('choir_assistant', 'choir_second_agent') AND dimensions = 384`).Scan(&schemas)
		if schemas != 2 {
			t.Errorf("%d agent schemas provisioned, want 2", schemas)
		}
		if err := d.Stop(); err != nil {
			t.Fatalf("run: %v", err)
		}
		msgs := choirdtest.LogMessages(t, filepath.Join(d.Home, "logs", "choird.log"))
		want := []string{"choird starting", "step 1: config.json read and validated", "step 2: secrets.json read and validated",
			"step 3: connected to Postgres", "step 4: agent schema ready", "step 5: connection pool and job queues running",
			"choird ready", "choird stopping", "choird stopped"}
		i := 0
		for _, m := range msgs {
			if i < len(want) && m == want[i] {
				i++
			}
		}
		if i != len(want) {
			t.Errorf("log lacks %q in order; got %q", want[i], msgs)
		}
		if !strings.Contains(d.Logs.String(), `"msg":"choird ready"`) {
			t.Errorf("stderr does not carry the log")
		}
	})

	t.Run("SecondStartKeepsTheConfigVersionAndSchemas", func(t *testing.T) {
		t.Parallel()
		first := choirdtest.Start(t, choirdtest.Options{Edit: secondAgent})
		if v1, v2 := first.ConfigVersion(), first.Restart(t).ConfigVersion(); v1 != v2 {
			t.Errorf("config versions across restarts = %d, %d, want equal", v1, v2)
		}
	})

	t.Run("UnmigratedDatabaseIsRefusedWithTheCommandToRun", func(t *testing.T) {
		t.Parallel()
		dir := home(t, dbtest.NewEmptyDatabase(t))
		err := daemon.Run(context.Background(), daemon.Options{Home: dir, Stderr: &logbuf.Buffer{}})
		if !errors.Is(err, daemon.ErrNotMigrated) || !strings.Contains(err.Error(), "choirctl db migrate") {
			t.Fatalf("err = %v", err)
		}
	})

	t.Run("UnreachablePostgresIsOneLineNamingHostPortAndKey", func(t *testing.T) {
		t.Parallel()
		dir := home(t, "postgres://postgres@127.0.0.1:1/choir")
		err := daemon.Run(context.Background(), daemon.Options{Home: dir, Stderr: &logbuf.Buffer{}})
		if !errors.Is(err, choirsql.ErrUnreachable) {
			t.Fatalf("err = %v", err)
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, "127.0.0.1:1") || !strings.Contains(msg, "config.json postgres") {
			t.Errorf("err = %q", msg)
		}
	})

	t.Run("InvalidConfigIsRefusedBeforeAnythingStarts", func(t *testing.T) {
		t.Parallel()
		dir := home(t, dbtest.DefaultURL)
		os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"agents": {"x": {}}, "bogus": 1}`), 0o644)
		err := daemon.Run(context.Background(), daemon.Options{Home: dir, Stderr: &logbuf.Buffer{}})
		var cerr *strictjson.Error
		if !errors.As(err, &cerr) || !strings.Contains(err.Error(), "bogus") {
			t.Fatalf("err = %v", err)
		}
	})
}
