package agentapi

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// SessionAuth checks lease tokens against choir_control.sessions: the
// token is valid exactly while its session is active or stopping, so a stop
// or a crash revokes it without any separate revocation list.
//
// It remembers each session's token hash and agent, which never change
// once the row is written, so that AuthenticateIdentity (used for
// HEARTBEAT, whose statement checks the session's state itself) can answer
// without a query.
type SessionAuth struct {
	pool *pgxpool.Pool

	mu  sync.Mutex
	ids map[uuid.UUID]sessionIdentity
}

type sessionIdentity struct {
	tokenHash []byte
	agentID   string
}

// maxRememberedSessions bounds SessionAuth's memory; past it, it forgets
// every session and learns again from the database.
const maxRememberedSessions = 4096

var _ rpc.IdentityAuthenticator = (*SessionAuth)(nil)

// NewSessionAuth makes the lease-token authenticator of the agent
// protocol.
func NewSessionAuth(pool *pgxpool.Pool) *SessionAuth {
	return &SessionAuth{pool: pool, ids: map[uuid.UUID]sessionIdentity{}}
}

// Authenticate implements rpc.Authenticator.
func (a *SessionAuth) Authenticate(ctx context.Context, sessionID, leaseToken string) (rpc.Session, error) {
	return a.authenticate(ctx, sessionID, leaseToken, true)
}

// AuthenticateIdentity implements rpc.IdentityAuthenticator: it checks the
// token without looking at the session's state.
func (a *SessionAuth) AuthenticateIdentity(ctx context.Context, sessionID, leaseToken string) (rpc.Session, error) {
	return a.authenticate(ctx, sessionID, leaseToken, false)
}

func (a *SessionAuth) authenticate(ctx context.Context, sessionID, leaseToken string, live bool) (rpc.Session, error) {
	id, err := uuid.Parse(sessionID)
	if err != nil {
		return rpc.Session{}, fmt.Errorf("session id %q is not a UUID: %w", sessionID, wire.ErrUnauthenticated)
	}
	a.mu.Lock()
	ident, known := a.ids[id]
	a.mu.Unlock()
	status := ""
	if live || !known {
		row, err := seam.Queries(a.pool).SessionAuthGet(ctx, id)
		if errors.Is(err, choirsql.ErrNotFound) {
			return rpc.Session{}, fmt.Errorf("no session %s: %w", sessionID, wire.ErrUnauthenticated)
		}
		if err != nil {
			return rpc.Session{}, fmt.Errorf("look up session %s: %w", sessionID, err)
		}
		ident, status = sessionIdentity{tokenHash: row.LeaseTokenHash, agentID: row.AgentID}, row.Status
		a.remember(id, ident)
	}
	// Compare before looking at the status, so that a wrong token and a
	// revoked one take the same path through the code.
	if !rpc.LeaseTokenMatches(leaseToken, ident.tokenHash) {
		return rpc.Session{}, fmt.Errorf("lease token does not match session %s: %w", sessionID, wire.ErrUnauthenticated)
	}
	if live && status != "active" && status != "stopping" {
		return rpc.Session{}, fmt.Errorf("session %s is %s, its lease token is revoked: %w", sessionID, status, wire.ErrUnauthenticated)
	}
	return rpc.Session{ID: id.String(), AgentID: ident.agentID}, nil
}

func (a *SessionAuth) remember(id uuid.UUID, ident sessionIdentity) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.ids) >= maxRememberedSessions {
		clear(a.ids)
	}
	a.ids[id] = ident
}

// ReplayStore keeps the first outcome of every mutating call in
// choir_control.rpc_replays, so that replays are answered alike across
// restarts of choird. It keeps the newest ReplayKeepPerSession of each
// session.
type ReplayStore struct {
	Pool *pgxpool.Pool
}

// ReplayKeepPerSession is how many outcomes a session keeps. A replay
// matters only for a call the agent may still retry: its client retries a
// call at once with the same request ID, and across a restart of choird
// only the call it was making then (an approval request), while its other
// calls wait. So only the last few calls of a session are ever replayed;
// a thousand is ample for every lane and tool call in flight at once, and
// bounds what a looping agent leaves in choir_control (responses are at
// most max_payload_bytes each, mostly a few kilobytes). A call
// older than that, replayed, runs again, and the handlers' own keys
// (approval request IDs, message IDs) still hold it to once.
const ReplayKeepPerSession = 1000

var _ rpc.ReplayStore = ReplayStore{}

// Load implements rpc.ReplayStore.
func (s ReplayStore) Load(ctx context.Context, key rpc.ReplayKey) (rpc.ReplayRecord, bool, error) {
	id, err := uuid.Parse(key.SessionID)
	if err != nil {
		return rpc.ReplayRecord{}, false, fmt.Errorf("session id %q: %w", key.SessionID, err)
	}
	row, err := seam.Queries(s.Pool).ReplayGet(ctx, db.ReplayGetParams{SessionID: id, RequestID: key.RequestID})
	if errors.Is(err, choirsql.ErrNotFound) {
		return rpc.ReplayRecord{}, false, nil
	}
	if err != nil {
		return rpc.ReplayRecord{}, false, fmt.Errorf("load replay %s/%s: %w", key.SessionID, key.RequestID, err)
	}
	rec := rpc.ReplayRecord{Verb: rpc.Verb(row.Verb), Response: row.Response,
		ErrCode: wire.Code(row.ErrCode), ErrMessage: row.ErrMessage}
	copy(rec.Digest[:], row.Digest)
	return rec, true, nil
}

// Keeps implements rpc.ReplayKeeper: a heartbeat is idempotent by
// revision (a resent patch is a no-op), so it needs no replay row, and the
// server skips the lookup.
func (ReplayStore) Keeps(verb rpc.Verb) bool { return verb != rpc.VerbHeartbeat }

// Save implements rpc.ReplayStore. A second save of one key keeps the
// first. The same statement forgets the session's outcomes older than its
// newest ReplayKeepPerSession.
//
// HEARTBEAT outcomes are not stored: a heartbeat is idempotent by
// revision, so running a replayed one again is what the replay would have
// answered, and the row per heartbeat was the costliest write of the
// replication path after the events themselves. Running it again acks the
// same revisions (or more, if later heartbeats have been stored since, which
// is as true); a refused patch is refused again; and a request ID reused for
// a different patch is judged by the chain, which is stricter than the
// digest. Concurrent duplicates still run once, by the server's in-process
// single flight.
func (s ReplayStore) Save(ctx context.Context, key rpc.ReplayKey, rec rpc.ReplayRecord) error {
	if !s.Keeps(rec.Verb) {
		return nil
	}
	id, err := uuid.Parse(key.SessionID)
	if err != nil {
		return fmt.Errorf("session id %q: %w", key.SessionID, err)
	}
	err = seam.Queries(s.Pool).ReplaySave(ctx, db.ReplaySaveParams{SessionID: id, RequestID: key.RequestID,
		Verb: string(rec.Verb), Digest: rec.Digest[:], Response: rec.Response,
		ErrCode: string(rec.ErrCode), ErrMessage: rec.ErrMessage, Keep: ReplayKeepPerSession})
	if err != nil {
		return fmt.Errorf("save replay %s/%s: %w", key.SessionID, key.RequestID, err)
	}
	return nil
}

// Forget implements rpc.ReplayStore.
func (s ReplayStore) Forget(ctx context.Context, sessionID string) error {
	id, err := uuid.Parse(sessionID)
	if err != nil {
		return fmt.Errorf("session id %q: %w", sessionID, err)
	}
	if _, err := seam.Queries(s.Pool).ReplayForgetSession(ctx, id); err != nil {
		return fmt.Errorf("forget replays of %s: %w", sessionID, err)
	}
	return nil
}
