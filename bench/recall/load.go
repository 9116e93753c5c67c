package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/daemon/memory/pipeline"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// startPipeline starts a River client with the memory pipeline's workers
// (chunking, embedding, promotion), as choird does. Every session stays
// mid-term (MidTermSessions is large), so promotion never folds the
// benchmark's sessions into summaries.
func startPipeline(ctx context.Context, pool *pgxpool.Pool) (*jobs.Client, error) {
	client, err := jobs.NewClient(jobs.Deps{Pool: pool, Features: []jobs.Feature{
		pipeline.Workers{Pool: pool, Embedder: embed.NewOffline(dims),
			MidTermSessions: func() int { return 1 << 20 }}}})
	if err != nil {
		return nil, err
	}
	return client, client.Start(ctx)
}

// loadSessions writes a conversation as its agent's sessions: each turn a
// user_msg and a model_output event on the edge lane, hash-chained; then
// ends each session and enqueues its chunking in the same transaction, as
// choird does when a session ends.
func loadSessions(ctx context.Context, pool *pgxpool.Pool, client *jobs.Client, agent string, c conversation,
	base time.Time) (map[uuid.UUID]int, error) {
	q := seam.Queries(pool)
	ids := map[uuid.UUID]int{}
	bySession := map[int][]turn{}
	var order []int
	for _, t := range c.turns {
		if _, ok := bySession[t.session]; !ok {
			order = append(order, t.session)
		}
		bySession[t.session] = append(bySession[t.session], t)
	}
	at := base
	for _, si := range order {
		h := sha256.Sum256([]byte(uuid.NewString()))
		s, err := q.SessionCreate(ctx, db.SessionCreateParams{AgentID: agent, LeaseTokenHash: h[:],
			BaseHash: make([]byte, 32), ResourceBindings: json.RawMessage(`{}`)})
		if err != nil {
			return nil, fmt.Errorf("create session: %w", err)
		}
		ids[s.SessionID] = si
		prev := make([]byte, 32)
		var rows []db.EventsAppendParams
		add := func(typ, text string) {
			rev := int64(len(rows) + 1)
			sum := sha256.Sum256(fmt.Appendf(append([]byte(nil), prev...), "%s %d", s.SessionID, rev))
			payload, _ := json.Marshal(map[string]string{"text": text})
			at = at.Add(30 * time.Second)
			rows = append(rows, db.EventsAppendParams{SessionID: s.SessionID, Rev: rev, EventType: typ, Lane: "edge",
				Payload: payload, HashPrev: prev, Hash: sum[:], CreatedAt: at})
			prev = sum[:]
		}
		for _, t := range bySession[si] {
			add("user_msg", t.user)
			add("model_output", t.reply)
		}
		if _, err := q.EventsAppend(ctx, rows); err != nil {
			return nil, fmt.Errorf("append events: %w", err)
		}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := seam.Queries(tx).SessionEnd(ctx, db.SessionEndParams{SessionID: s.SessionID, EndReason: "bench"}); err != nil {
				return err
			}
			return memory.InsertChunkSessionTx(ctx, client, tx, s.SessionID)
		})
		if err != nil {
			return nil, fmt.Errorf("end session: %w", err)
		}
	}
	return ids, nil
}

// waitIdle waits until no memory job (chunking, embedding, promotion) is
// left to run, or fails after limit.
func waitIdle(ctx context.Context, pool *pgxpool.Pool, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		var left, failed int
		if err := pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state NOT IN ('completed', 'cancelled', 'discarded')),
			count(*) FILTER (WHERE state IN ('cancelled', 'discarded'))
			FROM river_job WHERE kind LIKE 'memory\_%'`).Scan(&left, &failed); err != nil {
			return err
		}
		if failed > 0 {
			return fmt.Errorf("%d memory jobs failed for good", failed)
		}
		if left == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d memory jobs still pending after %s", left, limit)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// chunks are an agent's memory chunks as the pipeline made them: their
// ids and texts, and for each turn the chunk holding its user message.
type chunks struct {
	ids    []uuid.UUID
	texts  []string
	ofTurn []int // turn -> index into ids
}

// readChunks reads what the pipeline made of a conversation. A turn's
// chunk is the one its user_msg event resolves to (memory_event_refs):
// the evidence of a question is the chunk(s) holding its evidence turns.
func readChunks(ctx context.Context, pool *pgxpool.Pool, agent string, sessions map[uuid.UUID]int,
	c conversation) (chunks, error) {
	var out chunks
	schema := pgx.Identifier{"choir_" + agent}.Sanitize()
	rows, err := pool.Query(ctx, `SELECT d.id, d.text, d.session_id, r.rev
		FROM `+schema+`.memory_documents d JOIN `+schema+`.memory_event_refs r ON r.document_id = d.id
		ORDER BY d.started_at, r.rev`)
	if err != nil {
		return out, err
	}
	defer rows.Close()
	index := map[uuid.UUID]int{}
	at := map[[2]int64]int{} // session, rev -> chunk
	for rows.Next() {
		var id uuid.UUID
		var text string
		var sid uuid.UUID
		var rev int64
		if err := rows.Scan(&id, &text, &sid, &rev); err != nil {
			return out, err
		}
		sn := int64(sessions[sid])
		if _, ok := index[id]; !ok {
			index[id] = len(out.ids)
			out.ids = append(out.ids, id)
			out.texts = append(out.texts, text)
		}
		at[[2]int64{sn, rev}] = index[id]
	}
	if err := rows.Err(); err != nil {
		return out, err
	}
	for _, t := range c.turns {
		k, ok := at[[2]int64{int64(t.session), int64(2*t.index + 1)}]
		if !ok {
			return out, fmt.Errorf("agent %s: no chunk holds turn %d of session %d", agent, t.index, t.session)
		}
		out.ofTurn = append(out.ofTurn, k)
	}
	return out, nil
}
