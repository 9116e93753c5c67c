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
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// Hello records an agent's INIT_HELLO on its session and tells it where to
// resume: fresh at revision 0, or the newest snapshot along the session's
// chain of predecessors plus the tail, up to the acknowledged revision the
// new session continues from. The tail starts after the snapshot, or
// earlier where a lane's event window does (see tailFrom).
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
			req.AgentID, req.SessionID, call.Session.AgentID, call.Session.ID, wire.ErrPermissionDenied)
	}
	id, err := uuid.Parse(call.Session.ID)
	if err != nil {
		return rpc.InitHelloResponse{}, fmt.Errorf("session id: %w", wire.ErrBadRequest)
	}
	var resp rpc.InitHelloResponse
	err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		q := seam.Queries(tx)
		s, err := q.SessionHello(ctx, db.SessionHelloParams{SessionID: id, ImageVersion: req.ImageVersion,
			ToolManifestHash: req.ToolManifestHash, SkillManifestHash: req.SkillManifestHash})
		if errors.Is(err, choirsql.ErrNotFound) {
			return fmt.Errorf("session %s is not live: %w", id, wire.ErrUnauthenticated)
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
			after = tailFrom(ctx, logger, id, snap, s.AckedRev) - 1
			// A snapshot at or below the session's base was taken by a
			// predecessor; a session with no budget_from does not
			// continue that one's budget (usage.Continue).
			resp.ResetBudgets = s.BudgetFrom == nil && snap.Rev <= s.BaseRev
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
		if snap != nil {
			resp.TailEvents = trimTail(ctx, logger, id, snap.Rev, resp.TailEvents)
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

// maxTailEvents and maxTailBytes bound a resumed session's tail where it
// reaches back before the snapshot for the lanes' windows: a snapshot
// cannot make choird load and send more, nor make the INIT_HELLO response
// too large for the agent to read (rpc/client takes 64 MiB). The events
// after the snapshot are always sent.
const (
	maxTailEvents = 20_000
	maxTailBytes  = 16 << 20
)

const tailCapped = "tail capped: the lanes' windows reach back further than a tail may; " +
	"the events before it are neither in the window nor in the summary after this restart"

// tailFrom is the first revision of a resumed session's tail: the one
// after the snapshot's, or the lowest window boundary the snapshot
// records, if that is lower. A lane's window holds its events from its
// boundary on, and those before the snapshot are in neither the snapshot
// nor its summary; a tail that started after the snapshot would lose them
// at every restart. choird treats the snapshot as opaque otherwise.
func tailFrom(ctx context.Context, logger *slog.Logger, id uuid.UUID, snap *rpc.Snapshot, acked int64) int64 {
	from := snap.Rev + 1
	low := windowBoundary(snap.State)
	if low <= 0 || low >= from {
		return from
	}
	if floor := acked - maxTailEvents + 1; low < floor {
		logger.WarnContext(ctx, tailCapped, slog.String("session_id", id.String()), slog.Int64("snapshot_rev", snap.Rev),
			slog.Int64("window_boundary", low), slog.Int64("tail_from", min(floor, from)),
			slog.Int("max_tail_events", maxTailEvents))
		low = floor
	}
	return min(low, from)
}

// windowBoundary reads the lowest window boundary an agent's snapshot
// records, 0 for none: edge.event_window_boundary and each
// open_jobs[].event_window_boundary, the first revision each lane's window
// holds. The decode is tolerant: a field that is absent, not a positive
// integer, or in a state of another shape is skipped, and the rest of the
// state is never looked at.
func windowBoundary(state json.RawMessage) int64 {
	var st map[string]json.RawMessage
	if json.Unmarshal(state, &st) != nil {
		return 0
	}
	var low int64
	take := func(lane json.RawMessage) {
		var l struct {
			Boundary int64 `json:"event_window_boundary"`
		}
		if json.Unmarshal(lane, &l) == nil && l.Boundary > 0 && (low == 0 || l.Boundary < low) {
			low = l.Boundary
		}
	}
	take(st["edge"])
	var jobs []json.RawMessage
	if json.Unmarshal(st["open_jobs"], &jobs) == nil {
		for _, j := range jobs {
			take(j)
		}
	}
	return low
}

// trimTail drops the oldest events of a tail that reaches back before the
// snapshot at rev while those before the snapshot take more than
// maxTailBytes, counted as their payloads plus a fixed allowance for the
// rest of each event's encoding.
func trimTail(ctx context.Context, logger *slog.Logger, id uuid.UUID, rev int64, tail []rpc.Event) []rpc.Event {
	const perEvent = 320 // rev, type, lane, two hashes in hex, created_at, keys
	var size int64
	var before int
	for _, e := range tail {
		if e.Rev > rev {
			break
		}
		size += int64(len(e.Payload)) + perEvent
		before++
	}
	drop := 0
	for ; drop < before && size > maxTailBytes; drop++ {
		size -= int64(len(tail[drop].Payload)) + perEvent
	}
	if drop == 0 {
		return tail
	}
	logger.WarnContext(ctx, tailCapped, slog.String("session_id", id.String()), slog.Int64("snapshot_rev", rev),
		slog.Int64("window_boundary", tail[0].Rev), slog.Int64("tail_from", tail[drop-1].Rev+1), slog.Int("max_tail_bytes", maxTailBytes))
	return tail[drop:]
}
