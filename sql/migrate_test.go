package sql_test

import (
	"context"
	"errors"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"

	"github.com/choirhq/choir/dbtest"
	choirsql "github.com/choirhq/choir/sql"
)

func newMigrator(t *testing.T, url string) (*choirsql.Migrator, *pgxpool.Pool) {
	t.Helper()
	pool, err := pgxpool.New(context.Background(), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	m, err := choirsql.NewMigrator(pool, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, pool
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
func latestMigration(t *testing.T) int64 {
	t.Helper()
	vs, err := choirsql.Versions()
	if err != nil {
		t.Fatal(err)
	}
	return int64(vs[len(vs)-1])
}

func containsAll(got, want []string) bool {
	for _, w := range want {
		if !slices.Contains(got, w) {
			return false
		}
	}
	return true
}

func relations(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(),
		`SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		  WHERE n.nspname = $1 AND c.relkind IN ('r', 'v') ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestMigrate(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("UpCreatesEveryTableDownRemovesThemUpAgainWorks", func(t *testing.T) {
		t.Parallel()
		m, pool := newMigrator(t, dbtest.NewEmptyDatabase(t))

		res, err := m.Up(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(res) != migrationCount(t) {
			t.Fatalf("applied %d migrations, want %d: %+v", len(res), migrationCount(t), res)
		}
		wantControl := []string{"agent_schemas", "agents", "config_versions", "inbox", "outbox",
			"pending_approvals", "resource_leases", "rpc_replays", "session_events", "session_snapshots", "sessions"}
		if got := relations(t, pool, "choir_control"); !containsAll(got, wantControl) {
			t.Errorf("choir_control relations = %v, want at least %v", got, wantControl)
		}
		wantAudit := []string{"approvals", "chain_breaks", "leases", "llm_calls", "replication", "session_timeline", "tool_calls"}
		if got := relations(t, pool, "choir_audit"); !containsAll(got, wantAudit) {
			t.Errorf("choir_audit views = %v, want %v", got, wantAudit)
		}
		public := relations(t, pool, "public")
		for _, want := range []string{"river_job", "river_leader", "river_queue", "river_migration", "goose_db_version"} {
			if !slices.Contains(public, want) {
				t.Errorf("public lacks %s: %v", want, public)
			}
		}
		cur, latest, err := m.Version(ctx)
		if err != nil || cur != latest || latest != latestMigration(t) {
			t.Fatalf("version = %d of %d (%v), want %d of %[4]d", cur, latest, err, latestMigration(t))
		}

		if _, err := m.DownTo(ctx, 0); err != nil {
			t.Fatal(err)
		}
		for _, schema := range []string{"choir_control", "choir_audit"} {
			if got := relations(t, pool, schema); len(got) != 0 {
				t.Errorf("after down, %s still has %v", schema, got)
			}
		}
		if got := relations(t, pool, "public"); !slices.Equal(got, []string{"goose_db_version"}) {
			t.Errorf("after down, public has %v, want only goose_db_version", got)
		}

		if _, err := m.Up(ctx); err != nil {
			t.Fatalf("up after down: %v", err)
		}
		if got := relations(t, pool, "choir_control"); !containsAll(got, wantControl) {
			t.Errorf("after up again, choir_control = %v", got)
		}
	})

	t.Run("DownToZeroDropsProvisionedAgentSchemas", func(t *testing.T) {
		t.Parallel()
		m, pool := newMigrator(t, dbtest.NewEmptyDatabase(t))
		if _, err := m.Up(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, "SELECT choir_control.provision_agent('mig-down', 8)"); err != nil {
			t.Fatal(err)
		}
		if _, err := m.DownTo(ctx, 0); err != nil {
			t.Fatal(err)
		}
		if got := relations(t, pool, "choir_mig_down"); len(got) != 0 {
			t.Errorf("agent schema survived down: %v", got)
		}
	})

	t.Run("RedoRollsBackAndReappliesTheLatest", func(t *testing.T) {
		t.Parallel()
		m, _ := newMigrator(t, dbtest.NewEmptyDatabase(t))
		if _, err := m.Up(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := m.Redo(ctx)
		if err != nil {
			t.Fatal(err)
		}
		last := latestMigration(t)
		if len(res) != 2 || res[0].Version != last || res[1].Version != last {
			t.Fatalf("redo results = %+v", res)
		}
		if cur, latest, err := m.Version(ctx); err != nil || cur != latest {
			t.Errorf("after redo, version %d of %d, %v", cur, latest, err)
		}
	})

	t.Run("TwoMigratorsAtOnceOneWaitsNeitherCorrupts", func(t *testing.T) {
		t.Parallel()
		url := dbtest.NewEmptyDatabase(t)
		m1, _ := newMigrator(t, url)
		m2, pool := newMigrator(t, url)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		for i, m := range []*choirsql.Migrator{m1, m2} {
			wg.Go(func() { _, errs[i] = m.Up(ctx) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Errorf("migrator %d: %v", i, err)
			}
		}
		var applied int
		if err := pool.QueryRow(ctx,
			"SELECT count(*) FROM goose_db_version WHERE version_id > 0 AND is_applied").Scan(&applied); err != nil {
			t.Fatal(err)
		}
		if applied != migrationCount(t) {
			t.Errorf("goose recorded %d applied migrations, want %d (each once)", applied, migrationCount(t))
		}
		var riverVersions int
		if err := pool.QueryRow(ctx, "SELECT count(*) FROM river_migration").Scan(&riverVersions); err != nil {
			t.Fatal(err)
		}
		if riverVersions != choirsql.RiverSchemaVersion {
			t.Errorf("river_migration has %d rows, want %d", riverVersions, choirsql.RiverSchemaVersion)
		}
	})

	t.Run("StatusListsEveryMigration", func(t *testing.T) {
		t.Parallel()
		m, _ := newMigrator(t, dbtest.NewEmptyDatabase(t))
		if _, err := m.UpTo(ctx, 2); err != nil {
			t.Fatal(err)
		}
		st, err := m.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(st) != migrationCount(t) {
			t.Fatalf("status has %d rows, want %d", len(st), migrationCount(t))
		}
		for _, s := range st {
			if want := s.Version <= 2; s.Applied != want {
				t.Errorf("migration %d (%s) applied = %v, want %v", s.Version, s.Source, s.Applied, want)
			}
		}
		if st[2].Source != "00003_river.go" {
			t.Errorf("river migration source = %q", st[2].Source)
		}
		pending, err := m.Pending(ctx)
		if err != nil || !pending {
			t.Errorf("pending = %v, %v; want true", pending, err)
		}
	})
}

// TestRiverSchemaPinned fails when the River module is upgraded to a release
// that ships a migration beyond RiverSchemaVersion: add a goose migration
// that runs rivermigrate up to the new version, then raise the pin.
func TestRiverSchemaPinned(t *testing.T) {
	t.Parallel()
	rm, err := rivermigrate.New(riverpgxv5.New(nil), nil)
	if err != nil {
		t.Fatal(err)
	}
	all := rm.AllVersions()
	if latest := all[len(all)-1].Version; latest != choirsql.RiverSchemaVersion {
		t.Fatalf("the River module ships schema version %d but sql.RiverSchemaVersion is %d: "+
			"add a goose Go migration that runs rivermigrate to %d and raise the pin",
			latest, choirsql.RiverSchemaVersion, latest)
	}
	const pinnedModule = "v0.51.1"
	info, ok := debug.ReadBuildInfo()
	if !ok {
		t.Fatal("no build info in the test binary")
	}
	for _, dep := range info.Deps {
		if dep.Path == "github.com/riverqueue/river" && dep.Version != pinnedModule {
			t.Fatalf("github.com/riverqueue/river is %s, the schema was pinned at %s: check its "+
				"migrations against sql.RiverSchemaVersion, then update pinnedModule here", dep.Version, pinnedModule)
		}
	}
}

func TestMigrateWithoutPgvectorSaysHowToInstall(t *testing.T) {
	t.Parallel()
	m, pool := newMigrator(t, dbtest.NewEmptyDatabase(t))
	choirsql.SetRequiredExtension(m, "vector_not_installed_anywhere")
	_, err := m.Up(context.Background())
	if !errors.Is(err, choirsql.ErrPgvectorMissing) {
		t.Fatalf("err = %v, want ErrPgvectorMissing", err)
	}
	for _, want := range []string{"scripts/devpg.sh start", "pgvector"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if got := relations(t, pool, "public"); len(got) != 0 {
		t.Errorf("a refused migration wrote %v", got)
	}
}
