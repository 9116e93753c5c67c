package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
)

// ErrChainGap reports a heartbeat whose base revision is beyond what choird
// has acknowledged: events in between are missing.
var ErrChainGap = errors.New("replication gap")

// ErrChainBroken reports a heartbeat whose hash chain does not continue the
// acknowledged one.
var ErrChainBroken = errors.New("replication chain broken")

// heartbeatTxObserver, when set, receives the duration of every successful
// heartbeat transaction, from taking a pooled connection (so waiting for
// one counts) to COMMIT. Only benchmarks set it: the RPC round trip they
// can time from outside also holds the authentication, the replay lookup
// and the decoding of the request.
var heartbeatTxObserver atomic.Pointer[func(time.Duration)]

// replicate applies one heartbeat to the durable replica in one
// transaction: lock the session's head row, check that the patch continues
// the acknowledged chain, append the new events, and advance acked_rev and
// last_heartbeat_at. A resent patch, or the resent prefix of a longer one,
// is a no-op for the events already stored. A gap or a broken chain writes
// nothing and returns an error wrapping rpc.ErrConflict that says where to
// resume.
//
// The common case, a patch that continues exactly where the last one
// ended, is one statement (HeartbeatApply) between BEGIN and COMMIT: the
// statement locks the head row and writes only if the chain continues. Any
// other case comes back unapplied with the locked head, and is sorted out
// here with the row still locked.
func replicate(ctx context.Context, pool *pgxpool.Pool, sessionID uuid.UUID, req rpc.HeartbeatRequest) (rpc.HeartbeatResponse, error) {
	if err := checkPatch(req); err != nil {
		return rpc.HeartbeatResponse{}, err
	}
	var resp rpc.HeartbeatResponse
	start := time.Now()
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		head, err := q.HeartbeatApply(ctx, applyParams(sessionID, req.BaseRev, req.HashPrev, req.Patches, req))
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("session %s: %w", sessionID, rpc.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("apply heartbeat %d..%d to session %s: %w", req.BaseRev, req.NewRev, sessionID, err)
		}
		fresh := req.Patches
		if !head.Applied {
			if fresh, err = resolveResend(ctx, q, sessionID, req, head); err != nil {
				return err
			}
		}
		if len(fresh) > 0 {
			if err := afterAppend(ctx, tx, sessionID, fresh); err != nil {
				return fmt.Errorf("after appending events %d..%d of session %s: %w",
					fresh[0].Rev, fresh[len(fresh)-1].Rev, sessionID, err)
			}
		}
		resp = rpc.HeartbeatResponse{AckRev: max(head.AckedRev, req.NewRev), ConfigVersionLatest: head.ConfigVersionLatest}
		return nil
	})
	if err != nil {
		return rpc.HeartbeatResponse{}, err
	}
	if f := heartbeatTxObserver.Load(); f != nil {
		(*f)(time.Since(start))
	}
	return resp, nil
}

// afterAppend runs inside the heartbeat transaction once the heartbeat's
// new events are appended (events holds exactly those, in revision order;
// it is never called for a heartbeat that appends nothing). It is the place
// for work that must commit atomically with the events, such as marking the
// inbox rows of user_msg events delivered (daemon/inbox.go).
func afterAppend(ctx context.Context, tx pgx.Tx, sessionID uuid.UUID, events []rpc.Event) error {
	return markInboxDelivered(ctx, tx, sessionID, events)
}

// checkPatch refuses a patch whose events are not the contiguous, linked
// revisions base_rev+1..new_rev. The RPC layer has already checked this
// (and the hashes themselves) for heartbeats from the wire; the check here
// is cheap and keeps replicate's arithmetic safe for any caller.
func checkPatch(req rpc.HeartbeatRequest) error {
	if int64(len(req.Patches)) != req.NewRev-req.BaseRev {
		return fmt.Errorf("heartbeat carries %d events for revisions %d..%d: %w",
			len(req.Patches), req.BaseRev+1, req.NewRev, rpc.ErrBadRequest)
	}
	prev := req.HashPrev
	for i, e := range req.Patches {
		if e.Rev != req.BaseRev+int64(i)+1 || e.HashPrev != prev {
			return fmt.Errorf("heartbeat event %d (rev %d) does not continue rev %d: %w",
				i, e.Rev, req.BaseRev+int64(i), rpc.ErrBadRequest)
		}
		prev = e.Hash
	}
	if prev != req.HashNew {
		return fmt.Errorf("heartbeat hash_new %s is not the hash of rev %d: %w", req.HashNew, req.NewRev, rpc.ErrBadRequest)
	}
	return nil
}

// resolveResend handles a heartbeat that HeartbeatApply did not apply,
// with the head row still locked by the transaction: the session is not
// live, the patch leaves a gap, breaks the chain, or resends revisions
// already stored. For a resend it stores the new tail (possibly nothing)
// and returns it.
func resolveResend(ctx context.Context, q *db.Queries, sessionID uuid.UUID, req rpc.HeartbeatRequest, head db.HeartbeatApplyRow) ([]rpc.Event, error) {
	if head.Status != "active" && head.Status != "stopping" {
		return nil, fmt.Errorf("session %s is %s: %w", sessionID, head.Status, rpc.ErrUnauthenticated)
	}
	acked, err := rpc.HashFromBytes(head.AckedHash)
	if err != nil {
		return nil, fmt.Errorf("session %s acked hash: %w", sessionID, err)
	}
	switch {
	case req.BaseRev > head.AckedRev:
		return nil, fmt.Errorf("%w: heartbeat base_rev %d is beyond acked_rev %d; resend from rev %d: %w",
			ErrChainGap, req.BaseRev, head.AckedRev, head.AckedRev+1, rpc.ErrConflict)
	case req.BaseRev == head.AckedRev:
		// HeartbeatApply refuses a patch at the acknowledged base only
		// for its hash.
		return nil, fmt.Errorf("%w: hash_prev %s at rev %d, but the acknowledged hash is %s: %w",
			ErrChainBroken, req.HashPrev, req.BaseRev, acked, rpc.ErrConflict)
	}
	// A resend overlapping what is stored: the revision it shares with the
	// store must carry the stored hash, and only what follows is new.
	var fresh []rpc.Event
	if req.NewRev <= head.AckedRev {
		if req.NewRev == head.AckedRev && req.HashNew != acked {
			return nil, fmt.Errorf("%w: resent rev %d has hash %s, stored %s: %w",
				ErrChainBroken, req.NewRev, req.HashNew, acked, rpc.ErrConflict)
		}
	} else {
		overlap := req.Patches[head.AckedRev-req.BaseRev-1]
		if overlap.Hash != acked {
			return nil, fmt.Errorf("%w: resent rev %d has hash %s, stored %s: %w",
				ErrChainBroken, overlap.Rev, overlap.Hash, acked, rpc.ErrConflict)
		}
		fresh = req.Patches[head.AckedRev-req.BaseRev:]
	}
	// Apply the new tail (or nothing, which still records the heartbeat)
	// from the acknowledged head; the row is locked, so it applies.
	again, err := q.HeartbeatApply(ctx, applyParams(sessionID, head.AckedRev, acked, fresh, req))
	if err != nil {
		return nil, fmt.Errorf("apply resent heartbeat %d..%d to session %s: %w", req.BaseRev, req.NewRev, sessionID, err)
	}
	if !again.Applied {
		return nil, fmt.Errorf("session %s moved while its head row was locked (acked_rev %d, want %d)",
			sessionID, again.AckedRev, head.AckedRev)
	}
	return fresh, nil
}

// applyParams lays out events from base (whose hash is basePrev) as the
// column arrays HeartbeatApply unnests, with req's config version and
// snapshot. A snapshot beyond the events is left out: it cannot be stored
// before the revision it describes.
func applyParams(sessionID uuid.UUID, base int64, basePrev rpc.Hash, events []rpc.Event, req rpc.HeartbeatRequest) db.HeartbeatApplyParams {
	n := len(events)
	p := db.HeartbeatApplyParams{SessionID: sessionID.String(), BaseRev: base, HashPrev: basePrev[:],
		Revs: make([]int64, n), EventTypes: make([]string, n), Lanes: make([]string, n),
		Payloads: make([]string, n), HashPrevs: make([][]byte, n), Hashes: make([][]byte, n),
		CreatedAts: make([]time.Time, n), NewRev: base, HashNew: basePrev[:], ConfigVersion: req.ConfigVersion}
	for i := range events {
		e := &events[i]
		p.Revs[i], p.EventTypes[i], p.Lanes[i], p.Payloads[i] = e.Rev, string(e.Type), e.Lane, string(e.Payload)
		p.HashPrevs[i], p.Hashes[i], p.CreatedAts[i] = e.HashPrev[:], e.Hash[:], e.CreatedAt
	}
	if n > 0 {
		p.NewRev, p.HashNew = events[n-1].Rev, events[n-1].Hash[:]
	}
	if sn := req.Snapshot; sn != nil && sn.Rev >= 1 && sn.Rev <= p.NewRev {
		p.SnapshotRev, p.SnapshotState, p.SnapshotHash = sn.Rev, sn.State, sn.Hash[:]
		p.SnapshotStateSha256 = snapshotStateSum(sn.State)
	}
	return p
}

// snapshotStateSum is the SHA-256 of a snapshot state's canonical JSON,
// which survives the trip through jsonb unchanged; nil if the state is not
// valid JSON (the RPC layer refuses such a heartbeat before it gets here).
func snapshotStateSum(state json.RawMessage) []byte {
	canon, err := rpc.CanonicalJSON(state)
	if err != nil {
		return nil
	}
	sum := sha256.Sum256(canon)
	return sum[:]
}
