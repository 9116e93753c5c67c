// Package login is the web console's logins: the one-time tokens that
// choirctl console prints (valid for a minute, exchanged once) and the
// sessions they become, each with its CSRF token, listed and revoked by
// the operator. Only SHA-256 hashes of tokens and session secrets are
// stored. The admin API issues tokens and manages sessions; the console
// exchanges tokens and authenticates requests; both go through this one
// store, so the rules live here once.
package login

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/control"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// TokenLifetime is how long a one-time link may wait to be used.
const TokenLifetime = 60 * time.Second

// ActorPrefix starts the actor of every console action; the session id's
// first PrefixLen characters follow.
const (
	ActorPrefix = "console:"
	PrefixLen   = 8
)

// ErrInvalid is returned for a token or session secret that logs no one
// in: unknown, used, expired or revoked. It says no more, on purpose.
var ErrInvalid = errors.New("not a valid console login")

// ErrShortPrefix refuses a revoke by a prefix too short to name one
// session with confidence.
var ErrShortPrefix = fmt.Errorf("name the session by at least %d characters of its id (choirctl console sessions lists them)", PrefixLen)

// Store keeps the console's tokens and sessions in Postgres.
type Store struct {
	pool     *pgxpool.Pool
	lifetime time.Duration
	baseURL  string
}

// New returns the store; sessions last lifetime, and links start with
// baseURL (http://127.0.0.1:7780).
func New(pool *pgxpool.Pool, lifetime time.Duration, baseURL string) *Store {
	return &Store{pool: pool, lifetime: lifetime, baseURL: strings.TrimSuffix(baseURL, "/")}
}

// Session is a live console session.
type Session struct {
	ID        uuid.UUID
	CSRF      string
	ExpiresAt time.Time
}

// Actor names the session in the audit views: console:<id prefix>.
func (s Session) Actor() string { return ActorPrefix + s.ID.String()[:PrefixLen] }

// Scope is the control scope of the session's requests: the operator's.
func (s Session) Scope() control.Scope { return control.Scope{Admin: true, Actor: s.Actor()} }

// Hash is the stored form of a token or a session secret.
func Hash(secret string) []byte {
	h := sha256.Sum256([]byte(secret))
	return h[:]
}

func random() string {
	b := make([]byte, 32)
	rand.Read(b) //nolint:errcheck // crypto/rand never fails (Go 1.24+).
	return base64.RawURLEncoding.EncodeToString(b)
}

// Issue creates a one-time login link for the operator named by by (the
// admin peer), valid for TokenLifetime.
func (s *Store) Issue(ctx context.Context, by string) (admin.ConsoleLogin, error) {
	token := random()
	exp := time.Now().Add(TokenLifetime)
	q := seam.Queries(s.pool)
	// Each login clears what is long over: tokens a day past their
	// minute, sessions a month past their end.
	if err := q.ConsoleTokensPrune(ctx); err != nil {
		return admin.ConsoleLogin{}, fmt.Errorf("prune console tokens: %w", err)
	}
	if err := q.ConsoleSessionsPrune(ctx); err != nil {
		return admin.ConsoleLogin{}, fmt.Errorf("prune console sessions: %w", err)
	}
	if err := q.ConsoleTokenInsert(ctx, db.ConsoleTokenInsertParams{TokenHash: Hash(token), CreatedBy: by, ExpiresAt: exp}); err != nil {
		return admin.ConsoleLogin{}, fmt.Errorf("store console token: %w", err)
	}
	return admin.ConsoleLogin{URL: s.baseURL + "/login?token=" + token, ExpiresAt: exp}, nil
}

// Exchange spends a one-time token for a new session and returns the
// session and its secret (the cookie's value). A token is spent at most
// once, and only before it expires.
func (s *Store) Exchange(ctx context.Context, token, userAgent string) (Session, string, error) {
	q := seam.Queries(s.pool)
	by, err := q.ConsoleTokenUse(ctx, Hash(token))
	if errors.Is(err, choirsql.ErrNotFound) {
		return Session{}, "", ErrInvalid
	}
	if err != nil {
		return Session{}, "", fmt.Errorf("spend console token: %w", err)
	}
	if len(userAgent) > 200 {
		userAgent = userAgent[:200]
	}
	secret := random()
	sess := Session{ID: uuid.New(), CSRF: random(), ExpiresAt: time.Now().Add(s.lifetime)}
	if err := q.ConsoleSessionInsert(ctx, db.ConsoleSessionInsertParams{SessionID: sess.ID, SecretHash: Hash(secret), Csrf: sess.CSRF,
		CreatedBy: by, UserAgent: userAgent, ExpiresAt: sess.ExpiresAt}); err != nil {
		return Session{}, "", fmt.Errorf("store console session: %w", err)
	}
	return sess, secret, nil
}

// Authenticate returns the live session whose secret this is.
func (s *Store) Authenticate(ctx context.Context, secret string) (Session, error) {
	if secret == "" {
		return Session{}, ErrInvalid
	}
	row, err := seam.Queries(s.pool).ConsoleSessionBySecret(ctx, Hash(secret))
	if errors.Is(err, choirsql.ErrNotFound) {
		return Session{}, ErrInvalid
	}
	if err != nil {
		return Session{}, fmt.Errorf("look up console session: %w", err)
	}
	return Session{ID: row.SessionID, CSRF: row.Csrf, ExpiresAt: row.ExpiresAt}, nil
}

// List returns the sessions of the last day, newest first.
func (s *Store) List(ctx context.Context) ([]admin.ConsoleSession, error) {
	rows, err := seam.Queries(s.pool).ConsoleSessionList(ctx)
	if err != nil {
		return nil, fmt.Errorf("list console sessions: %w", err)
	}
	out := make([]admin.ConsoleSession, 0, len(rows))
	for _, r := range rows {
		cs := admin.ConsoleSession{ID: r.SessionID.String(), Actor: Session{ID: r.SessionID}.Actor(), CreatedBy: r.CreatedBy,
			UserAgent: r.UserAgent, CreatedAt: r.CreatedAt, LastSeenAt: r.LastSeenAt, ExpiresAt: r.ExpiresAt, RevokedAt: r.RevokedAt}
		if r.RevokedBy != nil {
			cs.RevokedBy = *r.RevokedBy
		}
		out = append(out, cs)
	}
	return out, nil
}

// Revoke ends the live sessions whose id starts with prefix, recording
// by, and returns their ids.
func (s *Store) Revoke(ctx context.Context, prefix, by string) ([]string, error) {
	prefix = strings.ToLower(strings.TrimSpace(prefix))
	if len(prefix) < PrefixLen || strings.ContainsAny(prefix, "%_\\") {
		return nil, ErrShortPrefix
	}
	ids, err := seam.Queries(s.pool).ConsoleSessionRevoke(ctx, db.ConsoleSessionRevokeParams{RevokedBy: by, Prefix: prefix})
	if err != nil {
		return nil, fmt.Errorf("revoke console sessions: %w", err)
	}
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		out = append(out, id.String())
	}
	return out, nil
}
