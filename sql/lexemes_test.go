package sql_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
)

// exactLexemes compares an agent's kept full-text statistics of store with
// a count made from scratch over its documents.
func exactLexemes(t *testing.T, pool *pgxpool.Pool, schema, store string) {
	t.Helper()
	ctx := context.Background()
	var diff, keptDocs, docs, keptLen, length int64
	err := pool.QueryRow(ctx, fmt.Sprintf(`
		WITH exact AS (
		    SELECT l AS lexeme, count(*)::int AS docs
		      FROM %[1]s.%[2]s_documents d, unnest(tsvector_to_array(d.tsv)) AS l GROUP BY l
		)
		SELECT (SELECT count(*) FROM exact e FULL JOIN %[1]s.%[2]s_lexemes k USING (lexeme)
		         WHERE e.docs IS DISTINCT FROM k.docs),
		       coalesce((SELECT docs FROM %[1]s.lexeme_totals WHERE store = '%[2]s'), -1),
		       (SELECT count(*) FROM %[1]s.%[2]s_documents),
		       coalesce((SELECT lexemes FROM %[1]s.lexeme_totals WHERE store = '%[2]s'), -1),
		       (SELECT coalesce(sum(length(tsv)), 0) FROM %[1]s.%[2]s_documents)`, schema, store)).
		Scan(&diff, &keptDocs, &docs, &keptLen, &length)
	if err != nil {
		t.Fatal(err)
	}
	if diff != 0 || keptDocs != docs || keptLen != length {
		t.Fatalf("%s statistics of %s: %d lexemes counted wrong, %d documents kept against %d, %d lexemes in all "+
			"kept against %d", store, schema, diff, keptDocs, docs, keptLen, length)
	}
}

// TestLexemeStatisticsStayExact writes documents every way the store and an
// operator can (inserts of many rows, text updates, updates that leave the
// text alone, deletes, and concurrent writers sharing words) and checks
// after each that the statistics equal a count from scratch; the agent's
// own role can read them but not write them.
func TestLexemeStatisticsStayExact(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	provision(t, b.pool, "stats", 8)
	const s = "choir_stats"
	steps := []string{
		`INSERT INTO choir_stats.memory_documents (session_id, tier, chunk_index, text, embedding_state)
		 SELECT gen_random_uuid(), 'mid_term', 0, 'Ana booked the ferry to Hydra ' || i || ' ferries', 'pending'
		   FROM generate_series(1, 50) i`,
		`INSERT INTO choir_stats.memory_documents (session_id, tier, chunk_index, text, embedding_state)
		 VALUES (gen_random_uuid(), 'mid_term', 0, 'the the of', 'pending')`,
		`UPDATE choir_stats.memory_documents SET embedding_state = 'failed' WHERE text LIKE '%1 ferries'`,
		`DELETE FROM choir_stats.memory_documents WHERE text LIKE '%2 ferries'`,
		`INSERT INTO choir_stats.knowledge_documents (key, text) VALUES ('a', 'Hydra ferry times'), ('b', 'ferry')`,
		`UPDATE choir_stats.knowledge_documents SET text = 'bus timetable', version = version + 1 WHERE key = 'a'`,
		`DELETE FROM choir_stats.knowledge_documents WHERE key = 'b'`,
	}
	for _, q := range steps {
		if _, err := b.pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		exactLexemes(t, b.pool, s, "memory")
		exactLexemes(t, b.pool, s, "knowledge")
	}

	// Eight writers at once, each inserting and deleting documents that
	// share most of their words: no deadlock, no lost count.
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 20 {
				_, err := b.pool.Exec(ctx, `
					INSERT INTO choir_stats.memory_documents (session_id, tier, chunk_index, text)
					SELECT gen_random_uuid(), 'mid_term', 0, 'shared words travel hydra writer' || $1::int || ' turn' || i
					  FROM generate_series(1, 5) i`, w*100+i)
				if err == nil && i%3 == 0 {
					_, err = b.pool.Exec(ctx, `DELETE FROM choir_stats.memory_documents WHERE text LIKE $1`,
						fmt.Sprintf("%% writer%d turn1", w*100+i))
				}
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	exactLexemes(t, b.pool, s, "memory")

	tx, err := b.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL ROLE choir_stats"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := tx.QueryRow(ctx, "SELECT docs FROM choir_stats.memory_lexemes WHERE lexeme = 'hydra'").Scan(&n); err != nil || n == 0 {
		t.Fatalf("the agent role reads the statistics: %d, %v", n, err)
	}
	if _, err := tx.Exec(ctx, "UPDATE choir_stats.memory_lexemes SET docs = 1"); err == nil {
		t.Fatal("the agent role rewrote its statistics")
	}
}
