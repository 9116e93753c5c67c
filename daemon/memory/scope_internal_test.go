package memory

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/db/agentdb"
	"github.com/choirhq/choir/dbtest"
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
		if _, err := db.New(pool).AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: a, Dimensions: 8}); err != nil {
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

func TestCommonWordsSkipTheGINSample(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	if _, err := db.New(pool).AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: "stats", Dimensions: 8}); err != nil {
		t.Fatal(err)
	}
	_, err := pool.Exec(ctx, `INSERT INTO choir_stats.knowledge_documents (text)
		SELECT 'deployment note ' || i || CASE WHEN i % 50 = 0 THEN ' rollback' ELSE '' END
		  FROM generate_series(1, 500) i;
		ANALYZE choir_stats.knowledge_documents`)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Pool: pool})
	var common map[string]bool
	err = s.inScope(ctx, scope{schema: "stats", role: "stats"}, true, func(_ pgx.Tx, aq *agentdb.Queries) error {
		var err error
		common, err = s.commonWords(ctx, aq, "stats", StoreKnowledge)
		return err
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		lexemes []string
		want    bool
	}{
		{[]string{"deploy"}, true},
		{[]string{"deploy", "note"}, true},
		{[]string{"deploy", "rollback"}, false},
		{[]string{"unknown"}, false},
		{nil, false},
	} {
		if _, _, got := orTerms(c.lexemes, common); got != c.want {
			t.Errorf("orTerms(%v) all common = %v; want %v", c.lexemes, got, c.want)
		}
	}
	res, err := s.QueryAsOperator(ctx, []byte(`{"store":"knowledge","mode":"text","query":"deployment","target_agent":"stats"}`))
	if err != nil || res.Count != DefaultLimit {
		t.Errorf("a query of common words still finds them: %v, %v", res, err)
	}
}
