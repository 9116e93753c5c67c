package agentapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/rpc/wire"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

// ErrChainGap reports a heartbeat whose base revision is beyond what choird
// has acknowledged: events in between are missing.
var ErrChainGap = errors.New("replication gap")

// ErrChainBroken reports a heartbeat whose hash chain does not continue the
// acknowledged one.
var ErrChainBroken = errors.New("replication chain broken")

// HeartbeatTxObserver, when set, receives the duration of every successful
// heartbeat transaction, from taking a pooled connection (so waiting for
// one counts) to its commit. Only benchmarks set it: the RPC round trip they
// can time from outside also holds the authentication, the replay lookup
// and the decoding of the request.
var HeartbeatTxObserver atomic.Pointer[func(time.Duration)]

// Replicate applies one heartbeat to the durable replica in one
// transaction: lock the session's head row, check that the patch continues
// the acknowledged chain, append the new events, mark the inbox rows they
// name delivered, and advance acked_rev and last_heartbeat_at. A resent
// patch, or the resent prefix of a longer one, is a no-op for the events
// already stored. A gap or a broken chain writes nothing and returns an
// error wrapping wire.ErrConflict that says where to resume.
//
// The common case, a patch that continues exactly where the last one
// ended, is the one statement HeartbeatApply, run on its own: a single
// statement is a transaction, so it needs no BEGIN and COMMIT round trips.
// The statement locks the head row and writes only if the chain continues.
// Any other case comes back unapplied, having written nothing, and is
// sorted out in an explicit transaction that locks the row again.
func Replicate(ctx context.Context, pool *pgxpool.Pool, sessionID uuid.UUID, req rpc.HeartbeatRequest) (rpc.HeartbeatResponse, error) {
	if err := checkPatch(req); err != nil {
		return rpc.HeartbeatResponse{}, err
	}
	start := time.Now()
	params := applyParams(sessionID, req.BaseRev, req.HashPrev, req.Patches, req)
	head, err := seam.Queries(pool).HeartbeatApply(ctx, params)
	if err == nil && !head.Applied {
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			q := seam.Queries(tx)
			if head, err = q.HeartbeatApply(ctx, params); err != nil || head.Applied {
				return err // Applied: the head moved to meet the patch in between.
			}
			return resolveResend(ctx, q, sessionID, req, head)
		})
	}
	if errors.Is(err, choirsql.ErrNotFound) {
		return rpc.HeartbeatResponse{}, fmt.Errorf("session %s: %w", sessionID, wire.ErrNotFound)
	}
	if err != nil {
		return rpc.HeartbeatResponse{}, fmt.Errorf("apply heartbeat %d..%d to session %s: %w", req.BaseRev, req.NewRev, sessionID, err)
	}
	if f := HeartbeatTxObserver.Load(); f != nil {
		(*f)(time.Since(start))
	}
	return rpc.HeartbeatResponse{AckRev: max(head.AckedRev, req.NewRev), ConfigVersionLatest: head.ConfigVersionLatest}, nil
}

// checkPatch refuses a patch whose events are not the contiguous, linked
// revisions base_rev+1..new_rev. The RPC layer has already checked this
// (and the hashes themselves) for heartbeats from the wire; the check here
// is cheap and keeps replicate's arithmetic safe for any caller.
func checkPatch(req rpc.HeartbeatRequest) error {
	if int64(len(req.Patches)) != req.NewRev-req.BaseRev {
		return fmt.Errorf("heartbeat carries %d events for revisions %d..%d: %w",
			len(req.Patches), req.BaseRev+1, req.NewRev, wire.ErrBadRequest)
	}
	prev := req.HashPrev
	for i, e := range req.Patches {
		if e.Rev != req.BaseRev+int64(i)+1 || e.HashPrev != prev {
			return fmt.Errorf("heartbeat event %d (rev %d) does not continue rev %d: %w",
				i, e.Rev, req.BaseRev+int64(i), wire.ErrBadRequest)
		}
		prev = e.Hash
	}
	if prev != req.HashNew {
		return fmt.Errorf("heartbeat hash_new %s is not the hash of rev %d: %w", req.HashNew, req.NewRev, wire.ErrBadRequest)
	}
	return nil
}

// resolveResend handles a heartbeat that HeartbeatApply did not apply,
// with the head row still locked by the transaction: the session is not
// live, the patch leaves a gap, breaks the chain, or resends revisions
// already stored. For a resend it stores the new tail (possibly nothing).
func resolveResend(ctx context.Context, q *db.Queries, sessionID uuid.UUID, req rpc.HeartbeatRequest, head db.HeartbeatApplyRow) error {
	if head.Status != "active" && head.Status != "stopping" {
		return fmt.Errorf("session %s is %s: %w", sessionID, head.Status, wire.ErrUnauthenticated)
	}
	acked, err := rpc.HashFromBytes(head.AckedHash)
	if err != nil {
		return fmt.Errorf("session %s acked hash: %w", sessionID, err)
	}
	switch {
	case req.BaseRev > head.AckedRev:
		return fmt.Errorf("%w: heartbeat base_rev %d is beyond acked_rev %d; resend from rev %d: %w",
			ErrChainGap, req.BaseRev, head.AckedRev, head.AckedRev+1, wire.ErrConflict)
	case req.BaseRev == head.AckedRev:
		// HeartbeatApply refuses a patch at the acknowledged base only
		// for its hash.
		return fmt.Errorf("%w: hash_prev %s at rev %d, but the acknowledged hash is %s: %w",
			ErrChainBroken, req.HashPrev, req.BaseRev, acked, wire.ErrConflict)
	}
	// A resend overlapping what is stored: the revision it shares with the
	// store must carry the stored hash, and only what follows is new.
	var fresh []rpc.Event
	if req.NewRev <= head.AckedRev {
		if req.NewRev == head.AckedRev && req.HashNew != acked {
			return fmt.Errorf("%w: resent rev %d has hash %s, stored %s: %w",
				ErrChainBroken, req.NewRev, req.HashNew, acked, wire.ErrConflict)
		}
	} else {
		overlap := req.Patches[head.AckedRev-req.BaseRev-1]
		if overlap.Hash != acked {
			return fmt.Errorf("%w: resent rev %d has hash %s, stored %s: %w",
				ErrChainBroken, overlap.Rev, overlap.Hash, acked, wire.ErrConflict)
		}
		fresh = req.Patches[head.AckedRev-req.BaseRev:]
	}
	// Apply the new tail (or nothing, which still records the heartbeat)
	// from the acknowledged head; the row is locked, so it applies.
	again, err := q.HeartbeatApply(ctx, applyParams(sessionID, head.AckedRev, acked, fresh, req))
	if err != nil {
		return fmt.Errorf("apply resent heartbeat %d..%d to session %s: %w", req.BaseRev, req.NewRev, sessionID, err)
	}
	if !again.Applied {
		return fmt.Errorf("session %s moved while its head row was locked (acked_rev %d, want %d)",
			sessionID, again.AckedRev, head.AckedRev)
	}
	return nil
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
		CreatedAts: make([]time.Time, n), NewRev: base, HashNew: basePrev[:], ConfigVersion: req.ConfigVersion,
		InboxIds: deliveredInboxIDs(events), ApprovalIds: takenApprovalIDs(events)}
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

// deliveredInboxIDs returns the inbox rows that events name: the user
// messages and injections the agent took from its inbox. HeartbeatApply
// marks them delivered in the statement that appends the events: from then
// on they are in the agent's durable log and are never pushed again.
func deliveredInboxIDs(events []rpc.Event) []int64 {
	var ids []int64
	for _, e := range events {
		if e.Type != rpc.EventUserMsg && e.Type != rpc.EventInjectedInstruction {
			continue
		}
		// Most such events name no inbox row (an approval outcome, a
		// test's message): skip the decoding, which is most of the cost.
		if !bytes.Contains(e.Payload, []byte(`"inbox_id"`)) && !bytes.Contains(e.Payload, []byte(`"message_id"`)) {
			continue
		}
		var p struct {
			InboxID   int64  `json:"inbox_id"`
			MessageID string `json:"message_id"`
		}
		if json.Unmarshal(e.Payload, &p) != nil {
			continue
		}
		if p.InboxID == 0 {
			// Agents before inbox_id named the row in message_id.
			p.InboxID, _ = strconv.ParseInt(p.MessageID, 10, 64)
		}
		if p.InboxID > 0 {
			ids = append(ids, p.InboxID)
		}
	}
	return ids
}

// takenApprovalIDs returns the approvals whose outcome the events show the
// agent took: an injected_instruction of source "approval" (agent/lane
// commits one per outcome, once), not given back by a later one marked
// released (the session ended before the approved call could run).
// HeartbeatApply marks them taken, so they are not pushed to the agent's
// next session again.
func takenApprovalIDs(events []rpc.Event) []string {
	var ids []string
	for _, e := range events {
		if e.Type != rpc.EventInjectedInstruction || !bytes.Contains(e.Payload, []byte(`"approval_id"`)) {
			continue
		}
		var p struct {
			Source     string `json:"source"`
			ApprovalID string `json:"approval_id"`
			Released   bool   `json:"released"`
		}
		if json.Unmarshal(e.Payload, &p) != nil || p.Source != "approval" {
			continue
		}
		if _, err := uuid.Parse(p.ApprovalID); err != nil {
			continue
		}
		ids = slices.DeleteFunc(ids, func(id string) bool { return id == p.ApprovalID })
		if !p.Released {
			ids = append(ids, p.ApprovalID)
		}
	}
	return ids
}
