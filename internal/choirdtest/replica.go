package choirdtest

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/rpc"
	"github.com/choirhq/choir/sql/seam"
)

// NewSession creates a live session of agent in pool's database, with no
// choird, and returns its id.
func NewSession(t testing.TB, pool *pgxpool.Pool, agent string) uuid.UUID {
	t.Helper()
	id, _ := TokenSession(t, pool, agent)
	return id
}

// TokenSession creates a live session of agent and returns its lease token.
func TokenSession(t testing.TB, pool *pgxpool.Pool, agent string) (uuid.UUID, string) {
	t.Helper()
	ctx := context.Background()
	q := seam.Queries(pool)
	if _, err := q.AgentUpsert(ctx, db.AgentUpsertParams{AgentID: agent, Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
	token, hash := rpc.NewLeaseToken()
	s, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: agent, LeaseTokenHash: hash,
		BaseHash: rpc.Genesis[:], ResourceBindings: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	return s.SessionID, token
}

// ChainEvents are user messages from rev from to rev to, sealed in a
// chain that starts after prev.
func ChainEvents(t testing.TB, from, to int64, prev rpc.Hash) []rpc.Event {
	t.Helper()
	var out []rpc.Event
	for rev := from; rev <= to; rev++ {
		e := rpc.Event{Rev: rev, Type: rpc.EventUserMsg, Lane: "edge",
			Payload: json.RawMessage(fmt.Sprintf(`{"text":"message %d"}`, rev)), CreatedAt: time.Now()}
		if err := e.Seal(prev); err != nil {
			t.Fatal(err)
		}
		out = append(out, e)
		prev = e.Hash
	}
	return out
}

// Patch is the heartbeat that carries evs after rev base, whose hash is
// basePrev.
func Patch(evs []rpc.Event, base int64, basePrev rpc.Hash) rpc.HeartbeatRequest {
	req := rpc.HeartbeatRequest{BaseRev: base, NewRev: base + int64(len(evs)), Patches: evs,
		HashPrev: basePrev, HashNew: basePrev, Timestamp: time.Now(), ConfigVersion: 1}
	if len(evs) > 0 {
		req.HashNew = evs[len(evs)-1].Hash
	}
	return req
}

// Instance is the id of the runtime's instance of sessionID.
func (c *Choird) Instance(t testing.TB, sessionID string) string {
	t.Helper()
	list, err := c.Runtime().List(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, inst := range list {
		if inst.SessionID == sessionID {
			return inst.ID
		}
	}
	t.Fatalf("no instance for session %s", sessionID)
	return ""
}

// ProbeReport is the report of runtimetest's reach probe, run by
// choir.exec in workspace ws, from the tool's result: its output, or the
// artifact that holds it whole.
func ProbeReport(t testing.TB, result, ws string) string {
	t.Helper()
	var r struct {
		Output *struct {
			Output *string `json:"output"`
		} `json:"output"`
		ArtifactRef string `json:"artifact_ref"`
	}
	if err := json.Unmarshal([]byte(result), &r); err != nil || r.Output == nil || r.Output.Output == nil {
		t.Fatalf("no probe report in the tool result (%v):\n%s", err, result)
	}
	if r.ArtifactRef == "" {
		return *r.Output.Output
	}
	b, err := os.ReadFile(filepath.Join(ws, r.ArtifactRef))
	if err != nil {
		t.Fatalf("the probe's whole output: %v", err)
	}
	return string(b)
}
