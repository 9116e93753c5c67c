// Package dbtest gives each test a real, fully migrated Postgres database.
//
// A template database is migrated once per migration set (its name carries a
// hash of the embedded migrations, so concurrent test binaries and later runs
// share it), and every test gets a clone of it made with CREATE DATABASE ...
// TEMPLATE, which costs milliseconds. Tests that only need a scratch
// transaction can use Tx, which rolls back at cleanup.
//
// The server comes from CHOIR_TEST_DATABASE_URL, defaulting to the cluster
// that scripts/devpg.sh starts. A missing or unreachable server fails the
// test with instructions: tests that need Postgres never skip.
package dbtest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxvec "github.com/pgvector/pgvector-go/pgx"

	choirsql "github.com/choirhq/choir/sql"
)

// DefaultURL is the server scripts/devpg.sh starts.
const DefaultURL = "postgres://postgres@127.0.0.1:55432/choir?sslmode=disable"

// ServerURL returns the URL of the test server's maintenance database.
func ServerURL() string {
	if u := os.Getenv("CHOIR_TEST_DATABASE_URL"); u != "" {
		return u
	}
	return DefaultURL
}

var (
	templateOnce sync.Once
	templateName string
	templateErr  error
	cloneSeq     atomic.Int64
)

// lockTemplate serialises template builds across test processes.
const lockTemplate = 0x63686f6972 // "choir"

// URLFor returns the server URL with its database replaced by name.
func URLFor(name string) (string, error) {
	cfg, err := pgx.ParseConfig(ServerURL())
	if err != nil {
		return "", fmt.Errorf("parse CHOIR_TEST_DATABASE_URL: %w", err)
	}
	return replaceDatabase(ServerURL(), cfg.Database, name), nil
}

func replaceDatabase(url, old, name string) string {
	if i := strings.Index(url, "/"+old); old != "" && i >= 0 && strings.Contains(url, "://") {
		return url[:i] + "/" + name + url[i+1+len(old):]
	}
	if strings.Contains(url, "://") {
		return url + "/" + name
	}
	return url + " dbname=" + name
}

func fail(t testing.TB, err error) {
	t.Helper()
	t.Fatalf("dbtest: %v\n\nTests need PostgreSQL 15 with pgvector. Start the throwaway cluster with\n"+
		"  scripts/devpg.sh start\nor point CHOIR_TEST_DATABASE_URL at a server where this user may create databases.", err)
}

// migrationsHash identifies the migration set, so a changed migration gets
// a new template instead of a stale one.
func migrationsHash() (string, error) {
	h := sha256.New()
	fmt.Fprintf(h, "river=%d go=%v\n", choirsql.RiverSchemaVersion, choirsql.GoMigrationVersions)
	err := fs.WalkDir(choirsql.FS(), ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := fs.ReadFile(choirsql.FS(), path)
		if err != nil {
			return err
		}
		fmt.Fprintf(h, "%s %d\n", path, len(b))
		h.Write(b)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))[:16], err
}

// Template returns the name of the migrated template database, building it
// on first use.
func Template(ctx context.Context) (string, error) {
	templateOnce.Do(func() { templateName, templateErr = buildTemplate(ctx) })
	return templateName, templateErr
}

func buildTemplate(ctx context.Context) (string, error) {
	hash, err := migrationsHash()
	if err != nil {
		return "", fmt.Errorf("hash migrations: %w", err)
	}
	name := "choir_tpl_" + hash
	conn, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return "", fmt.Errorf("connect to %s: %w", ServerURL(), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockTemplate); err != nil {
		return "", fmt.Errorf("lock template build: %w", err)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", lockTemplate) //nolint:errcheck

	dropStale(ctx, conn)
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_database WHERE datname = $1)", name).Scan(&exists); err != nil {
		return "", fmt.Errorf("look up template: %w", err)
	}
	if exists {
		return name, nil
	}
	// Build under a temporary name and rename at the end, so no clone can
	// ever start from a half-migrated template.
	build := fmt.Sprintf("choir_tplbuild_%s_%d", hash, os.Getpid())
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{build}.Sanitize()); err != nil {
		return "", fmt.Errorf("drop leftover template build: %w", err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{build}.Sanitize()); err != nil {
		return "", fmt.Errorf("create template: %w", err)
	}
	if err := migrate(ctx, build); err != nil {
		return "", err
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+pgx.Identifier{build}.Sanitize()+" RENAME TO "+pgx.Identifier{name}.Sanitize()); err != nil {
		return "", fmt.Errorf("rename template: %w", err)
	}
	return name, nil
}

func migrate(ctx context.Context, name string) error {
	url, err := URLFor(name)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		return fmt.Errorf("connect to template: %w", err)
	}
	defer pool.Close()
	m, err := choirsql.NewMigrator(pool, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		return fmt.Errorf("migrate template: %w", err)
	}
	return nil
}

// dropStale drops test databases left by processes that no longer run
// (a killed test binary cannot clean up after itself) and templates of
// older migration sets. Dropping at the start of a run, not at the end of
// each test, keeps DROP DATABASE's wait off the tests' critical path.
func dropStale(ctx context.Context, conn *pgx.Conn) {
	rows, err := conn.Query(ctx, `SELECT datname FROM pg_database
		WHERE datname LIKE 'choir\_t\_%' OR datname LIKE 'choir\_tplbuild\_%'`)
	if err != nil {
		return
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return
	}
	for _, n := range names {
		parts := strings.Split(n, "_")
		// choir_t_<pid>_<seq> and choir_tplbuild_<hash>_<pid>
		pid, err := strconv.Atoi(parts[len(parts)-2])
		if strings.HasPrefix(n, "choir_tplbuild_") {
			pid, err = strconv.Atoi(parts[len(parts)-1])
		}
		if err != nil || processAlive(pid) {
			continue
		}
		conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{n}.Sanitize()+" WITH (FORCE)") //nolint:errcheck
	}
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// NewDatabase clones the template into a new database for t and returns its
// URL. The database is dropped when the test ends.
func NewDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tpl, err := Template(ctx)
	if err != nil {
		fail(t, err)
	}
	name := fmt.Sprintf("choir_t_%d_%d", os.Getpid(), cloneSeq.Add(1))
	if err := createFrom(ctx, name, tpl); err != nil {
		fail(t, err)
	}
	t.Cleanup(func() { dropDatabase(name) })
	url, err := URLFor(name)
	if err != nil {
		fail(t, err)
	}
	return url
}

// NewEmptyDatabase creates an empty database (no migrations) for t, for
// tests of the migrations themselves.
func NewEmptyDatabase(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := fmt.Sprintf("choir_t_%d_%d", os.Getpid(), cloneSeq.Add(1))
	if err := createFrom(ctx, name, "template0"); err != nil {
		fail(t, err)
	}
	t.Cleanup(func() { dropDatabase(name) })
	url, err := URLFor(name)
	if err != nil {
		fail(t, err)
	}
	return url
}

func createFrom(ctx context.Context, name, tpl string) error {
	conn, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return fmt.Errorf("connect to %s: %w", ServerURL(), err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+
		" TEMPLATE "+pgx.Identifier{tpl}.Sanitize()+" STRATEGY FILE_COPY")
	if err != nil {
		return fmt.Errorf("create database %s from %s: %w", name, tpl, err)
	}
	return nil
}

func dropDatabase(name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, ServerURL())
	if err != nil {
		return // dropStale removes it on the next run
	}
	defer conn.Close(ctx)
	conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") //nolint:errcheck
}

// NewPool clones the template for t and returns a pool on the clone, with
// pgvector's types registered. The pool is closed when the test ends.
func NewPool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	return Connect(t, NewDatabase(t))
}

// Connect opens a pool on url with pgvector's types registered and closes
// it when the test ends.
func Connect(t testing.TB, url string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		fail(t, err)
	}
	cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error { return pgxvec.RegisterTypes(ctx, c) }
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(pool.Close)
	return pool
}

var (
	sharedOnce sync.Once
	sharedPool *pgxpool.Pool
	sharedErr  error
)

// Tx returns a transaction on a migrated database shared by the tests of
// this process; it is rolled back when the test ends, so tests cannot see
// each other's rows.
func Tx(t testing.TB) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	sharedOnce.Do(func() {
		tpl, err := Template(ctx)
		if err != nil {
			sharedErr = err
			return
		}
		name := fmt.Sprintf("choir_t_%d_%d", os.Getpid(), cloneSeq.Add(1))
		if sharedErr = createFrom(ctx, name, tpl); sharedErr != nil {
			return
		}
		url, err := URLFor(name)
		if err != nil {
			sharedErr = err
			return
		}
		cfg, err := pgxpool.ParseConfig(url)
		if err != nil {
			sharedErr = err
			return
		}
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error { return pgxvec.RegisterTypes(ctx, c) }
		sharedPool, sharedErr = pgxpool.NewWithConfig(ctx, cfg)
	})
	if sharedErr != nil {
		fail(t, sharedErr)
	}
	tx, err := sharedPool.Begin(ctx)
	if err != nil {
		fail(t, err)
	}
	t.Cleanup(func() { tx.Rollback(context.Background()) }) //nolint:errcheck
	return tx
}
