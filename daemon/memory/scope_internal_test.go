package memory

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/db/agentdb"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/sql/seam"
)

// TestScopes checks the transactions the store runs its queries in: an
// agent's own work runs under its role, and that role can neither read
// nor write another agent's memory (Postgres refuses, the store reports
// ErrPermission); choird's cross-agent reads are read-only.
func TestScopes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	for _, a := range []string{"alice", "bob"} {
		if _, err := seam.Queries(pool).AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: a, Dimensions: 8}); err != nil {
			t.Fatal(err)
		}
	}
	s := New(Options{Pool: pool})
	count := func(tx pgx.Tx, aq *agentdb.Queries) error {
		_, err := aq.KnowledgeEmbeddingBacklog(ctx, "m")
		return err
	}

	t.Run("OwnWorkRunsUnderTheAgentsRole", func(t *testing.T) {
		t.Parallel()
		var user, path string
		err := s.inScope(ctx, scope{schema: "alice", role: "alice"}, true, func(tx pgx.Tx, _ *agentdb.Queries) error {
			return tx.QueryRow(ctx, "SELECT current_user, current_setting('search_path')").Scan(&user, &path)
		}, nil)
		if err != nil || user != "choir_alice" || path != "choir_alice, public" {
			t.Errorf("user %q, search_path %q, %v", user, path, err)
		}
	})

	t.Run("AgentRoleCannotReadAnotherAgentsMemory", func(t *testing.T) {
		t.Parallel()
		err := s.inScope(ctx, scope{schema: "bob", role: "alice"}, true, count, nil)
		var pe *pgconn.PgError
		if !errors.Is(err, ErrPermission) || !errors.As(err, &pe) || pe.Code != "42501" {
			t.Errorf("err = %v, want ErrPermission from Postgres 42501", err)
		}
	})

	t.Run("CrossAgentReadsAreReadOnly", func(t *testing.T) {
		t.Parallel()
		if err := s.inScope(ctx, scope{schema: "bob"}, true, count, nil); err != nil {
			t.Fatalf("read: %v", err)
		}
		err := s.inScope(ctx, scope{schema: "bob"}, true, func(tx pgx.Tx, aq *agentdb.Queries) error {
			_, err := aq.KnowledgeDelete(ctx, [16]byte{})
			return err
		}, nil)
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "25006" {
			t.Errorf("err = %v, want 25006 read_only_sql_transaction", err)
		}
	})
}

// TestTextRankingFindsTheBestMatchesByRarity checks the full-text side
// against what a sample could not promise: among 2,000 chunks holding a
// word, the oldest one, which holds it most, ranks first (it is neither
// among the newest nor likely in a sample of 100); a rare word outweighs a
// common one; of two chunks matching alike, the shorter ranks first; and a
// word beyond the posting budget still ranks what the other words found.
func TestTextRankingFindsTheBestMatchesByRarity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	if _, err := seam.Queries(pool).AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: "rank", Dimensions: 8}); err != nil {
		t.Fatal(err)
	}
	_, err := pool.Exec(ctx, `
		INSERT INTO choir_rank.knowledge_documents (key, text, updated_at)
		VALUES ('best', 'ferry ferry ferry ferry to the island', now() - interval '1 day');
		INSERT INTO choir_rank.knowledge_documents (text)
		SELECT 'note ' || i || ' about the ferry and the harbour weather ' || i FROM generate_series(1, 2000) i;
		INSERT INTO choir_rank.knowledge_documents (key, text) VALUES
		    ('rare', 'the zeppelin timetable'),
		    ('short', 'lighthouse keeper'),
		    ('long', 'lighthouse keeper with many more words of text around it in a longer note about nothing');`)
	if err != nil {
		t.Fatal(err)
	}
	first := func(tuning SearchTuning, query string) string {
		t.Helper()
		s := New(Options{Pool: pool, Search: tuning})
		res, err := s.QueryAsOperator(ctx, []byte(`{"store":"knowledge","mode":"text","target_agent":"rank","query":`+
			strconv.Quote(query)+`}`))
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Documents) == 0 || res.Documents[0].Key == nil {
			return ""
		}
		return *res.Documents[0].Key
	}
	for _, c := range []struct {
		tuning      SearchTuning
		query, want string
	}{
		{SearchTuning{}, "ferry", "best"},
		{SearchTuning{}, "weather timetable", "rare"},
		{SearchTuning{}, "harbour zeppelin", "rare"},
		{SearchTuning{}, "lighthouse keeper", "short"},
		// "ferry" is in 2,001 chunks, over this budget: it only ranks, and
		// "island" finds the chunk that holds both.
		{SearchTuning{PostingBudget: 100}, "ferry island", "best"},
	} {
		if got := first(c.tuning, c.query); got != c.want {
			t.Errorf("query %q (budget %d): first %q, want %q", c.query, c.tuning.PostingBudget, got, c.want)
		}
	}
}
