package main

import (
	"context"
	"fmt"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
)

// load writes rows chunks into the agent schema: sessions of 20 chunks, the
// newest sessions mid_term and the older ones as long-term summaries plus
// text-only detail chunks (detailPerSummary of them per summary chunk).
func load(ctx context.Context, pool *pgxpool.Pool, schema string, c *corpus, rows, detailPerSummary int, progress func(int)) error {
	const perSession = 20
	base := time.Now().Add(-time.Duration(rows) * time.Minute)
	batch := 5000
	for start := 0; start < rows; start += batch {
		n := min(batch, rows-start)
		docs := make([][]any, 0, n*(1+detailPerSummary))
		embs := make([][]any, 0, n)
		var session uuid.UUID
		for i := start; i < start+n; i++ {
			if i%perSession == 0 || session == uuid.Nil {
				session = uuid.New()
			}
			at := base.Add(time.Duration(i) * time.Minute)
			tier := "mid_term"
			// The oldest 20% are long-term: their summaries carry vectors.
			if i < rows/5 {
				tier = "long_term_summary"
			}
			topic, text, vec := c.chunk()
			id := uuid.New()
			docs = append(docs, []any{id, session, tier, int32(i % perSession), text, at, at, at, "embedded",
				fmt.Sprintf(`{"topic":%d}`, topic)})
			embs = append(embs, []any{id, pgvector.NewVector(vec), "bench"})
			if tier == "long_term_summary" {
				for d := range detailPerSummary {
					_, dtext, _ := c.chunk()
					docs = append(docs, []any{uuid.New(), session, "long_term_detail",
						int32((i%perSession)*detailPerSummary + d + perSession), dtext, at, at, at, "none", `{}`})
				}
			}
		}
		err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+pgx.Identifier{schema}.Sanitize()+", public"); err != nil {
				return err
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"memory_documents"},
				[]string{"id", "session_id", "tier", "chunk_index", "text", "created_at", "started_at", "ended_at",
					"embedding_state", "metadata"}, pgx.CopyFromRows(docs)); err != nil {
				return fmt.Errorf("copy documents: %w", err)
			}
			if _, err := tx.CopyFrom(ctx, pgx.Identifier{"memory_embeddings"},
				[]string{"document_id", "embedding", "model"}, pgx.CopyFromRows(embs)); err != nil {
				return fmt.Errorf("copy embeddings: %w", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if progress != nil {
			progress(start + n)
		}
	}
	return nil
}
