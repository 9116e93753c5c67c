package sql_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/dbtest"
	choirsql "github.com/choirhq/choir/sql"
)

// named is every named error, to check that an error is exactly one of them.
var named = []error{choirsql.ErrNotFound, choirsql.ErrUniqueViolation, choirsql.ErrSerialization, choirsql.ErrUnavailable}

func assertNamed(t *testing.T, err, want error) {
	t.Helper()
	for _, n := range named {
		if got := errors.Is(err, n); got != (n == want) {
			t.Fatalf("errors.Is(%v, %v) = %v, want %v", err, n, got, n == want)
		}
	}
}

func TestInterpret(t *testing.T) {
	t.Parallel()
	pool := dbtest.NewPool(t)
	ctx := t.Context()
	q := choirsql.Interpreted(pool)
	if _, err := pool.Exec(ctx, `CREATE TABLE seam (id int PRIMARY KEY, n int NOT NULL DEFAULT 0)`); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO seam (id) VALUES (1)`); err != nil {
		t.Fatal(err)
	}

	t.Run("NoRowIsNotFoundAndStillErrNoRows", func(t *testing.T) {
		var n int
		err := q.QueryRow(ctx, `SELECT n FROM seam WHERE id = 99`).Scan(&n)
		assertNamed(t, err, choirsql.ErrNotFound)
		if !errors.Is(err, pgx.ErrNoRows) {
			t.Fatalf("the driver's error left the chain: %v", err)
		}
	})
	t.Run("DuplicateKeyIsUniqueViolation", func(t *testing.T) {
		_, err := q.Exec(ctx, `INSERT INTO seam (id) VALUES (1)`)
		assertNamed(t, err, choirsql.ErrUniqueViolation)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.ConstraintName != "seam_pkey" {
			t.Fatalf("the PgError left the chain: %v", err)
		}
	})
	t.Run("ConcurrentUpdateIsSerializationFailure", func(t *testing.T) {
		tx, err := pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead})
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(ctx)
		var n int
		if err := tx.QueryRow(ctx, `SELECT n FROM seam WHERE id = 1`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE seam SET n = n + 1 WHERE id = 1`); err != nil {
			t.Fatal(err)
		}
		_, err = choirsql.Interpreted(tx).Exec(ctx, `UPDATE seam SET n = n + 1 WHERE id = 1`)
		assertNamed(t, err, choirsql.ErrSerialization)
	})
	t.Run("StatementTimeoutIsUnavailable", func(t *testing.T) {
		conn, err := pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Release()
		if _, err := conn.Exec(ctx, `SET statement_timeout = 20`); err != nil {
			t.Fatal(err)
		}
		defer conn.Exec(context.WithoutCancel(ctx), `RESET statement_timeout`)
		rows, err := choirsql.Interpreted(conn.Conn()).Query(ctx, `SELECT pg_sleep(5)`)
		if err == nil {
			for rows.Next() {
			}
			err = rows.Err()
		}
		assertNamed(t, err, choirsql.ErrUnavailable)
	})
	t.Run("OtherErrorsPassUnnamed", func(t *testing.T) {
		_, err := q.Exec(ctx, `SELECT 1/0`)
		assertNamed(t, err, nil)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "22012" {
			t.Fatalf("got %v, want division_by_zero", err)
		}
	})
	t.Run("EndedContextIsTheCallersNotAnOutage", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		cancel()
		_, err := q.Exec(cctx, `SELECT 1`)
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("got %v, want context.Canceled", err)
		}
		assertNamed(t, err, nil)
	})
	t.Run("ClosedPoolIsUnavailable", func(t *testing.T) {
		other := dbtest.Connect(t, pool.Config().ConnString())
		other.Close()
		_, err := choirsql.Interpreted(other).Exec(ctx, `SELECT 1`)
		assertNamed(t, err, choirsql.ErrUnavailable)
	})
	t.Run("UnreachableServerIsUnavailable", func(t *testing.T) {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close() // nothing listens there now
		cfg, err := pgxpool.ParseConfig("postgres://nobody@" + addr + "/none?sslmode=disable&connect_timeout=2")
		if err != nil {
			t.Fatal(err)
		}
		gone, err := pgxpool.NewWithConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		defer gone.Close()
		_, err = choirsql.Interpreted(gone).Exec(ctx, `SELECT 1`)
		assertNamed(t, err, choirsql.ErrUnavailable)
	})
	t.Run("RefusedConnectionIsUnavailable", func(t *testing.T) {
		// The server answers, but refuses the database: SQLSTATE 55000.
		url := dbtest.NewDatabase(t)
		cfg, err := pgx.ParseConfig(url)
		if err != nil {
			t.Fatal(err)
		}
		name := pgx.Identifier{cfg.Database}.Sanitize()
		if _, err := pool.Exec(ctx, `ALTER DATABASE `+name+` ALLOW_CONNECTIONS false`); err != nil {
			t.Fatal(err)
		}
		defer pool.Exec(context.WithoutCancel(ctx), `ALTER DATABASE `+name+` ALLOW_CONNECTIONS true`)
		refused := dbtest.Connect(t, url)
		_, err = choirsql.Interpreted(refused).Exec(ctx, `SELECT 1`)
		assertNamed(t, err, choirsql.ErrUnavailable)
	})
	t.Run("Idempotent", func(t *testing.T) {
		err := choirsql.Interpret(choirsql.Interpret(pgx.ErrNoRows))
		assertNamed(t, err, choirsql.ErrNotFound)
		if choirsql.Interpret(nil) != nil {
			t.Fatal("Interpret(nil) is not nil")
		}
	})
}
