package sql_test

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
)

type testBundle struct {
	pool *pgxpool.Pool
	q    *db.Queries
}

func setup(t *testing.T) *testBundle {
	t.Helper()
	pool := dbtest.NewPool(t)
	return &testBundle{pool: pool, q: db.New(pool)}
}

var genesis = make([]byte, 32)

func tokenHash(t *testing.T) []byte {
	t.Helper()
	b := make([]byte, 32)
	rand.Read(b)
	h := sha256.Sum256(b)
	return h[:]
}

func (b *testBundle) agent(t *testing.T, id string) {
	t.Helper()
	if _, err := b.q.AgentUpsert(context.Background(), db.AgentUpsertParams{AgentID: id, Config: json.RawMessage(`{}`)}); err != nil {
		t.Fatal(err)
	}
}

func (b *testBundle) session(t *testing.T, agentID string) db.ChoirControlSession {
	t.Helper()
	s, err := b.q.SessionCreate(context.Background(), db.SessionCreateParams{
		AgentID: agentID, LeaseTokenHash: tokenHash(t), BaseHash: genesis,
		ResourceBindings: json.RawMessage(`{}`),
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func chain(prev []byte, rev int64) []byte {
	h := sha256.New()
	h.Write(prev)
	h.Write([]byte{byte(rev)})
	return h.Sum(nil)
}

func events(sessionID uuid.UUID, from, to int64, prev []byte) []db.EventsAppendParams {
	var out []db.EventsAppendParams
	for rev := from; rev <= to; rev++ {
		hash := chain(prev, rev)
		out = append(out, db.EventsAppendParams{SessionID: sessionID, CreatedAt: time.Now(), Rev: rev, EventType: "user_msg", Lane: "edge",
			Payload: json.RawMessage(`{"text":"hi"}`), HashPrev: prev, Hash: hash})
		prev = hash
	}
	return out
}

func pgErr(t *testing.T, err error) *pgconn.PgError {
	t.Helper()
	var pe *pgconn.PgError
	if !errors.As(err, &pe) {
		t.Fatalf("err = %v, want a Postgres error", err)
	}
	return pe
}

func TestSessionInvariants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("SecondLiveSessionIsRejectedNamingTheHolder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "alpha")
		first := b.session(t, "alpha")
		_, err := b.q.SessionCreate(ctx, db.SessionCreateParams{AgentID: "alpha", LeaseTokenHash: tokenHash(t),
			BaseHash: genesis, ResourceBindings: json.RawMessage(`{}`)})
		pe := pgErr(t, err)
		if pe.Code != "23505" || pe.ConstraintName != "sessions_one_live_per_agent" {
			t.Errorf("code %s constraint %s", pe.Code, pe.ConstraintName)
		}
		if !strings.Contains(pe.Message, first.SessionID.String()) || !strings.Contains(pe.Message, "alpha") {
			t.Errorf("message %q does not name holder %s", pe.Message, first.SessionID)
		}
		if _, err := b.q.SessionEnd(ctx, db.SessionEndParams{SessionID: first.SessionID, EndReason: "test"}); err != nil {
			t.Fatal(err)
		}
		b.session(t, "alpha") // allowed once the first has ended
	})

	t.Run("ConcurrentStartsOfOneAgentLetExactlyOneWin", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "racer")
		var wg sync.WaitGroup
		errs := make([]error, 8)
		for i := range errs {
			wg.Go(func() {
				_, errs[i] = b.q.SessionCreate(ctx, db.SessionCreateParams{AgentID: "racer",
					LeaseTokenHash: tokenHash(t), BaseHash: genesis, ResourceBindings: json.RawMessage(`{}`)})
			})
		}
		wg.Wait()
		wins := 0
		for _, err := range errs {
			if err == nil {
				wins++
			} else if pe := pgErr(t, err); !strings.Contains(pe.Message, "already has a live session") {
				t.Errorf("loser error %q does not name the holder", pe.Message)
			}
		}
		if wins != 1 {
			t.Fatalf("%d concurrent starts won, want 1", wins)
		}
	})

	t.Run("DoubleLeaseIsRejectedNamingTheHolder", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "alpha")
		b.agent(t, "beta")
		sa, sb := b.session(t, "alpha"), b.session(t, "beta")
		if _, err := b.q.LeaseAcquire(ctx, db.LeaseAcquireParams{ResourceKind: "workspace", ResourceName: "main",
			AgentID: "alpha", SessionID: sa.SessionID}); err != nil {
			t.Fatal(err)
		}
		_, err := b.q.LeaseAcquire(ctx, db.LeaseAcquireParams{ResourceKind: "workspace", ResourceName: "main",
			AgentID: "beta", SessionID: sb.SessionID})
		pe := pgErr(t, err)
		if pe.Code != "23505" || !strings.Contains(pe.Message, `workspace "main" is already leased to agent alpha`) {
			t.Errorf("code %s message %q", pe.Code, pe.Message)
		}
		if n, err := b.q.LeasesReleaseBySession(ctx, sa.SessionID); err != nil || n != 1 {
			t.Fatalf("released %d, %v", n, err)
		}
		if _, err := b.q.LeaseAcquire(ctx, db.LeaseAcquireParams{ResourceKind: "workspace", ResourceName: "main",
			AgentID: "beta", SessionID: sb.SessionID}); err != nil {
			t.Fatalf("lease after release: %v", err)
		}
	})

	t.Run("DoubleLeaseBypassingTheTriggerIsStillRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "alpha")
		b.agent(t, "beta")
		sa, sb := b.session(t, "alpha"), b.session(t, "beta")
		// An operator disabling the trigger still meets the unique index.
		_, err := b.pool.Exec(ctx, `
			ALTER TABLE choir_control.resource_leases DISABLE TRIGGER resource_leases_guard;
			INSERT INTO choir_control.resource_leases (resource_kind, resource_name, agent_id, session_id)
			VALUES ('dm', 'admin', 'alpha', '`+sa.SessionID.String()+`'), ('dm', 'admin', 'beta', '`+sb.SessionID.String()+`')`)
		if pe := pgErr(t, err); pe.ConstraintName != "resource_leases_one_holder" {
			t.Errorf("constraint = %s", pe.ConstraintName)
		}
	})
}

func TestEventLogInvariants(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("ContiguousChainIsAccepted", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "alpha")
		s := b.session(t, "alpha")
		evs := events(s.SessionID, 1, 10, genesis)
		if n, err := b.q.EventsAppend(ctx, evs[:4]); err != nil || n != 4 {
			t.Fatalf("append 1-4: %d, %v", n, err)
		}
		if n, err := b.q.EventsAppend(ctx, evs[4:]); err != nil || n != 6 {
			t.Fatalf("append 5-10: %d, %v", n, err)
		}
		got, err := b.q.EventsListAfter(ctx, db.EventsListAfterParams{SessionID: s.SessionID, AfterRev: 3, MaxRows: 100})
		if err != nil || len(got) != 7 || got[0].Rev != 4 {
			t.Fatalf("list after 3: %d rows, %v", len(got), err)
		}
	})

	t.Run("GapIsRejectedAndNothingIsWritten", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "alpha")
		s := b.session(t, "alpha")
		evs := events(s.SessionID, 1, 5, genesis)
		if _, err := b.q.EventsAppend(ctx, evs[:2]); err != nil {
			t.Fatal(err)
		}
		_, err := b.q.EventsAppend(ctx, evs[3:]) // rev 3 missing
		if pe := pgErr(t, err); !strings.Contains(pe.Message, "out of sequence: rev 3 is missing") {
			t.Errorf("message %q", pe.Message)
		}
		var n int
		b.pool.QueryRow(ctx, "SELECT count(*) FROM choir_control.session_events").Scan(&n)
		if n != 2 {
			t.Errorf("%d events stored, want 2", n)
		}
	})

	t.Run("FirstEventMustFollowTheSessionBase", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "alpha")
		s := b.session(t, "alpha")
		_, err := b.q.EventsAppend(ctx, events(s.SessionID, 2, 3, genesis))
		if pe := pgErr(t, err); !strings.Contains(pe.Message, "out of sequence") {
			t.Errorf("message %q", pe.Message)
		}
	})

	t.Run("BrokenHashChainIsRejected", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "alpha")
		s := b.session(t, "alpha")
		evs := events(s.SessionID, 1, 3, genesis)
		evs[2].HashPrev = chain(genesis, 99)
		_, err := b.q.EventsAppend(ctx, evs)
		if pe := pgErr(t, err); pe.ConstraintName != "session_events_chain" {
			t.Errorf("constraint %q message %q", pe.ConstraintName, pe.Message)
		}
	})

	t.Run("ResentRevisionIsRejectedByThePrimaryKey", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "alpha")
		s := b.session(t, "alpha")
		evs := events(s.SessionID, 1, 2, genesis)
		if _, err := b.q.EventsAppend(ctx, evs); err != nil {
			t.Fatal(err)
		}
		_, err := b.q.EventsAppend(ctx, evs[1:])
		if pe := pgErr(t, err); pe.Code != "23505" {
			t.Errorf("code %s", pe.Code)
		}
	})

	t.Run("EventsAreAppendOnly", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "alpha")
		s := b.session(t, "alpha")
		if _, err := b.q.EventsAppend(ctx, events(s.SessionID, 1, 1, genesis)); err != nil {
			t.Fatal(err)
		}
		for _, stmt := range []string{
			"UPDATE choir_control.session_events SET payload = '{}'",
			"DELETE FROM choir_control.session_events",
		} {
			_, err := b.pool.Exec(ctx, stmt)
			if pe := pgErr(t, err); !strings.Contains(pe.Message, "append-only") {
				t.Errorf("%s: %q", stmt, pe.Message)
			}
		}
	})

	t.Run("EndedSessionTakesNoEvents", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "alpha")
		s := b.session(t, "alpha")
		if _, err := b.q.SessionEnd(ctx, db.SessionEndParams{SessionID: s.SessionID, EndReason: "test"}); err != nil {
			t.Fatal(err)
		}
		_, err := b.q.EventsAppend(ctx, events(s.SessionID, 1, 1, genesis))
		if pe := pgErr(t, err); !strings.Contains(pe.Message, "is ended") {
			t.Errorf("message %q", pe.Message)
		}
	})

	t.Run("ResumedSessionContinuesTheChain", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		b.agent(t, "alpha")
		old := b.session(t, "alpha")
		evs := events(old.SessionID, 1, 3, genesis)
		if _, err := b.q.EventsAppend(ctx, evs); err != nil {
			t.Fatal(err)
		}
		b.q.SessionEnd(ctx, db.SessionEndParams{SessionID: old.SessionID, EndReason: "test"})
		resumed, err := b.q.SessionCreate(ctx, db.SessionCreateParams{AgentID: "alpha", LeaseTokenHash: tokenHash(t),
			ResumedFrom: &old.SessionID, BaseRev: 3, BaseHash: evs[2].Hash, ResourceBindings: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.q.EventsAppend(ctx, events(resumed.SessionID, 4, 5, evs[2].Hash)); err != nil {
			t.Fatalf("continue chain: %v", err)
		}
		if _, err := b.q.EventsAppend(ctx, events(resumed.SessionID, 6, 6, genesis)); err == nil {
			t.Fatal("a fork from genesis was accepted")
		}
	})
}

func TestProvisionAgent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()

	t.Run("IsIdempotentWithTheSameDimensions", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for range 2 {
			name, err := b.q.AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: "my-agent", Dimensions: 384})
			if err != nil || name != "choir_my_agent" {
				t.Fatalf("provision: %q, %v", name, err)
			}
		}
		var typ string
		err := b.pool.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute
			WHERE attrelid = 'choir_my_agent.memory_embeddings'::regclass AND attname = 'embedding'`).Scan(&typ)
		if err != nil || typ != "vector(384)" {
			t.Fatalf("embedding type %q, %v", typ, err)
		}
		var hnsw, gin int
		b.pool.QueryRow(ctx, `SELECT count(*) FILTER (WHERE indexdef LIKE '%USING hnsw (embedding vector_cosine_ops)%'),
			count(*) FILTER (WHERE indexdef LIKE '%USING gin (tsv)%') FROM pg_indexes WHERE schemaname = 'choir_my_agent'`).Scan(&hnsw, &gin)
		if hnsw != 2 || gin != 2 {
			t.Errorf("%d HNSW and %d GIN indexes, want 2 and 2", hnsw, gin)
		}
	})

	t.Run("OtherDimensionsAreRefusedWithAHint", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		if _, err := b.q.AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: "dims", Dimensions: 384}); err != nil {
			t.Fatal(err)
		}
		_, err := b.q.AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: "dims", Dimensions: 1536})
		pe := pgErr(t, err)
		if !strings.Contains(pe.Message, "uses vector(384), not vector(1536)") || !strings.Contains(pe.Hint, "re-embedding") {
			t.Errorf("message %q hint %q", pe.Message, pe.Hint)
		}
	})

	t.Run("BadInputIsRefused", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, c := range []struct {
			id   string
			dims int32
			want string
		}{
			{"Bad;Id", 8, "invalid agent id"},
			{"ok", 0, "invalid embedding dimensions"},
			{"ok", 2001, "1 to 2000"},
		} {
			_, err := b.q.AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: c.id, Dimensions: c.dims})
			if pe := pgErr(t, err); !strings.Contains(pe.Message, c.want) {
				t.Errorf("%s/%d: %q, want %q", c.id, c.dims, pe.Message, c.want)
			}
		}
	})

	t.Run("AgentRoleCannotTouchAnotherAgentsSchema", func(t *testing.T) {
		t.Parallel()
		b := setup(t)
		for _, id := range []string{"iso-a", "iso-b"} {
			if _, err := b.q.AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: id, Dimensions: 3}); err != nil {
				t.Fatal(err)
			}
		}
		asRole := func(stmt string) error {
			return pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, "SET LOCAL ROLE choir_iso_a; SET LOCAL search_path = choir_iso_a, public"); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, stmt)
				return err
			})
		}
		own := []string{
			"INSERT INTO knowledge_documents (key, text) VALUES ('k', 'the sky is blue')",
			"SELECT count(*) FROM memory_documents",
			"INSERT INTO knowledge_embeddings SELECT id, '[1,0,0]' FROM knowledge_documents",
		}
		for _, stmt := range own {
			if err := asRole(stmt); err != nil {
				t.Errorf("own schema: %s: %v", stmt, err)
			}
		}
		foreign := []string{
			"SELECT count(*) FROM choir_iso_b.memory_documents",
			"INSERT INTO choir_iso_b.knowledge_documents (text) VALUES ('x')",
			"DELETE FROM choir_iso_b.knowledge_documents WHERE true",
			"DROP TABLE choir_iso_a.knowledge_embeddings",
			"SELECT count(*) FROM choir_control.sessions",
		}
		for _, stmt := range foreign {
			err := asRole(stmt)
			if pe := pgErr(t, err); pe.Code != "42501" {
				t.Errorf("%s: code %s (%s), want 42501 insufficient_privilege", stmt, pe.Code, pe.Message)
			}
		}
	})
}

func TestAuditViews(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.agent(t, "alpha")
	s := b.session(t, "alpha")
	h1 := chain(genesis, 1)
	h2 := chain(h1, 2)
	h3 := chain(h2, 3)
	_, err := b.q.EventsAppend(ctx, []db.EventsAppendParams{
		{SessionID: s.SessionID, CreatedAt: time.Now(), Rev: 1, EventType: "llm_call_committed", Lane: "edge", HashPrev: genesis, Hash: h1,
			Payload: json.RawMessage(`{"model":"fast","prompt_tokens":120,"completion_tokens":30,"latency_ms":800}`)},
		{SessionID: s.SessionID, CreatedAt: time.Now(), Rev: 2, EventType: "tool_call_committed", Lane: "core:refactor", HashPrev: h1, Hash: h2,
			Payload: json.RawMessage(`{"call_id":"c1","tool":"choir.fs.read","input":{"path":"a.go"},"locks":["file:a.go:S"]}`)},
		{SessionID: s.SessionID, CreatedAt: time.Now(), Rev: 3, EventType: "tool_result_committed", Lane: "core:refactor", HashPrev: h2, Hash: h3,
			Payload: json.RawMessage(`{"call_id":"c1","tool":"choir.fs.read","status":"success","duration_ms":42}`)},
	})
	if err != nil {
		t.Fatal(err)
	}
	var tool, outcome string
	var dur int64
	if err := b.pool.QueryRow(ctx, "SELECT tool, outcome, duration_ms FROM choir_audit.tool_calls").Scan(&tool, &outcome, &dur); err != nil {
		t.Fatal(err)
	}
	if tool != "choir.fs.read" || outcome != "success" || dur != 42 {
		t.Errorf("tool_calls row = %s %s %d", tool, outcome, dur)
	}
	var model string
	var tokens int64
	if err := b.pool.QueryRow(ctx, "SELECT model, prompt_tokens + completion_tokens FROM choir_audit.llm_calls").Scan(&model, &tokens); err != nil {
		t.Fatal(err)
	}
	if model != "fast" || tokens != 150 {
		t.Errorf("llm_calls row = %s %d", model, tokens)
	}
	var n int
	b.pool.QueryRow(ctx, "SELECT count(*) FROM choir_audit.session_timeline WHERE agent_id = 'alpha'").Scan(&n)
	if n != 3 {
		t.Errorf("timeline has %d rows, want 3", n)
	}
	b.pool.Exec(ctx, "UPDATE choir_control.sessions SET acked_rev = 3 WHERE session_id = $1", s.SessionID)
	var since int64
	if err := b.pool.QueryRow(ctx, "SELECT events_since_snapshot FROM choir_audit.replication").Scan(&since); err != nil || since != 3 {
		t.Errorf("replication events_since_snapshot = %d, %v", since, err)
	}
}

func TestChainBreaksView(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t)
	b.agent(t, "alpha")
	s := b.session(t, "alpha")
	evs := events(s.SessionID, 1, 4, genesis)
	if _, err := b.q.EventsAppend(ctx, evs); err != nil {
		t.Fatal(err)
	}
	var n int
	b.pool.QueryRow(ctx, "SELECT count(*) FROM choir_audit.chain_breaks").Scan(&n)
	if n != 0 {
		t.Fatalf("%d breaks in an intact chain", n)
	}
	// Only by switching the guard off can a break exist; the view finds it.
	if _, err := b.pool.Exec(ctx, `ALTER TABLE choir_control.session_events DISABLE TRIGGER session_events_guard_append`); err != nil {
		t.Fatal(err)
	}
	_, err := b.pool.Exec(ctx, `INSERT INTO choir_control.session_events (session_id, rev, event_type, lane, hash_prev, hash)
		VALUES ($1, 6, 'user_msg', 'edge', $2, $2)`, s.SessionID, make([]byte, 32))
	if err != nil {
		t.Fatal(err)
	}
	var problem string
	if err := b.pool.QueryRow(ctx, "SELECT problem FROM choir_audit.chain_breaks").Scan(&problem); err != nil || problem != "gap after revision 4" {
		t.Fatalf("problem = %q, %v", problem, err)
	}
}
