package daemon

import (
	"context"
	"errors"
	"fmt"

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

// replicate applies one heartbeat to the durable replica in one
// transaction: lock the session's head row, check that the patch continues
// the acknowledged chain, append the new events with COPY, and advance
// acked_rev and last_heartbeat_at. A resent patch, or the resent prefix of a
// longer one, is a no-op for the events already stored. A gap or a broken
// chain writes nothing and returns an error wrapping rpc.ErrConflict that
// says where to resume.
func replicate(ctx context.Context, pool *pgxpool.Pool, sessionID uuid.UUID, req rpc.HeartbeatRequest) (rpc.HeartbeatResponse, error) {
	var resp rpc.HeartbeatResponse
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := db.New(tx)
		head, err := q.SessionLockHead(ctx, sessionID)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("session %s: %w", sessionID, rpc.ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("lock session %s: %w", sessionID, err)
		}
		if head.Status != "active" && head.Status != "stopping" {
			return fmt.Errorf("session %s is %s: %w", sessionID, head.Status, rpc.ErrUnauthenticated)
		}
		ackedHash := head.BaseHash
		if head.AckedHash != nil {
			ackedHash = head.AckedHash
		}
		acked, err := rpc.HashFromBytes(ackedHash)
		if err != nil {
			return fmt.Errorf("session %s acked hash: %w", sessionID, err)
		}

		// Find where the patch continues the acknowledged chain.
		var fresh []rpc.Event
		switch {
		case req.BaseRev > head.AckedRev:
			return fmt.Errorf("%w: heartbeat base_rev %d is beyond acked_rev %d; resend from rev %d: %w",
				ErrChainGap, req.BaseRev, head.AckedRev, head.AckedRev+1, rpc.ErrConflict)
		case req.BaseRev == head.AckedRev:
			if req.HashPrev != acked {
				return fmt.Errorf("%w: hash_prev %s at rev %d, but the acknowledged hash is %s: %w",
					ErrChainBroken, req.HashPrev, req.BaseRev, acked, rpc.ErrConflict)
			}
			fresh = req.Patches
		default: // a resend overlapping what is stored
			if req.NewRev <= head.AckedRev {
				fresh = nil
				if req.NewRev == head.AckedRev && req.HashNew != acked {
					return fmt.Errorf("%w: resent rev %d has hash %s, stored %s: %w",
						ErrChainBroken, req.NewRev, req.HashNew, acked, rpc.ErrConflict)
				}
				break
			}
			overlap := req.Patches[head.AckedRev-req.BaseRev-1]
			if overlap.Hash != acked {
				return fmt.Errorf("%w: resent rev %d has hash %s, stored %s: %w",
					ErrChainBroken, overlap.Rev, overlap.Hash, acked, rpc.ErrConflict)
			}
			fresh = req.Patches[head.AckedRev-req.BaseRev:]
		}

		if len(fresh) > 0 {
			rows := make([]db.EventsAppendParams, len(fresh))
			for i, e := range fresh {
				rows[i] = db.EventsAppendParams{SessionID: sessionID, Rev: e.Rev, EventType: string(e.Type),
					Lane: e.Lane, Payload: e.Payload, HashPrev: e.HashPrev[:], Hash: e.Hash[:], CreatedAt: e.CreatedAt}
			}
			if _, err := q.EventsAppend(ctx, rows); err != nil {
				return fmt.Errorf("append events %d..%d of session %s: %w",
					fresh[0].Rev, fresh[len(fresh)-1].Rev, sessionID, err)
			}
			last := fresh[len(fresh)-1]
			head.AckedRev, acked = last.Rev, last.Hash
		}
		if sn := req.Snapshot; sn != nil && sn.Rev <= head.AckedRev {
			if err := q.SnapshotInsert(ctx, db.SnapshotInsertParams{SessionID: sessionID, Rev: sn.Rev, Snapshot: sn.State}); err != nil {
				return fmt.Errorf("store snapshot at rev %d of session %s: %w", sn.Rev, sessionID, err)
			}
		}
		if err := q.SessionAck(ctx, db.SessionAckParams{SessionID: sessionID, AckedRev: head.AckedRev,
			AckedHash: acked[:], ConfigVersion: req.ConfigVersion}); err != nil {
			return fmt.Errorf("acknowledge session %s: %w", sessionID, err)
		}
		latest, err := q.ConfigVersionLatest(ctx)
		if err != nil {
			return fmt.Errorf("latest config version: %w", err)
		}
		resp = rpc.HeartbeatResponse{AckRev: head.AckedRev, ConfigVersionLatest: latest}
		return nil
	})
	return resp, err
}
