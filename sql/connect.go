package sql

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	pgxvec "github.com/pgvector/pgvector-go/pgx"
)

// ConnectOptions say where a connection string came from, so that a failure
// can name the setting the operator has to fix.
type ConnectOptions struct {
	// Origin names the setting the DSN came from, e.g. "config.json
	// postgres.host/postgres.port" or "--database-url".
	Origin string
	// Vector registers pgvector's types on every connection. Leave it off
	// for migrations: before the first one the extension does not exist.
	Vector bool
	// MaxConns caps the pool (0 keeps pgx's default).
	MaxConns int32
}

// ErrUnreachable is wrapped by Connect's error when the server cannot be
// reached or refuses the login.
var ErrUnreachable = errors.New("postgres unreachable")

// Connect opens a pool on dsn and checks that the server answers. On failure
// the error is one line naming host, port and opts.Origin.
func Connect(ctx context.Context, dsn string, opts ConnectOptions) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres connection settings from %s are invalid: %w", opts.Origin, err)
	}
	if opts.Vector {
		cfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error { return pgxvec.RegisterTypes(ctx, c) }
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = opts.MaxConns
	}
	if cfg.ConnConfig.ConnectTimeout == 0 {
		cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	}
	where := net.JoinHostPort(cfg.ConnConfig.Host, strconv.Itoa(int(cfg.ConnConfig.Port)))
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("%w: cannot reach Postgres at %s (from %s): %s", ErrUnreachable, where, opts.Origin, cause(err))
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("%w: cannot reach Postgres at %s (from %s): %s", ErrUnreachable, where, opts.Origin, cause(err))
	}
	return pool, nil
}

// cause reduces pgx's connect error, which repeats the address and nests
// several layers, to its root, so the whole message stays on one line.
func cause(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Message + " (SQLSTATE " + pe.Code + ")"
	}
	for {
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			if next := u.Unwrap(); next != nil {
				err = next
				continue
			}
		case interface{ Unwrap() []error }:
			if errs := u.Unwrap(); len(errs) > 0 && errs[0] != nil {
				err = errs[0]
				continue
			}
		}
		return err.Error()
	}
}
