// Package sql holds Choir's database schema as goose migrations, embedded in
// the binary, and the Migrator that applies them: the choir_control tables,
// River's tables (through rivermigrate, pinned to one River schema version),
// the per-agent schema provisioning function and the choir_audit views. It
// also holds the connector (Connect) and the one seam where database errors
// become named errors (Interpreted, Interpret): not found, unique
// violation, serialization failure and unavailable.
package sql

import (
	"context"
	stdsql "database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed *.sql
var migrations embed.FS

// FS returns the embedded SQL migrations (the Go migration for River's
// tables is registered separately by NewMigrator).
func FS() fs.FS { return migrations }

// RiverSchemaVersion is the River migration version that RiverMigration
// brings the database to. It is pinned, not "latest", so that upgrading the
// River module never changes the schema behind the operator's back: a River
// release with a new migration needs a new goose migration that raises the
// target, and TestRiverSchemaPinned fails until one exists.
const RiverSchemaVersion = 8

// RiverMigrationVersion is the goose version of the Go migration that
// creates River's tables.
const RiverMigrationVersion = 3

// Migrator applies Choir's migrations to one database.
type Migrator struct {
	// extension is the extension that must be available: always "vector",
	// but a test points it at a missing one to see the refusal.
	extension string
	pool      *pgxpool.Pool
	db        *stdsql.DB
	provider  *goose.Provider
}

// ErrPgvectorMissing reports a Postgres server without the pgvector
// extension available.
var ErrPgvectorMissing = errors.New("the pgvector extension is not installed on this Postgres server")

// ErrRumMissing reports a Postgres server without the RUM extension, whose
// index ranks full-text matches in memory search (sql/00026_text_ranking.sql).
var ErrRumMissing = errors.New("the rum extension is not installed on this Postgres server")

// NewMigrator prepares a migrator on pool. The pool must not register
// pgvector types in AfterConnect: before the first migration the extension
// does not exist yet. Two migrators on one database never collide: goose's
// Postgres session locker makes the second wait for the first.
func NewMigrator(pool *pgxpool.Pool, logger *slog.Logger) (*Migrator, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 600))
	if err != nil {
		return nil, fmt.Errorf("create migration locker: %w", err)
	}
	m := &Migrator{extension: "vector", pool: pool, db: stdlib.OpenDBFromPool(pool)}
	river := goose.NewGoMigration(RiverMigrationVersion,
		&goose.GoFunc{RunDB: func(ctx context.Context, _ *stdsql.DB) error {
			return m.migrateRiver(ctx, rivermigrate.DirectionUp, RiverSchemaVersion, logger)
		}},
		&goose.GoFunc{RunDB: func(ctx context.Context, _ *stdsql.DB) error {
			return m.migrateRiver(ctx, rivermigrate.DirectionDown, -1, logger)
		}},
	)
	provider, err := goose.NewProvider(goose.DialectPostgres, m.db, migrations,
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
		goose.WithGoMigrations(river, partsMigration()),
	)
	if err != nil {
		m.db.Close()
		return nil, fmt.Errorf("load migrations: %w", err)
	}
	m.provider = provider
	return m, nil
}

// Close releases the migrator's database handle (not the pool).
func (m *Migrator) Close() error { return m.db.Close() }

func (m *Migrator) migrateRiver(ctx context.Context, dir rivermigrate.Direction, target int, logger *slog.Logger) error {
	rm, err := rivermigrate.New(riverpgxv5.New(m.pool), &rivermigrate.Config{Logger: logger})
	if err != nil {
		return fmt.Errorf("create river migrator: %w", err)
	}
	res, err := rm.Migrate(ctx, dir, &rivermigrate.MigrateOpts{TargetVersion: target})
	if err != nil {
		return fmt.Errorf("river migrate %s to %d: %w", dir, target, err)
	}
	for _, v := range res.Versions {
		logger.InfoContext(ctx, "river migration applied", slog.String("direction", string(dir)),
			slog.Int("version", v.Version), slog.String("name", v.Name))
	}
	return nil
}

// checkPgvector fails with instructions when pgvector or RUM cannot be
// created.
func (m *Migrator) checkPgvector(ctx context.Context) error {
	var vector, rum bool
	err := m.pool.QueryRow(ctx,
		`SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = $1),
		        EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'rum')`, m.extension).Scan(&vector, &rum)
	if err != nil {
		return fmt.Errorf("check for pgvector and rum: %w", err)
	}
	if !vector {
		return fmt.Errorf("%w; install it on the database host: on Debian 12 run scripts/devpg.sh start "+
			"(it builds pgvector from Debian's source package), elsewhere install your distribution's "+
			"postgresql-<version>-pgvector package or build it from https://github.com/pgvector/pgvector",
			ErrPgvectorMissing)
	}
	if !rum {
		return fmt.Errorf("%w; install it on the database host: on Debian 12 run scripts/devpg.sh start "+
			"or apt-get install postgresql-15-rum, elsewhere your distribution's postgresql-<version>-rum "+
			"package or https://github.com/postgrespro/rum", ErrRumMissing)
	}
	return nil
}

// Result is one migration applied or rolled back.
type Result struct {
	Version  int64  `json:"version"`
	Source   string `json:"source"`
	Duration string `json:"duration"`
}

func results(rs []*goose.MigrationResult) []Result {
	out := make([]Result, 0, len(rs))
	for _, r := range rs {
		out = append(out, Result{Version: r.Source.Version, Source: sourceName(r.Source), Duration: r.Duration.String()})
	}
	return out
}

// GoMigrationVersions are the versions of the migrations written in Go,
// beside the embedded SQL files: River's tables, and the adoption of
// agent_schema_parts.
var GoMigrationVersions = []int64{RiverMigrationVersion, PartsMigrationVersion}

// Versions are the versions of every known migration, SQL and Go, in
// ascending order (they have gaps: each area of the schema owns a range
// of numbers).
func Versions() ([]int64, error) {
	files, err := fs.Glob(migrations, "*.sql")
	if err != nil {
		return nil, err
	}
	vs := slices.Clone(GoMigrationVersions)
	for _, f := range files {
		v, err := strconv.ParseInt(strings.SplitN(f, "_", 2)[0], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("migration %s has no version: %w", f, err)
		}
		vs = append(vs, v)
	}
	slices.Sort(vs)
	return vs, nil
}

func sourceName(s *goose.Source) string {
	switch {
	case s.Path != "":
		return s.Path
	case s.Version == PartsMigrationVersion:
		return fmt.Sprintf("%05d_schema_parts.go", s.Version)
	}
	return fmt.Sprintf("%05d_river.go", s.Version)
}

// Up applies every pending migration.
func (m *Migrator) Up(ctx context.Context) ([]Result, error) {
	if err := m.checkPgvector(ctx); err != nil {
		return nil, err
	}
	rs, err := m.provider.Up(ctx)
	return results(rs), migrationErr("up", err)
}

// UpTo applies pending migrations up to and including version.
func (m *Migrator) UpTo(ctx context.Context, version int64) ([]Result, error) {
	if err := m.checkPgvector(ctx); err != nil {
		return nil, err
	}
	rs, err := m.provider.UpTo(ctx, version)
	return results(rs), migrationErr("up", err)
}

// Down rolls back the most recent migration.
func (m *Migrator) Down(ctx context.Context) ([]Result, error) {
	r, err := m.provider.Down(ctx)
	if r == nil {
		return nil, migrationErr("down", err)
	}
	return results([]*goose.MigrationResult{r}), migrationErr("down", err)
}

// DownTo rolls back every migration above version (0 removes everything).
func (m *Migrator) DownTo(ctx context.Context, version int64) ([]Result, error) {
	rs, err := m.provider.DownTo(ctx, version)
	return results(rs), migrationErr("down", err)
}

// Redo rolls back the most recent migration and applies it again.
func (m *Migrator) Redo(ctx context.Context) ([]Result, error) {
	down, err := m.Down(ctx)
	if err != nil {
		return down, err
	}
	up, err := m.UpTo(ctx, down[0].Version)
	return append(down, up...), err
}

// Status is the state of one known migration.
type Status struct {
	Version   int64  `json:"version"`
	Source    string `json:"source"`
	Applied   bool   `json:"applied"`
	AppliedAt string `json:"applied_at,omitempty"`
}

// Status lists every known migration and whether it is applied.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	ss, err := m.provider.Status(ctx)
	if err != nil {
		return nil, migrationErr("status", err)
	}
	out := make([]Status, 0, len(ss))
	for _, s := range ss {
		st := Status{Version: s.Source.Version, Source: sourceName(s.Source), Applied: s.State == goose.StateApplied}
		if st.Applied && !s.AppliedAt.IsZero() {
			st.AppliedAt = s.AppliedAt.UTC().Format("2006-01-02T15:04:05Z")
		}
		out = append(out, st)
	}
	return out, nil
}

// Version returns the current schema version and the latest one known.
func (m *Migrator) Version(ctx context.Context) (current, latest int64, err error) {
	current, err = m.provider.GetDBVersion(ctx)
	if err != nil {
		return 0, 0, migrationErr("version", err)
	}
	srcs := m.provider.ListSources()
	if len(srcs) > 0 {
		latest = srcs[len(srcs)-1].Version
	}
	return current, latest, nil
}

// Pending reports whether any migration is not yet applied.
func (m *Migrator) Pending(ctx context.Context) (bool, error) {
	p, err := m.provider.HasPending(ctx)
	return p, migrationErr("check pending", err)
}

func migrationErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("migrate %s: %w", op, err)
}
