package sql

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/puddle/v2"
)

// The named database errors. Interpret wraps a driver error in one of them,
// keeping the original in the chain (errors.Is(err, pgx.ErrNoRows) still
// holds), so code above the seam asks what happened, never which SQLSTATE.
var (
	// ErrNotFound: a query for one row found none.
	ErrNotFound = errors.New("not found")
	// ErrUniqueViolation: a row would duplicate a unique key (23505).
	ErrUniqueViolation = errors.New("unique violation")
	// ErrSerialization: the transaction lost a serialization or deadlock
	// race (40001, 40P01) and may be retried as a whole.
	ErrSerialization = errors.New("serialization failure")
	// ErrUnavailable: Postgres cannot serve now: unreachable, shutting
	// down, out of connections or resources, or over a statement timeout.
	// It is an outage on the server's side, never a client's bad request.
	ErrUnavailable = errors.New("postgres unavailable")
)

// Interpret names a database error (see the Err values above); nil stays
// nil, and an error that is none of them, or that an ended context caused,
// comes back as it was. It is idempotent.
func Interpret(err error) error {
	if err == nil || isNamed(err) {
		return err
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	// The caller gave up: that is its context's doing, not the server's.
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	// A connection the server refused is an outage, whatever SQLSTATE the
	// refusal carries (a database not accepting connections is 55000).
	var ce *pgconn.ConnectError
	if errors.As(err, &ce) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch {
		case pe.Code == "23505":
			return fmt.Errorf("%w: %w", ErrUniqueViolation, err)
		case pe.Code == "40001" || pe.Code == "40P01":
			return fmt.Errorf("%w: %w", ErrSerialization, err)
		case unavailableState(pe.Code):
			return fmt.Errorf("%w: %w", ErrUnavailable, err)
		}
		return err
	}
	var ne net.Error
	if errors.As(err, &ne) || pgconn.Timeout(err) || errors.Is(err, puddle.ErrClosedPool) {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

func isNamed(err error) bool {
	return errors.Is(err, ErrNotFound) || errors.Is(err, ErrUniqueViolation) ||
		errors.Is(err, ErrSerialization) || errors.Is(err, ErrUnavailable)
}

// unavailableState reports the SQLSTATEs of a server that cannot serve:
// class 08 (connection exception), 53 (insufficient resources: too many
// connections, out of memory or disk), 57P01-57P03 (shutting down,
// crashed, starting up) and 57014 (a statement_timeout cancelled the
// query: the server is too slow to answer in time).
func unavailableState(code string) bool {
	if len(code) != 5 {
		return false
	}
	switch code[:2] {
	case "08", "53":
		return true
	}
	switch code {
	case "57P01", "57P02", "57P03", "57014":
		return true
	}
	return false
}

// DBTX is what sqlc's Queries run on: a pool, a connection or a
// transaction. It has the shape of db.DBTX and agentdb.DBTX.
type DBTX interface {
	Exec(context.Context, string, ...any) (pgconn.CommandTag, error)
	Query(context.Context, string, ...any) (pgx.Rows, error)
	QueryRow(context.Context, string, ...any) pgx.Row
	CopyFrom(ctx context.Context, tableName pgx.Identifier, columnNames []string, rowSrc pgx.CopyFromSource) (int64, error)
}

// Interpreted is the seam: queries run on it return Interpret's named
// errors. Every sqlc Queries is built on one, by seam.Queries and
// seam.AgentQueries (sql/seam); a query written by hand runs on one too.
func Interpreted(d DBTX) DBTX {
	if i, ok := d.(interpreted); ok {
		return i
	}
	return interpreted{d}
}

type interpreted struct{ d DBTX }

func (i interpreted) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	tag, err := i.d.Exec(ctx, sql, args...)
	return tag, Interpret(err)
}

func (i interpreted) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	rows, err := i.d.Query(ctx, sql, args...)
	if err != nil {
		return rows, Interpret(err)
	}
	return interpretedRows{rows}, nil
}

func (i interpreted) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return interpretedRow{i.d.QueryRow(ctx, sql, args...)}
}

func (i interpreted) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	n, err := i.d.CopyFrom(ctx, table, cols, src)
	return n, Interpret(err)
}

type interpretedRow struct{ r pgx.Row }

func (r interpretedRow) Scan(dest ...any) error { return Interpret(r.r.Scan(dest...)) }

type interpretedRows struct{ pgx.Rows }

func (r interpretedRows) Err() error { return Interpret(r.Rows.Err()) }

func (r interpretedRows) Scan(dest ...any) error { return Interpret(r.Rows.Scan(dest...)) }
