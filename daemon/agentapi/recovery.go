package agentapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	choirsql "github.com/choirhq/choir/sql"
)

// Hello records an agent's INIT_HELLO on its session and tells it where to
// resume: fresh at revision 0, or the newest snapshot along the session's
// chain of predecessors plus the events after it, up to the acknowledged
// revision the new session continues from.
//
// Hello logs through slog's default logger; HelloWith takes choird's.
func Hello(ctx context.Context, pool *pgxpool.Pool, call rpc.Call, req rpc.InitHelloRequest) (rpc.InitHelloResponse, error) {
	return HelloWith(ctx, pool, slog.Default(), call, req)
}

// HelloWith is hello logging to logger: a snapshot that fails its check is
// skipped with a warning.
func HelloWith(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger, call rpc.Call, req rpc.InitHelloRequest) (rpc.InitHelloResponse, error) {
	if req.AgentID != call.Session.AgentID || req.SessionID != call.Session.ID {
		return rpc.InitHelloResponse{}, fmt.Errorf("hello names agent %s session %s, but the lease is for agent %s session %s: %w",
			req.AgentID, req.SessionID, call.Session.AgentID, call.Session.ID, rpc.ErrPermissionDenied)
	}
	id, err := uuid.Parse(call.Session.ID)
	if err != nil {
		return rpc.InitHelloResponse{}, fmt.Errorf("session id: %w", rpc.ErrBadRequest)
	}
	var resp rpc.InitHelloResponse
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := db.New(choirsql.Interpreted(tx))
		s, err := q.SessionHello(ctx, db.SessionHelloParams{SessionID: id, ImageVersion: req.ImageVersion,
			ToolManifestHash: req.ToolManifestHash, SkillManifestHash: req.SkillManifestHash})
		if errors.Is(err, choirsql.ErrNotFound) {
			return fmt.Errorf("session %s is not live: %w", id, rpc.ErrUnauthenticated)
		}
		if err != nil {
			return fmt.Errorf("record hello of %s: %w", id, err)
		}
		if err := json.Unmarshal(s.ResourceBindings, &resp.ResourceBindings); err != nil {
			return fmt.Errorf("session %s resource bindings: %w", id, err)
		}
		if resp.ConfigVersion, err = q.ConfigVersionLatest(ctx); err != nil {
			return fmt.Errorf("latest config version: %w", err)
		}
		resp.AckedRev = s.AckedRev
		ackedHash := s.AckedHash
		if ackedHash == nil {
			ackedHash = s.BaseHash
		}
		if resp.AckedHash, err = rpc.HashFromBytes(ackedHash); err != nil {
			return fmt.Errorf("session %s acked hash: %w", id, err)
		}
		if s.AckedRev == 0 {
			resp.Status = rpc.HelloFresh
			return nil
		}
		resp.Status = rpc.HelloResumed
		after := int64(0)
		snap, err := recoverySnapshot(ctx, q, logger, id, s.AckedRev)
		if err != nil {
			return err
		}
		if snap != nil {
			resp.Snapshot = snap
			after = snap.Rev
		}
		rows, err := q.SessionChainEvents(ctx, db.SessionChainEventsParams{SessionID: id, AfterRev: after})
		if err != nil {
			return fmt.Errorf("load tail events of %s: %w", id, err)
		}
		for _, r := range rows {
			if r.Rev > s.AckedRev {
				break
			}
			e := rpc.Event{Rev: r.Rev, Type: rpc.EventType(r.EventType), Lane: r.Lane, Payload: r.Payload, CreatedAt: r.CreatedAt}
			if e.HashPrev, err = rpc.HashFromBytes(r.HashPrev); err != nil {
				return err
			}
			if e.Hash, err = rpc.HashFromBytes(r.Hash); err != nil {
				return err
			}
			resp.TailEvents = append(resp.TailEvents, e)
		}
		return nil
	})
	if err != nil {
		return rpc.InitHelloResponse{}, err
	}
	if err := resp.Validate(); err != nil {
		return rpc.InitHelloResponse{}, fmt.Errorf("recovery state of session %s is inconsistent: %w", id, err)
	}
	return resp, nil
}

// recoverySnapshot returns the newest snapshot at or below acked along the
// session's chain that passes its checks, or nil if none does (the agent
// then replays the whole tail). A snapshot that fails is logged and skipped:
// the one before it, with a longer tail, rebuilds the same state.
func recoverySnapshot(ctx context.Context, q *db.Queries, logger *slog.Logger, id uuid.UUID, acked int64) (*rpc.Snapshot, error) {
	limit := acked
	for limit >= 0 {
		snap, err := q.SessionChainSnapshot(ctx, db.SessionChainSnapshotParams{SessionID: id, MaxRev: limit})
		if errors.Is(err, choirsql.ErrNotFound) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("load snapshot of %s at or below rev %d: %w", id, limit, err)
		}
		sn, err := checkSnapshot(snap)
		if err == nil {
			return sn, nil
		}
		logger.WarnContext(ctx, "snapshot failed its hash check; falling back to an older snapshot and a longer tail",
			slog.String("session_id", id.String()), slog.String("snapshot_session_id", snap.SessionID.String()),
			slog.Int64("snapshot_rev", snap.Rev), slog.String("reason", err.Error()))
		limit = snap.Rev - 1
	}
	return nil, nil
}

// checkSnapshot verifies a stored snapshot: the event at its revision
// exists along the chain and carries the hash the snapshot was stored with,
// and its state still has the SHA-256 computed when it was stored. Rows
// from before those columns existed are checked against their event only.
func checkSnapshot(snap db.SessionChainSnapshotRow) (*rpc.Snapshot, error) {
	if snap.EventHash == nil {
		return nil, fmt.Errorf("no event at its revision %d along the session chain", snap.Rev)
	}
	h, err := rpc.HashFromBytes(snap.EventHash)
	if err != nil {
		return nil, fmt.Errorf("event hash at rev %d: %w", snap.Rev, err)
	}
	if snap.DeclaredHash != nil && !bytes.Equal(snap.DeclaredHash, snap.EventHash) {
		return nil, fmt.Errorf("stored with chain hash %x, but the event at rev %d has %s", snap.DeclaredHash, snap.Rev, h)
	}
	if snap.StateSha256 != nil {
		canon, err := rpc.CanonicalJSON(snap.Snapshot)
		if err != nil {
			return nil, fmt.Errorf("state is not valid JSON: %w", err)
		}
		if sum := sha256.Sum256(canon); !bytes.Equal(sum[:], snap.StateSha256) {
			return nil, fmt.Errorf("state has SHA-256 %x, stored with %x", sum, snap.StateSha256)
		}
	}
	return &rpc.Snapshot{Rev: snap.Rev, Hash: h, State: snap.Snapshot}, nil
}
