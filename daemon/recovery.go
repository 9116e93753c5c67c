package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
)

// hello records an agent's INIT_HELLO on its session and tells it where to
// resume: fresh at revision 0, or the newest snapshot along the session's
// chain of predecessors plus the events after it, up to the acknowledged
// revision the new session continues from.
func hello(ctx context.Context, pool *pgxpool.Pool, call rpc.Call, req rpc.InitHelloRequest) (rpc.InitHelloResponse, error) {
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
		q := db.New(tx)
		s, err := q.SessionHello(ctx, db.SessionHelloParams{SessionID: id, ImageVersion: req.ImageVersion,
			ToolManifestHash: req.ToolManifestHash, SkillManifestHash: req.SkillManifestHash})
		if errors.Is(err, pgx.ErrNoRows) {
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
		snap, err := q.SessionChainSnapshot(ctx, db.SessionChainSnapshotParams{SessionID: id, MaxRev: s.AckedRev})
		switch {
		case errors.Is(err, pgx.ErrNoRows):
		case err != nil:
			return fmt.Errorf("load snapshot of %s: %w", id, err)
		default:
			h := rpc.Genesis
			if snap.Hash != nil {
				if h, err = rpc.HashFromBytes(snap.Hash); err != nil {
					return err
				}
			}
			resp.Snapshot = &rpc.Snapshot{Rev: snap.Rev, Hash: h, State: snap.Snapshot}
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
