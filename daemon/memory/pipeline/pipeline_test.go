package pipeline_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"

	"github.com/choirhq/choir/config"
	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/embed/embedtest"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/daemon/memory/pipeline"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/sql/seam"
)

// memBundle is a migrated database with River's memory workers running.
type memBundle struct {
	pool   *pgxpool.Pool
	q      *db.Queries
	client *jobs.Client
}

const testDims = 32

func setupMemory(t *testing.T, e pipeline.Embedder, midTerm int) *memBundle {
	t.Helper()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	client, err := jobs.NewClient(jobs.Deps{Pool: pool, Features: []jobs.Feature{
		pipeline.Workers{Pool: pool, Embedder: e, EmbedRetryBase: 10 * time.Millisecond,
			MidTermSessions: func() int { return midTerm }}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := client.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		client.Stop(ctx) //nolint:errcheck
	})
	return &memBundle{pool: pool, q: seam.Queries(pool), client: client}
}

func (b *memBundle) provision(t *testing.T, agent string) {
	t.Helper()
	if _, err := b.q.AgentProvisionSchema(context.Background(), db.AgentProvisionSchemaParams{AgentID: agent,
		Dimensions: testDims}); err != nil {
		t.Fatal(err)
	}
}

type ev struct {
	typ, lane, payload string
}

// session creates a session of agent with events, sets its summary, and
// ends it, enqueueing its chunking in the same transaction, as choird's
// graceful stop does.
func (b *memBundle) session(t *testing.T, agent string, summary string, events ...ev) uuid.UUID {
	t.Helper()
	ctx := context.Background()
	h := sha256.Sum256([]byte(uuid.NewString()))
	s, err := b.q.SessionCreate(ctx, db.SessionCreateParams{AgentID: agent, LeaseTokenHash: h[:],
		BaseHash: make([]byte, 32), ResourceBindings: json.RawMessage(`{}`)})
	if err != nil {
		t.Fatal(err)
	}
	prev := make([]byte, 32)
	var rows []db.EventsAppendParams
	for i, e := range events {
		sum := sha256.Sum256(fmt.Appendf(append([]byte(nil), prev...), "%s %d", s.SessionID, i))
		lane := e.lane
		if lane == "" {
			lane = "edge"
		}
		rows = append(rows, db.EventsAppendParams{SessionID: s.SessionID, Rev: int64(i + 1), EventType: e.typ,
			Lane: lane, Payload: json.RawMessage(e.payload), HashPrev: prev, Hash: sum[:], CreatedAt: time.Now()})
		prev = sum[:]
	}
	if len(rows) > 0 {
		if _, err := b.q.EventsAppend(ctx, rows); err != nil {
			t.Fatal(err)
		}
	}
	err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
		if summary != "" {
			if _, err := tx.Exec(ctx, "UPDATE choir_control.sessions SET summary = $2 WHERE session_id = $1",
				s.SessionID, summary); err != nil {
				return err
			}
		}
		if _, err := seam.Queries(tx).SessionEnd(ctx, db.SessionEndParams{SessionID: s.SessionID, EndReason: "test"}); err != nil {
			return err
		}
		return memory.InsertChunkSessionTx(ctx, b.client, tx, s.SessionID)
	})
	if err != nil {
		t.Fatal(err)
	}
	return s.SessionID
}

// waitIdle waits until no memory job is left to run.
func (b *memBundle) waitIdle(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		var left int
		if err := b.pool.QueryRow(context.Background(), `SELECT count(*) FROM river_job
			WHERE kind LIKE 'memory\_%' AND state NOT IN ('completed', 'cancelled', 'discarded')`).Scan(&left); err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			rows, _ := b.pool.Query(context.Background(), `SELECT kind, state, attempt, errors::text, args::text FROM river_job
				WHERE kind LIKE 'memory\_%' AND state NOT IN ('completed', 'cancelled', 'discarded') LIMIT 5`)
			for rows.Next() {
				v, _ := rows.Values()
				t.Log(v...)
			}
			t.Fatalf("%d memory jobs still pending after 60 s", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// snapshot renders an agent's memory tables, so runs can be compared.
func (b *memBundle) snapshot(t *testing.T, agent string) string {
	t.Helper()
	schema := "choir_" + strings.ReplaceAll(agent, "-", "_")
	var out strings.Builder
	for _, q := range []string{
		"SELECT id, session_id, tier, chunk_index, text, metadata, embedding_state FROM %s.memory_documents ORDER BY id",
		"SELECT document_id, model, embedding::text FROM %s.memory_embeddings ORDER BY document_id",
		"SELECT session_id, tier, chunk_count, summary_chunks, promoted_at IS NOT NULL FROM %s.memory_sessions ORDER BY session_id",
		"SELECT encode(hash, 'hex'), rev, document_id FROM %s.memory_event_refs ORDER BY hash",
	} {
		rows, err := b.pool.Query(context.Background(), fmt.Sprintf(q, schema))
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			vals, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			fmt.Fprintln(&out, vals...)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return out.String()
}

func (b *memBundle) count(t *testing.T, query string, args ...any) int {
	t.Helper()
	var n int
	if err := b.pool.QueryRow(context.Background(), query, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
	return n
}

var deploySession = []ev{
	{"user_msg", "", `{"text":"please deploy the billing service to staging"}`},
	{"llm_call_committed", "", `{"model":"fast","prompt_tokens":10}`},
	{"model_output", "", `{"text":"I will start a core job for the deployment"}`},
	{"core_started", "core:deploy", `{"name":"deploy","brief":"deploy billing to staging"}`},
	{"skill_transition_committed", "core:deploy", `{"skill":"deploy","from":"start","to":"plan"}`},
	{"tool_call_requested", "core:deploy", `{"call_id":"c1","tool":"choir.exec"}`},
	{"tool_call_committed", "core:deploy", `{"call_id":"c1","tool":"choir.exec","input":{"cmd":"make deploy ENV=staging"}}`},
	{"user_msg", "", `{"text":"how is it going?"}`},
	{"tool_result_committed", "core:deploy", `{"call_id":"c1","tool":"choir.exec","status":"success","output":"billing deployed to staging in 42s"}`},
	{"skill_transition_committed", "core:deploy", `{"skill":"deploy","from":"plan","to":"verify"}`},
	{"core_stopped", "core:deploy", `{"name":"deploy","reason":"done"}`},
	{"model_output", "", `{"text":"the deployment finished"}`},
}

const deploySummary = `{"summary":"Deployed the billing service to staging.",
	"decisions":["staging first, production on Tuesday"],
	"topics":[{"topic":"deployment","detail":"make deploy ENV=staging took 42s"}]}`

func TestChunkEvents(t *testing.T) {
	t.Parallel()
	var events []db.ChoirControlSessionEvent
	for i, e := range deploySession {
		lane := e.lane
		if lane == "" {
			lane = "edge"
		}
		events = append(events, db.ChoirControlSessionEvent{Rev: int64(i + 1), EventType: e.typ, Lane: lane,
			Payload: json.RawMessage(e.payload), Hash: []byte{byte(i)}, CreatedAt: time.Unix(int64(i), 0)})
	}
	chunks := pipeline.ChunkEvents(events)
	var got []string
	for _, c := range chunks {
		var m struct {
			Lane     string
			FirstRev int64 `json:"first_rev"`
			LastRev  int64 `json:"last_rev"`
			Boundary string
		}
		json.Unmarshal(c.Metadata, &m)
		got = append(got, fmt.Sprintf("%d %s %d-%d %s: %s", c.Index, m.Lane, m.FirstRev, m.LastRev, m.Boundary,
			strings.ReplaceAll(c.Text, "\n", " | ")))
	}
	want := []string{
		"0 edge 1-3 turn: user: please deploy the billing service to staging | assistant: I will start a core job for the deployment",
		`1 core:deploy 4-4 phase: core job deploy started: deploy billing to staging`,
		`2 core:deploy 5-9 phase: skill deploy -> plan | tool call choir.exec {"cmd":"make deploy ENV=staging"} | tool result choir.exec [success]: billing deployed to staging in 42s`,
		"3 edge 8-12 turn: user: how is it going? | assistant: the deployment finished",
		"4 core:deploy 10-11 phase: skill deploy -> verify | core job deploy stopped: done",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("chunks:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	covered := 0
	for _, c := range chunks {
		covered += len(c.Revs)
	}
	if covered != len(events) {
		t.Errorf("chunks cover %d events, want all %d (silent ones included)", covered, len(events))
	}

	t.Run("LongLanesSplitBySizeButKeepToolResultsWithTheirCall", func(t *testing.T) {
		t.Parallel()
		var evs []db.ChoirControlSessionEvent
		big := strings.Repeat("x", 700)
		for i := range 20 {
			typ, payload := "tool_call_committed", `{"tool":"t","input":"`+big+`"}`
			if i%2 == 1 {
				typ, payload = "tool_result_committed", `{"tool":"t","output":"`+big+`"}`
			}
			evs = append(evs, db.ChoirControlSessionEvent{Rev: int64(i + 1), EventType: typ, Lane: "core:x",
				Payload: json.RawMessage(payload), Hash: []byte{byte(i)}})
		}
		chunks := pipeline.ChunkEvents(evs)
		if len(chunks) < 4 {
			t.Fatalf("%d chunks, want the lane split by size", len(chunks))
		}
		for _, c := range chunks {
			if c.Revs[0]%2 == 0 {
				t.Errorf("chunk %d starts at rev %d, a tool result separated from its call", c.Index, c.Revs[0])
			}
			if len(c.Text) > pipeline.ChunkTargetBytes+2*pipeline.EventMaxBytes {
				t.Errorf("chunk %d has %d bytes", c.Index, len(c.Text))
			}
		}
	})
}

func TestSummaryChunks(t *testing.T) {
	t.Parallel()
	at := time.Unix(0, 0)
	for _, c := range []struct {
		name, summary string
		want          []string
	}{
		{"Object", deploySummary, []string{"Session summary: Deployed the billing service to staging.\n" +
			"decisions: staging first, production on Tuesday\ntopics: detail: make deploy ENV=staging took 42s; topic: deployment"}},
		{"PlainString", `"first part\n\nsecond part"`, []string{"first part\nsecond part"}},
		{"Missing", ``, nil},
		{"Null", `null`, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, ch := range pipeline.SummaryChunks(json.RawMessage(c.summary), at, at) {
				got = append(got, ch.Text)
			}
			if strings.Join(got, "\n---\n") != strings.Join(c.want, "\n---\n") {
				t.Errorf("got %q, want %q", got, c.want)
			}
		})
	}
}

func TestSessionPipeline(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setupMemory(t, embed.NewOffline(testDims), 1)
	b.provision(t, "pipe")

	first := b.session(t, "pipe", deploySummary, deploySession...)
	b.waitIdle(t)

	t.Run("EndedSessionIsChunkedAndEmbedded", func(t *testing.T) {
		if n := b.count(t, "SELECT count(*) FROM choir_pipe.memory_documents WHERE session_id = $1 AND tier = 'mid_term'", first); n != 5 {
			t.Errorf("%d mid-term chunks, want 5", n)
		}
		if n := b.count(t, "SELECT count(*) FROM choir_pipe.memory_embeddings"); n != 5 {
			t.Errorf("%d vectors, want 5", n)
		}
		if n := b.count(t, "SELECT count(*) FROM choir_pipe.memory_documents WHERE embedding_state <> 'embedded'"); n != 0 {
			t.Errorf("%d chunks not embedded", n)
		}
		if n := b.count(t, "SELECT count(*) FROM choir_pipe.memory_event_refs WHERE session_id = $1", first); n != len(deploySession) {
			t.Errorf("%d event references, want %d", n, len(deploySession))
		}
	})

	t.Run("ChunkingTwiceChangesNothing", func(t *testing.T) {
		before := b.snapshot(t, "pipe")
		// Unique opts would skip a plain re-insert while the first job's
		// row is kept: remove it to run the job a second time.
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "DELETE FROM river_job WHERE kind = 'memory_chunk_session'"); err != nil {
				return err
			}
			return memory.InsertChunkSessionTx(ctx, b.client, tx, first)
		})
		if err != nil {
			t.Fatal(err)
		}
		b.waitIdle(t)
		if after := b.snapshot(t, "pipe"); after != before {
			t.Errorf("memory changed:\n%s\nwas:\n%s", after, before)
		}
	})

	second := b.session(t, "pipe", "", ev{"user_msg", "", `{"text":"what is the weather"}`},
		ev{"model_output", "", `{"text":"sunny"}`})
	b.waitIdle(t)

	t.Run("OlderSessionIsPromoted", func(t *testing.T) {
		var tier string
		b.pool.QueryRow(ctx, "SELECT tier FROM choir_pipe.memory_sessions WHERE session_id = $1", first).Scan(&tier)
		if tier != "long_term" {
			t.Fatalf("first session tier %q, want long_term", tier)
		}
		if n := b.count(t, `SELECT count(*) FROM choir_pipe.memory_documents
			WHERE session_id = $1 AND tier = 'long_term_detail' AND embedding_state = 'none'`, first); n != 5 {
			t.Errorf("%d detail chunks, want 5", n)
		}
		if n := b.count(t, `SELECT count(*) FROM choir_pipe.memory_embeddings e JOIN choir_pipe.memory_documents d
			ON d.id = e.document_id WHERE d.session_id = $1 AND d.tier = 'long_term_detail'`, first); n != 0 {
			t.Errorf("%d detail chunks kept vectors", n)
		}
		if n := b.count(t, `SELECT count(*) FROM choir_pipe.memory_documents d JOIN choir_pipe.memory_embeddings e
			ON e.document_id = d.id WHERE d.session_id = $1 AND d.tier = 'long_term_summary'`, first); n != 1 {
			t.Errorf("%d embedded summary chunks, want 1", n)
		}
		b.pool.QueryRow(ctx, "SELECT tier FROM choir_pipe.memory_sessions WHERE session_id = $1", second).Scan(&tier)
		if tier != "mid_term" {
			t.Errorf("newest session tier %q, want mid_term", tier)
		}
	})

	t.Run("PromotingTwiceChangesNothing", func(t *testing.T) {
		before := b.snapshot(t, "pipe")
		err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.client.InsertManyTx(ctx, tx, append(memory.EmbedJobs("pipe", memory.EmbedStoreMemory, allIDs(t, b, "pipe")),
				riverParams(memory.PromoteArgs{AgentID: "pipe"}), riverParams(memory.PromoteArgs{AgentID: "pipe"})))
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		b.waitIdle(t)
		if after := b.snapshot(t, "pipe"); after != before {
			t.Errorf("memory changed:\n%s\nwas:\n%s", after, before)
		}
	})

	t.Run("SessionWithoutSummaryIsPromotedWithoutSummaryChunks", func(t *testing.T) {
		b.session(t, "pipe", "", ev{"user_msg", "", `{"text":"third"}`})
		b.waitIdle(t)
		var tier string
		var summaries int
		b.pool.QueryRow(ctx, "SELECT tier, summary_chunks FROM choir_pipe.memory_sessions WHERE session_id = $1",
			second).Scan(&tier, &summaries)
		if tier != "long_term" || summaries != 0 {
			t.Errorf("second session: tier %q, %d summary chunks", tier, summaries)
		}
	})

	t.Run("LiveSessionIsNotChunked", func(t *testing.T) {
		h := sha256.Sum256([]byte("live"))
		s, err := b.q.SessionCreate(ctx, db.SessionCreateParams{AgentID: "pipe", LeaseTokenHash: h[:],
			BaseHash: make([]byte, 32), ResourceBindings: json.RawMessage(`{}`)})
		if err != nil {
			t.Fatal(err)
		}
		err = pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
			_, err := b.client.InsertTx(ctx, tx, memory.ChunkSessionArgs{SessionID: s.SessionID},
				&river.InsertOpts{MaxAttempts: 1})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		b.waitIdle(t)
		if n := b.count(t, "SELECT count(*) FROM choir_pipe.memory_sessions WHERE session_id = $1", s.SessionID); n != 0 {
			t.Error("a live session was chunked")
		}
		var errs string
		b.pool.QueryRow(ctx, "SELECT errors::text FROM river_job WHERE args->>'session_id' = $1", s.SessionID.String()).Scan(&errs)
		if !strings.Contains(errs, "only ended sessions are chunked") {
			t.Errorf("job errors = %s", errs)
		}
	})
}

func riverParams(args river.JobArgs) river.InsertManyParams {
	return river.InsertManyParams{Args: args}
}

func allIDs(t *testing.T, b *memBundle, agent string) []uuid.UUID {
	t.Helper()
	rows, err := b.pool.Query(context.Background(),
		"SELECT id FROM choir_"+agent+".memory_documents ORDER BY id")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestEmbeddingUnderFaults runs the embedding pipeline against a provider
// that answers 20% of calls with 429, 10% with a 5xx and lets 5% time out,
// and checks that every chunk ends embedded or, after its last retry,
// marked failed (and findable by text), that no chunk is ever sent again
// once embedded, and that no call carries more than 32 texts.
func TestEmbeddingUnderFaults(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := embedtest.New(t, embedtest.Options{Dimensions: testDims, Seed: 42, Hang: 5 * time.Second,
		Faults: embedtest.Faults{RateLimit: 0.20, ServerError: 0.10, Timeout: 0.05}})
	e, err := embed.NewClient(embed.ClientConfig{Provider: "fake", Endpoint: srv.URL, Model: "fake-model",
		Dimensions: testDims}, embed.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b := setupMemory(t, e, 100)
	b.provision(t, "faulty")

	// 40 sessions of 35 turns make 1400 chunks with distinct texts, embedded
	// by 80 jobs of 32 and 3 texts.
	const sessions, turns = 40, 35
	for i := range sessions {
		var evs []ev
		for j := range turns {
			evs = append(evs, ev{"user_msg", "", fmt.Sprintf(`{"text":"question %d of session %d"}`, j, i)},
				ev{"model_output", "", fmt.Sprintf(`{"text":"answer %d of session %d"}`, j, i)})
		}
		b.session(t, "faulty", "", evs...)
	}
	b.waitIdle(t)

	total := b.count(t, "SELECT count(*) FROM choir_faulty.memory_documents")
	if total != sessions*turns {
		t.Fatalf("%d chunks, want %d: chunks were lost", total, sessions*turns)
	}
	embedded := b.count(t, "SELECT count(*) FROM choir_faulty.memory_documents WHERE embedding_state = 'embedded'")
	failed := b.count(t, "SELECT count(*) FROM choir_faulty.memory_documents WHERE embedding_state = 'failed'")
	vectors := b.count(t, "SELECT count(*) FROM choir_faulty.memory_embeddings")
	t.Logf("%d requests, failures %v: %d embedded, %d failed after 4 attempts", srv.Requests(), srv.Failures(), embedded, failed)
	if embedded+failed != total {
		t.Errorf("%d embedded + %d failed != %d chunks: some are neither", embedded, failed, total)
	}
	if vectors != embedded {
		t.Errorf("%d vectors for %d embedded chunks", vectors, embedded)
	}
	f := srv.Failures()
	if f[429] == 0 || f[0] == 0 || f[500]+f[502]+f[503] == 0 {
		t.Errorf("the fault mix was not exercised: %v", f)
	}
	if n := srv.Oversized(); n != 0 {
		t.Errorf("%d calls carried more than %d texts", n, embed.MaxBatch)
	}
	if !slices.Contains(srv.Batches(), embed.MaxBatch) {
		t.Errorf("no call carried a full batch of %d: %v", embed.MaxBatch, srv.Batches())
	}

	// No chunk is embedded twice: once its vector is stored (created_at,
	// the storing transaction's start), its text is never sent again. (A
	// text can be served twice without that: a response written just as
	// the client's deadline passed never reaches the pipeline.)
	stored := map[string]time.Time{}
	states := map[string]string{}
	rows, err := b.pool.Query(ctx, `SELECT d.text, d.embedding_state, e.created_at FROM choir_faulty.memory_documents d
		LEFT JOIN choir_faulty.memory_embeddings e ON e.document_id = d.id`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var text, state string
		var at *time.Time
		if err := rows.Scan(&text, &state, &at); err != nil {
			t.Fatal(err)
		}
		states[text] = state
		if at != nil {
			stored[text] = *at
		}
	}
	again := 0
	for text, times := range srv.ServedAt() {
		if states[text] == "" {
			t.Errorf("served a text that is no chunk: %.60q", text)
		}
		if len(times) > 1 {
			again++
		}
		for _, at := range times {
			if s, ok := stored[text]; ok && at.After(s) {
				t.Errorf("text sent again after its vector was stored at %s: %.60q", s, text)
			}
		}
	}
	t.Logf("%d texts were served more than once (responses that missed the client's deadline)", again)

	if failed > 0 {
		t.Run("FailedChunksRecordTheirErrorAndCanBeRetried", func(t *testing.T) {
			var text string
			b.pool.QueryRow(ctx, `SELECT text FROM choir_faulty.memory_documents WHERE embedding_state = 'failed'
				AND embedding_error LIKE 'attempt 4 of 4: %' LIMIT 1`).Scan(&text)
			if text == "" {
				t.Fatal("no failed chunk records its last attempt's error")
			}
			srv.SetFaults(embedtest.Faults{})
			var ids []uuid.UUID
			err := pgx.BeginFunc(ctx, b.pool, func(tx pgx.Tx) error {
				rows, err := tx.Query(ctx, `UPDATE choir_faulty.memory_documents SET embedding_state = 'pending'
					WHERE embedding_state = 'failed' RETURNING id`)
				if err != nil {
					return err
				}
				if ids, err = pgx.CollectRows(rows, pgx.RowTo[uuid.UUID]); err != nil {
					return err
				}
				return memory.InsertEmbedTx(ctx, b.client, tx, "faulty", memory.EmbedStoreMemory, ids)
			})
			if err != nil {
				t.Fatal(err)
			}
			b.waitIdle(t)
			if n := b.count(t, "SELECT count(*) FROM choir_faulty.memory_embeddings"); n != total {
				t.Errorf("%d vectors after the retry, want %d", n, total)
			}
		})
	}
}

func TestEmbeddingRefusedForGoodIsNotRetried(t *testing.T) {
	t.Parallel()
	srv := embedtest.New(t, embedtest.Options{Dimensions: testDims, APIKey: "right"})
	e, err := embed.New(config.Embedding{Provider: "fake", Endpoint: srv.URL, Model: "m", Dimensions: testDims,
		Secret: "key"}, config.Secrets{"key": "wrong"}, embed.Options{})
	if err != nil {
		t.Fatal(err)
	}
	b := setupMemory(t, e, 10)
	b.provision(t, "refused")
	b.session(t, "refused", "", deploySession...)
	b.waitIdle(t)
	if n := srv.Requests(); n != 1 {
		t.Errorf("%d requests, want 1: a 401 is not worth retrying", n)
	}
	if n := b.count(t, `SELECT count(*) FROM choir_refused.memory_documents
		WHERE embedding_state = 'failed' AND embedding_error LIKE '%401%invalid api key%'`); n != 5 {
		t.Errorf("%d chunks failed with the provider's answer, want 5", n)
	}
}
