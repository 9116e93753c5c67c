package sql_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	choirsql "github.com/choirhq/choir/sql"
)

// columns describes the tables of a schema as "table.column type null".
func columns(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT table_name || '.' || column_name || ' ' || udt_name || ' ' || is_nullable
		  FROM information_schema.columns WHERE table_schema = $1 ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	cols, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return cols
}

func provision(t *testing.T, pool *pgxpool.Pool, agent string, dims int) {
	t.Helper()
	if _, err := pool.Exec(context.Background(), "SELECT choir_control.provision_agent($1, $2)", agent, dims); err != nil {
		t.Fatalf("provision %s: %v", agent, err)
	}
}

// TestAgentTablesMatchProvisionedSchema keeps sql/agent/tables.sql, which
// sqlc generates the per-agent queries from, equal to what provisioning
// creates.
func TestAgentTablesMatchProvisionedSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	provision(t, b.pool, "shape", 8)
	ddl, err := os.ReadFile("agent/tables.sql")
	if err != nil {
		t.Fatal(err)
	}
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA sqlc_view; SET LOCAL search_path = sqlc_view, public"); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, string(ddl))
		return err
	})
	if err != nil {
		t.Fatalf("agent/tables.sql does not run: %v", err)
	}
	got, want := columns(t, b.pool, "sqlc_view"), columns(t, b.pool, "choir_shape")
	if !slices.Equal(got, want) {
		t.Errorf("agent/tables.sql differs from a provisioned schema:\n  sqlc:        %v\n  provisioned: %v", got, want)
	}
}

func TestMemoryMigration(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("UpgradesSchemasProvisionedBeforeIt", func(t *testing.T) {
		t.Parallel()
		m, pool := newMigrator(t, dbtest.NewEmptyDatabase(t))
		if _, err := m.UpTo(ctx, 9); err != nil {
			t.Fatal(err)
		}
		provision(t, pool, "old", 3)
		_, err := pool.Exec(ctx, `
			INSERT INTO choir_old.knowledge_documents (key, text) VALUES ('k', 'an old fact');
			INSERT INTO choir_old.memory_documents (id, session_id, tier, chunk_index, text) VALUES
				('00000000-0000-0000-0000-000000000001', gen_random_uuid(), 'mid_term', 0, 'kept'),
				('00000000-0000-0000-0000-000000000002', gen_random_uuid(), 'long_term_detail', 0, 'detail');
			INSERT INTO choir_old.memory_embeddings (document_id, embedding) VALUES
				('00000000-0000-0000-0000-000000000001', '[1,0,0]'),
				('00000000-0000-0000-0000-000000000002', '[0,1,0]');`)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Up(ctx); err != nil {
			t.Fatal(err)
		}
		provision(t, pool, "new", 3)
		old, fresh := columns(t, pool, "choir_old"), columns(t, pool, "choir_new")
		if !slices.Equal(old, fresh) {
			t.Errorf("upgraded schema differs from a new one:\n  old: %v\n  new: %v", old, fresh)
		}
		var states string
		pool.QueryRow(ctx, `SELECT string_agg(tier || '=' || embedding_state, ',' ORDER BY id)
			FROM choir_old.memory_documents`).Scan(&states)
		if states != "mid_term=embedded,long_term_detail=none" {
			t.Errorf("embedding states after upgrade: %s", states)
		}
		var vectors int
		pool.QueryRow(ctx, "SELECT count(*) FROM choir_old.memory_embeddings").Scan(&vectors)
		if vectors != 1 {
			t.Errorf("%d vectors, want 1: a detail chunk kept its vector", vectors)
		}
		var op, actor string
		if err := pool.QueryRow(ctx, "SELECT op, actor FROM choir_old.knowledge_versions WHERE key = 'k'").Scan(&op, &actor); err != nil ||
			op != "insert" || actor != "migration" {
			t.Errorf("existing knowledge got no first version: %s %s %v", op, actor, err)
		}
	})

	t.Run("DownRestoresTheEarlierProvisioning", func(t *testing.T) {
		t.Parallel()
		m, pool := newMigrator(t, dbtest.NewEmptyDatabase(t))
		if _, err := m.UpTo(ctx, 9); err != nil {
			t.Fatal(err)
		}
		provision(t, pool, "before", 3)
		before := columns(t, pool, "choir_before")
		var src string
		pool.QueryRow(ctx, "SELECT prosrc FROM pg_proc WHERE proname = 'provision_agent'").Scan(&src)
		if _, err := m.Up(ctx); err != nil {
			t.Fatal(err)
		}
		provision(t, pool, "during", 3)
		if _, err := m.DownTo(ctx, 9); err != nil {
			t.Fatal(err)
		}
		var after string
		pool.QueryRow(ctx, "SELECT prosrc FROM pg_proc WHERE proname = 'provision_agent'").Scan(&after)
		if after != src {
			t.Error("provision_agent changed: it is defined once, and migrations register parts of the schema")
		}
		if got := parts(t, pool); !slices.Equal(got, []string{"base"}) {
			t.Errorf("after down to 9, the schema's parts are %v, want [base]", got)
		}
		provision(t, pool, "after", 3)
		for _, agent := range []string{"before", "during", "after"} {
			if got := columns(t, pool, "choir_"+agent); !slices.Equal(got, before) {
				t.Errorf("after down, %s's schema is %v, want %v", agent, got, before)
			}
		}
		if _, err := m.Up(ctx); err != nil {
			t.Fatalf("up again: %v", err)
		}
	})
}

func TestMemorySchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	asAgent := func(pool *pgxpool.Pool, agent, stmt string) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL ROLE choir_%s; SET LOCAL search_path = choir_%[1]s, public", agent)); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, stmt)
			return err
		})
	}

	t.Run("AgentRoleCannotRewriteKnowledgeHistory", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		provision(t, b.pool, "hist", 3)
		if err := asAgent(b.pool, "hist", `INSERT INTO knowledge_versions (document_id, version, op, text, actor)
			VALUES (gen_random_uuid(), 1, 'insert', 'x', 'agent:hist')`); err != nil {
			t.Fatalf("append: %v", err)
		}
		for _, stmt := range []string{
			"UPDATE knowledge_versions SET text = 'rewritten' WHERE true",
			"DELETE FROM knowledge_versions WHERE true",
			"TRUNCATE knowledge_versions",
		} {
			if pe := pgErr(t, asAgent(b.pool, "hist", stmt)); pe.Code != "42501" {
				t.Errorf("%s: %s %s, want 42501", stmt, pe.Code, pe.Message)
			}
		}
	})

	t.Run("DetailChunksCannotHoldVectors", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		provision(t, b.pool, "tiers", 3)
		err := asAgent(b.pool, "tiers", `INSERT INTO memory_documents (session_id, tier, chunk_index, text, embedding_state)
			VALUES (gen_random_uuid(), 'long_term_detail', 0, 'x', 'pending')`)
		if pe := pgErr(t, err); pe.ConstraintName != "memory_documents_detail_has_no_vector" {
			t.Errorf("constraint %q: %s", pe.ConstraintName, pe.Message)
		}
	})

	t.Run("ContentHashIsTheSHA256OfTheText", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		provision(t, b.pool, "hash", 3)
		var ok bool
		err := b.pool.QueryRow(ctx, `INSERT INTO choir_hash.knowledge_documents (text) VALUES ('héllo')
			RETURNING content_hash = sha256(convert_to('héllo', 'UTF8'))`).Scan(&ok)
		if err != nil || !ok {
			t.Errorf("content hash: %v %v", ok, err)
		}
	})

	t.Run("ChangingDimensionsRetypesAndMarksForReembedding", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		provision(t, b.pool, "dims", 3)
		_, err := b.pool.Exec(ctx, `
			INSERT INTO choir_dims.knowledge_documents (id, text, embedding_state)
				VALUES ('00000000-0000-0000-0000-000000000001', 'x', 'embedded');
			INSERT INTO choir_dims.knowledge_embeddings VALUES ('00000000-0000-0000-0000-000000000001', '[1,2,3]')`)
		if err != nil {
			t.Fatal(err)
		}
		q := db.New(b.pool)
		for i, want := range []bool{true, false} {
			changed, err := q.MemoryAgentDimensionsChange(ctx, db.MemoryAgentDimensionsChangeParams{AgentID: "dims", Dimensions: 5})
			if err != nil || changed != want {
				t.Fatalf("change %d: %v, %v; want %v", i, changed, err, want)
			}
		}
		var typ, state string
		var vectors, hnsw int
		b.pool.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute
			WHERE attrelid = 'choir_dims.knowledge_embeddings'::regclass AND attname = 'embedding'`).Scan(&typ)
		b.pool.QueryRow(ctx, "SELECT embedding_state FROM choir_dims.knowledge_documents").Scan(&state)
		b.pool.QueryRow(ctx, "SELECT count(*) FROM choir_dims.knowledge_embeddings").Scan(&vectors)
		b.pool.QueryRow(ctx, `SELECT count(*) FROM pg_indexes WHERE schemaname = 'choir_dims'
			AND indexdef LIKE '%USING hnsw%'`).Scan(&hnsw)
		if typ != "vector(5)" || state != "pending" || vectors != 0 || hnsw != 2 {
			t.Errorf("after the change: %s, %s, %d vectors, %d HNSW indexes", typ, state, vectors, hnsw)
		}
		provision(t, b.pool, "dims", 5)
		_, err = b.pool.Exec(ctx, "SELECT choir_control.provision_agent('dims', 3)")
		if pe := pgErr(t, err); !strings.Contains(pe.Hint, "choirctl memory reembed") {
			t.Errorf("hint %q", pe.Hint)
		}
	})
}

// parts are the registered parts of an agent's schema, in order.
func parts(t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), "SELECT part FROM choir_control.agent_schema_parts ORDER BY position")
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// TestSchemaPartsAdoptOlderDatabases plays a database that 00010 and 00026
// reached when they still rewrote provision_agent whole: no parts
// registry. Migration 42 defines provision_agent and its parts from 00004
// itself, and an agent provisioned then gets the schema a fresh
// database gives.
func TestSchemaPartsAdoptOlderDatabases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	fresh, freshPool := newMigrator(t, dbtest.NewEmptyDatabase(t))
	if _, err := fresh.Up(ctx); err != nil {
		t.Fatal(err)
	}
	provision(t, freshPool, "fresh", 3)
	want := append(columns(t, freshPool, "choir_fresh"), objects(t, freshPool, "choir_fresh")...)

	m, pool := newMigrator(t, dbtest.NewEmptyDatabase(t))
	if _, err := m.UpTo(ctx, choirsql.PartsMigrationVersion-1); err != nil {
		t.Fatal(err)
	}
	provision(t, pool, "old", 3)
	if _, err := pool.Exec(ctx, `DROP TABLE choir_control.agent_schema_parts;
		DROP FUNCTION choir_control.agent_schema_base(text, int)`); err != nil {
		t.Fatal(err)
	}
	if _, err := m.Up(ctx); err != nil {
		t.Fatalf("up from a database without parts: %v", err)
	}
	if got := parts(t, pool); !slices.Equal(got, []string{"base", "memory", "text"}) {
		t.Errorf("parts = %v, want [base memory text]", got)
	}
	provision(t, pool, "new", 3)
	for _, agent := range []string{"old", "new"} {
		if got := append(columns(t, pool, "choir_"+agent), objects(t, pool, "choir_"+agent)...); !slices.Equal(got, want) {
			t.Errorf("%s's schema is %v, want %v as on a fresh database", agent, got, want)
		}
	}
	if _, err := m.DownTo(ctx, choirsql.PartsMigrationVersion-1); err != nil {
		t.Fatalf("down past 42: %v", err)
	}
}

// objects are a schema's indexes and triggers, by name.
func objects(t *testing.T, pool *pgxpool.Pool, schema string) []string {
	t.Helper()
	rows, err := pool.Query(context.Background(), `
		SELECT 'index ' || indexname FROM pg_indexes WHERE schemaname = $1
		UNION ALL
		SELECT 'trigger ' || tg.tgname FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid
		  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = $1 AND NOT tg.tgisinternal
		ORDER BY 1`, schema)
	if err != nil {
		t.Fatal(err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return got
}
