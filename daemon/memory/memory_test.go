package memory_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/goleak"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/embed/embedtest"
	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/daemon/memory/pipeline"
	"github.com/choirhq/choir/db"
	"github.com/choirhq/choir/dbtest"
	"github.com/choirhq/choir/jobs"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
	"github.com/choirhq/choir/sql/seam"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/jackc/pgx/v5/pgxpool.(*Pool).backgroundHealthCheck"))
}

const dims = 64

type testBundle struct {
	pool   *pgxpool.Pool
	q      *db.Queries
	client *jobs.Client
	store  *memory.Store
	embed  *embed.Embedder
}

type options struct {
	embedder *embed.Embedder
	midTerm  int
	// readers is each agent's memory_readable_by.
	readers map[string][]string
}

func setup(t *testing.T, opts options, agents ...string) *testBundle {
	t.Helper()
	ctx := context.Background()
	if opts.embedder == nil {
		opts.embedder = embed.NewOffline(dims)
	}
	if opts.midTerm == 0 {
		opts.midTerm = 10
	}
	pool := dbtest.NewPool(t)
	client, err := jobs.NewClient(jobs.Deps{Pool: pool, Features: []jobs.Feature{
		pipeline.Workers{Pool: pool, Embedder: opts.embedder, EmbedRetryBase: 5 * time.Millisecond,
			MidTermSessions: func() int { return opts.midTerm }}}})
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
	b := &testBundle{pool: pool, q: seam.Queries(pool), client: client, embed: opts.embedder,
		store: memory.New(memory.Options{Pool: pool, Inserter: client, Embedder: opts.embedder,
			QueryEmbedTimeout: time.Second, QueryEmbedCooldown: time.Minute,
			ReadersFunc: func(target string) []string { return opts.readers[target] }})}
	for _, a := range agents {
		if _, err := b.q.AgentProvisionSchema(ctx, db.AgentProvisionSchemaParams{AgentID: a, Dimensions: dims}); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func (b *testBundle) waitIdle(t *testing.T) {
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
			t.Fatalf("%d memory jobs still pending after 60 s", left)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// session creates, fills and ends a session of agent, enqueueing its
// chunking in the ending transaction.
func (b *testBundle) session(t *testing.T, agent, summary string, events ...[2]string) uuid.UUID {
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
		rows = append(rows, db.EventsAppendParams{SessionID: s.SessionID, Rev: int64(i + 1), EventType: e[0],
			Lane: "edge", Payload: json.RawMessage(e[1]), HashPrev: prev, Hash: sum[:], CreatedAt: time.Now()})
		prev = sum[:]
	}
	if _, err := b.q.EventsAppend(ctx, rows); err != nil {
		t.Fatal(err)
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

func (b *testBundle) query(t *testing.T, caller, input string) *admin.MemoryQueryResult {
	t.Helper()
	res, err := b.store.Query(context.Background(), caller, json.RawMessage(input))
	if err != nil {
		t.Fatalf("query %s: %v", input, err)
	}
	return res
}

func (b *testBundle) upsert(t *testing.T, caller, input string) *admin.MemoryWriteResult {
	t.Helper()
	res, err := b.store.Upsert(context.Background(), caller, json.RawMessage(input))
	if err != nil {
		t.Fatalf("upsert %s: %v", input, err)
	}
	return res
}

func keys(res *admin.MemoryQueryResult) []string {
	var out []string
	for _, d := range res.Documents {
		k := d.ID.String()
		if d.Key != nil {
			k = *d.Key
		}
		out = append(out, k)
	}
	return out
}

func texts(res *admin.MemoryQueryResult) []string {
	var out []string
	for _, c := range res.Chunks {
		out = append(out, c.Text)
	}
	return out
}

// knowledgeCorpus is a small hand-made knowledge base; the ranking tests
// know which documents must come first.
var knowledgeCorpus = map[string]string{
	"user.preference.theme":  "The user prefers dark mode in every editor and terminal",
	"user.language":          "The user's favourite programming language is Go; they also write some Python",
	"ops.deploy.day":         "Deploys to production happen on Tuesdays after the standup meeting",
	"ops.db.staging":         "The staging database is Postgres 15 on host db-staging",
	"ops.db.backups":         "Production database backups run nightly at 02:00 UTC and are kept for 30 days",
	"user.food":              "Lunch orders: the user is vegetarian and dislikes mushrooms",
	"project.choir.language": "Choir is written in Go with Postgres, pgvector and River",
	"ops.oncall":             "The on-call rotation changes every Monday morning",
}

func (b *testBundle) loadCorpus(t *testing.T, agent string) {
	t.Helper()
	for k, v := range knowledgeCorpus {
		b.upsert(t, agent, fmt.Sprintf(`{"op":"insert","key":%q,"text":%q,"metadata":{"source":"test"}}`, k, v))
	}
	b.waitIdle(t)
}

func TestKnowledgeUpsert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{}, "kb")

	first := b.upsert(t, "kb", `{"op":"insert","key":"user.preference.theme","text":"The user likes light mode"}`)
	t.Run("InsertCreatesVersionOneAndQueuesEmbedding", func(t *testing.T) {
		if first.Action != "inserted" || first.Version != 1 || first.Embedding != "pending" || *first.Key != "user.preference.theme" {
			t.Errorf("result = %+v", first)
		}
	})

	t.Run("InsertWithAnExistingKeyUpdatesThatDocument", func(t *testing.T) {
		r := b.upsert(t, "kb", `{"op":"insert","key":"user.preference.theme","text":"The user likes dark mode"}`)
		if r.Action != "updated" || r.ID != first.ID || r.Version != 2 {
			t.Errorf("result = %+v", r)
		}
	})

	t.Run("SameContentChangesNothing", func(t *testing.T) {
		r := b.upsert(t, "kb", `{"op":"update","key":"user.preference.theme","text":"The user likes dark mode"}`)
		if r.Action != "unchanged" || r.Version != 2 {
			t.Errorf("result = %+v", r)
		}
	})

	t.Run("UpdateByIDMayChangeOnlyMetadata", func(t *testing.T) {
		r := b.upsert(t, "kb", fmt.Sprintf(`{"op":"update","id":%q,"metadata":{"source":"chat"}}`, first.ID))
		if r.Action != "updated" || r.Version != 3 {
			t.Errorf("result = %+v", r)
		}
		k, err := b.store.KnowledgeGet(ctx, "kb", first.ID.String())
		if err != nil || k.Text != "The user likes dark mode" || string(k.Metadata) != `{"source": "chat"}` {
			t.Errorf("document = %+v, %v", k, err)
		}
	})

	t.Run("DeleteKeepsHistoryAndRestoreUndoesIt", func(t *testing.T) {
		r := b.upsert(t, "kb", `{"op":"delete","key":"user.preference.theme"}`)
		if r.Action != "deleted" || r.Version != 4 {
			t.Errorf("result = %+v", r)
		}
		if _, err := b.store.KnowledgeGet(ctx, "kb", "user.preference.theme"); !errors.Is(err, choirsql.ErrNotFound) {
			t.Errorf("deleted document still there: %v", err)
		}
		h, err := b.store.History(ctx, "kb", "user.preference.theme")
		if err != nil {
			t.Fatal(err)
		}
		var ops []string
		for _, v := range h {
			ops = append(ops, fmt.Sprintf("%d:%s:%s", v.Version, v.Op, v.Actor))
		}
		if got := strings.Join(ops, " "); got != "4:delete:agent:kb 3:update:agent:kb 2:update:agent:kb 1:insert:agent:kb" {
			t.Errorf("history = %s", got)
		}
		r, err = b.store.KnowledgeRestore(ctx, "kb", first.ID, 1)
		if err != nil {
			t.Fatal(err)
		}
		if r.Action != "restored" || r.Version != 5 || r.ID != first.ID {
			t.Errorf("restore = %+v", r)
		}
		k, err := b.store.KnowledgeGet(ctx, "kb", "user.preference.theme")
		if err != nil || k.Text != "The user likes light mode" || k.Version != 5 {
			t.Errorf("restored document = %+v, %v", k, err)
		}
		h, _ = b.store.History(ctx, "kb", first.ID.String())
		if h[0].Op != "restore" || h[0].Actor != "operator" || !h[0].Current || h[1].Current {
			t.Errorf("history head = %+v", h[0])
		}
	})

	t.Run("UpdateOrDeleteOfAMissingDocumentIsNotFound", func(t *testing.T) {
		for _, in := range []string{`{"op":"update","key":"nope","text":"x"}`, `{"op":"delete","id":"` + uuid.NewString() + `"}`} {
			if _, err := b.store.Upsert(ctx, "kb", json.RawMessage(in)); !errors.Is(err, choirsql.ErrNotFound) {
				t.Errorf("%s: %v", in, err)
			}
		}
	})

	t.Run("EveryChangeIsEmbeddedOnce", func(t *testing.T) {
		b.waitIdle(t)
		var state, model string
		err := b.pool.QueryRow(ctx, `SELECT d.embedding_state, e.model FROM choir_kb.knowledge_documents d
			JOIN choir_kb.knowledge_embeddings e ON e.document_id = d.id WHERE d.id = $1`, first.ID).Scan(&state, &model)
		if err != nil || state != "embedded" || model != embed.OfflineModel {
			t.Errorf("embedding: %s %s %v", state, model, err)
		}
	})
}

func TestUpsertBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, options{}, "bad")
	for _, c := range []struct{ name, input, field, want string }{
		{"UnknownOp", `{"op":"merge","text":"x"}`, "$.op", `unknown op "merge"`},
		{"MissingOp", `{"text":"x"}`, "$.op", "required"},
		{"InsertWithoutText", `{"op":"insert","key":"k"}`, "$.text", "required"},
		{"EmptyText", `{"op":"insert","text":"  "}`, "$.text", "is empty"},
		{"InsertWithID", `{"op":"insert","id":"` + uuid.NewString() + `","text":"x"}`, "$.id", "not used by insert"},
		{"UpdateWithKeyAndID", `{"op":"update","key":"k","id":"` + uuid.NewString() + `","text":"x"}`, "$.key", "exactly one"},
		{"UpdateWithNothing", `{"op":"update","key":"k"}`, "$.text", "text, metadata or both"},
		{"DeleteWithText", `{"op":"delete","key":"k","text":"x"}`, "$.text", "only key or id"},
		{"MetadataNotAnObject", `{"op":"insert","text":"x","metadata":[1]}`, "$.metadata", "JSON object"},
		{"UnknownField", `{"op":"insert","text":"x","colour":"red"}`, "$.colour", "unknown"},
		{"SessionStore", `{"store":"session","op":"insert","text":"x"}`, "$.store", "knowledge store only"},
		{"BadID", `{"op":"delete","id":"nope"}`, "$.id", "UUID"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := b.store.Upsert(context.Background(), "bad", json.RawMessage(c.input))
			var ie *memory.InputError
			if !errors.As(err, &ie) || !errors.Is(err, memory.ErrInvalidInput) || ie.Field != c.field ||
				!strings.Contains(ie.Message, c.want) {
				t.Errorf("err = %v, want %s: ...%s...", err, c.field, c.want)
			}
		})
	}
}

func TestIsolation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{readers: map[string][]string{"bob": {"alice"}}}, "alice", "bob", "dave")
	b.upsert(t, "bob", `{"op":"insert","key":"secret","text":"bob keeps a diary of rocket designs"}`)
	b.waitIdle(t)

	t.Run("WriteToAnotherAgentIsRefusedByPostgres", func(t *testing.T) {
		for _, in := range []string{
			`{"op":"insert","text":"planted","target_agent":"bob"}`,
			`{"op":"update","key":"secret","text":"overwritten","target_agent":"bob"}`,
			`{"op":"delete","key":"secret","target_agent":"bob"}`,
		} {
			_, err := b.store.Upsert(ctx, "alice", json.RawMessage(in))
			var pe *pgconn.PgError
			if !errors.Is(err, memory.ErrPermission) || !errors.As(err, &pe) || pe.Code != "42501" {
				t.Errorf("%s: err = %v, want ErrPermission from Postgres 42501", in, err)
			}
		}
		k, err := b.store.KnowledgeGet(ctx, "bob", "secret")
		if err != nil || k.Text != "bob keeps a diary of rocket designs" || k.Version != 1 {
			t.Errorf("bob's document = %+v, %v", k, err)
		}
		var n int
		b.pool.QueryRow(ctx, "SELECT count(*) FROM choir_bob.knowledge_documents").Scan(&n)
		if n != 1 {
			t.Errorf("bob has %d documents, want 1", n)
		}
	})

	t.Run("ReadOfAnotherAgentNeedsItsMemoryReadableBy", func(t *testing.T) {
		res := b.query(t, "alice", `{"store":"knowledge","mode":"text","query":"rocket","target_agent":"bob"}`)
		if res.Count != 1 || res.TargetAgent != "bob" {
			t.Errorf("result = %+v", res)
		}
		// bob's memory_readable_by names alice, not dave.
		for _, store := range []string{"knowledge", "session"} {
			_, err := b.store.Query(ctx, "dave", json.RawMessage(`{"store":"`+store+`","mode":"text","query":"rocket","target_agent":"bob"}`))
			if !errors.Is(err, memory.ErrPermission) || !strings.Contains(err.Error(), "agents.bob.memory_readable_by") {
				t.Errorf("dave reads bob's %s memory: err = %v, want ErrPermission naming agents.bob.memory_readable_by", store, err)
			}
		}
	})

	t.Run("OwnReadsSeeOnlyOwnMemory", func(t *testing.T) {
		res := b.query(t, "alice", `{"store":"knowledge","mode":"text","query":"rocket"}`)
		if res.Count != 0 {
			t.Errorf("alice sees bob's knowledge: %+v", res)
		}
	})

	t.Run("UnknownAgentsAreNamed", func(t *testing.T) {
		if _, err := b.store.Query(ctx, "carol", json.RawMessage(`{"store":"knowledge","query":"x"}`)); !errors.Is(err, memory.ErrUnknownAgent) {
			t.Errorf("unknown caller: %v", err)
		}
		_, err := b.store.Query(ctx, "alice", json.RawMessage(`{"store":"knowledge","query":"x","target_agent":"carol"}`))
		if !errors.Is(err, memory.ErrUnknownAgent) || !strings.Contains(err.Error(), "carol") {
			t.Errorf("unknown target: %v", err)
		}
	})
}

func TestKnowledgeQuery(t *testing.T) {
	t.Parallel()
	b := setup(t, options{}, "kq")
	b.loadCorpus(t, "kq")

	for _, c := range []struct {
		name, input string
		wantFirst   string
		wantSearch  string
	}{
		{"TextFindsBothWords", `{"store":"knowledge","mode":"text","query":"database backups"}`, "ops.db.backups", "text"},
		{"TextPhrase", `{"store":"knowledge","mode":"text","query":"\"dark mode\""}`, "user.preference.theme", "text"},
		{"SemanticIsHybrid", `{"store":"knowledge","query":"when do production deploys happen"}`, "ops.deploy.day", "hybrid"},
		{"SemanticFindsWithoutAllWords", `{"store":"knowledge","query":"which language does the user program in"}`,
			"user.language", "hybrid"},
		{"SemanticWithMushroomsAndLunch", `{"store":"knowledge","mode":"semantic","query":"lunch mushrooms"}`, "user.food", "hybrid"},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := b.query(t, "kq", c.input)
			if got := keys(res); len(got) == 0 || got[0] != c.wantFirst || res.Search != c.wantSearch {
				t.Errorf("search %s, ranking %v, want %s first by %s", res.Search, got, c.wantFirst, c.wantSearch)
			}
			if d := res.Documents[0]; d.Score <= 0 || d.ContentHash == "" || d.Embedding != "embedded" {
				t.Errorf("top hit = %+v", d)
			}
		})
	}

	t.Run("HashFindsCurrentAndEarlierVersions", func(t *testing.T) {
		old := b.query(t, "kq", `{"store":"knowledge","mode":"text","query":"on-call rotation"}`).Documents[0]
		b.upsert(t, "kq", `{"op":"update","key":"ops.oncall","text":"The on-call rotation changes every Friday"}`)
		res := b.query(t, "kq", fmt.Sprintf(`{"store":"knowledge","mode":"hash","hash":%q}`, old.ContentHash[:12]))
		if res.Count != 1 || res.Documents[0].Version != 1 || *res.Documents[0].Current || res.Documents[0].Op != "insert" {
			t.Errorf("by old hash: %+v", res.Documents)
		}
		cur := b.query(t, "kq", `{"store":"knowledge","mode":"text","query":"Friday"}`).Documents[0]
		res = b.query(t, "kq", fmt.Sprintf(`{"store":"knowledge","mode":"hash","hash":%q}`, cur.ContentHash))
		if res.Count != 1 || res.Documents[0].Version != 2 || !*res.Documents[0].Current {
			t.Errorf("by current hash: %+v", res.Documents)
		}
	})

	t.Run("RangeListsByUpdateTimeAndKeyPrefix", func(t *testing.T) {
		res := b.query(t, "kq", `{"store":"knowledge","mode":"range","from":"2000-01-01T00:00:00Z","key_prefix":"ops.db."}`)
		got := keys(res)
		if len(got) != 2 || !strings.HasPrefix(got[0], "ops.db.") || !strings.HasPrefix(got[1], "ops.db.") {
			t.Errorf("range = %v", got)
		}
		res = b.query(t, "kq", `{"store":"knowledge","mode":"range","to":"2000-01-01T00:00:00Z"}`)
		if res.Count != 0 {
			t.Errorf("range before 2000 = %v", keys(res))
		}
	})
}

// TestHybridRanking checks the fusion arithmetic on vectors and texts made
// by hand: weighted reciprocal rank fusion, with the offline embedder's
// weights (memory.OfflineFusion), must order the documents exactly as
// computed here.
func TestHybridRanking(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{}, "rrf")
	// Query vector q = e1. Cosine distances: A 0 (rank 1), B ~0.29 (2), D 1 (3).
	// Full text "orbit": B twice (rank 1), C once with "orbits" (2), A once
	// in a long text (3). ts_rank_cd prefers more matches in less text.
	vec := func(x, y float32) string {
		v := make([]string, dims)
		for i := range v {
			v[i] = "0"
		}
		v[0], v[1] = fmt.Sprint(x), fmt.Sprint(y)
		return "[" + strings.Join(v, ",") + "]"
	}
	docs := []struct {
		name, text, vector string
	}{
		{"A", "a long note that mentions an orbit once among many other words about unrelated things entirely", vec(1, 0)},
		{"B", "orbit orbit", vec(1, 1)},
		{"C", "orbits", ""},
		{"D", "nothing relevant here", vec(0, 1)},
		{"E", "nothing", ""},
	}
	for _, d := range docs {
		var id uuid.UUID
		err := b.pool.QueryRow(ctx, `INSERT INTO choir_rrf.knowledge_documents (key, text, embedding_state)
			VALUES ($1, $2, $3) RETURNING id`, d.name, d.text, map[bool]string{true: "embedded", false: "failed"}[d.vector != ""]).Scan(&id)
		if err != nil {
			t.Fatal(err)
		}
		if d.vector != "" {
			if _, err := b.pool.Exec(ctx, "INSERT INTO choir_rrf.knowledge_embeddings VALUES ($1, $2::vector)", id, d.vector); err != nil {
				t.Fatal(err)
			}
		}
	}
	q := vec(1, 0)
	res := b.query(t, "rrf", `{"store":"knowledge","query":"orbit","vector":`+q+`}`)
	f := memory.OfflineFusion
	k, wv, wt := float64(f.FusionK), f.VectorWeight, f.TextWeight
	// A: wv/(k+1) + wt/(k+3), B: wv/(k+2) + wt/(k+1), C: wt/(k+2), D: wv/(k+3).
	want := []struct {
		key          string
		score        float64
		vrank, trank int
	}{
		{"B", wv/(k+2) + wt/(k+1), 2, 1},
		{"A", wv/(k+1) + wt/(k+3), 1, 3},
		{"C", wt / (k + 2), 0, 2},
		{"D", wv / (k + 3), 3, 0},
	}
	if res.Search != "hybrid" || len(res.Documents) != len(want) {
		t.Fatalf("search %s, ranking %v", res.Search, keys(res))
	}
	for i, w := range want {
		d := res.Documents[i]
		if *d.Key != w.key || d.VectorRank != w.vrank || d.TextRank != w.trank || fmt.Sprintf("%.6f", d.Score) != fmt.Sprintf("%.6f", w.score) {
			t.Errorf("hit %d = %s score %.6f ranks %d/%d, want %s %.6f %d/%d", i, *d.Key, d.Score, d.VectorRank, d.TextRank,
				w.key, w.score, w.vrank, w.trank)
		}
	}

	t.Run("VectorAloneRanksByDistance", func(t *testing.T) {
		res := b.query(t, "rrf", `{"store":"knowledge","vector":`+q+`}`)
		if got := strings.Join(keys(res), ""); got != "ABD" || res.Search != "vector" {
			t.Errorf("search %s, ranking %s", res.Search, got)
		}
	})

	// When one side finds nothing, the fused order is the other side's.
	t.Run("TextFindsNothingVectorOrderStays", func(t *testing.T) {
		res := b.query(t, "rrf", `{"store":"knowledge","query":"zeppelin","vector":`+q+`}`)
		if got := strings.Join(keys(res), ""); got != "ABD" || res.Search != "hybrid" {
			t.Errorf("search %s, ranking %s, want ABD as the vector side alone", res.Search, got)
		}
	})
	t.Run("VectorFindsNothingTextOrderStays", func(t *testing.T) {
		text := strings.Join(keys(b.query(t, "rrf", `{"store":"knowledge","mode":"text","query":"orbit"}`)), "")
		if _, err := b.pool.Exec(ctx, "DELETE FROM choir_rrf.knowledge_embeddings"); err != nil {
			t.Fatal(err)
		}
		res := b.query(t, "rrf", `{"store":"knowledge","query":"orbit","vector":`+q+`}`)
		if got := strings.Join(keys(res), ""); text != "BCA" || got != text {
			t.Errorf("hybrid ranking %s with no vectors, text alone %s; want both BCA", got, text)
		}
	})

	t.Run("WrongDimensionsAreRefused", func(t *testing.T) {
		_, err := b.store.Query(ctx, "rrf", json.RawMessage(`{"store":"knowledge","vector":[1,0,0]}`))
		var ie *memory.InputError
		if !errors.As(err, &ie) || ie.Field != "$.vector" || !strings.Contains(ie.Message, "3 dimensions") ||
			!strings.Contains(ie.Message, fmt.Sprint(dims)) {
			t.Errorf("err = %v", err)
		}
	})
}

var sessionEvents = [][2]string{
	{"user_msg", `{"text":"please renew the TLS certificate of the billing gateway"}`},
	{"model_output", `{"text":"I will renew the certificate with certbot"}`},
	{"tool_call_committed", `{"tool":"choir.exec","input":{"cmd":"certbot renew --cert-name billing"}}`},
	{"tool_result_committed", `{"tool":"choir.exec","status":"success","output":"certificate renewed until March"}`},
	{"user_msg", `{"text":"thanks, now book a table for dinner on Friday"}`},
	{"model_output", `{"text":"booked a table at the Italian place for 8pm"}`},
}

func TestSessionQuery(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{midTerm: 1}, "sq")
	old := b.session(t, "sq", `{"summary":"Renewed the billing TLS certificate and booked dinner.",
		"topics":["certificate renewal with certbot","restaurant booking"]}`, sessionEvents...)
	b.waitIdle(t)
	recent := b.session(t, "sq", "", [2]string{"user_msg", `{"text":"what is the capital of Australia"}`},
		[2]string{"model_output", `{"text":"Canberra is the capital of Australia"}`})
	b.waitIdle(t)

	t.Run("SemanticHitsMidTermAndLongTermSummaries", func(t *testing.T) {
		res := b.query(t, "sq", `{"store":"session","query":"certificate renewal"}`)
		if res.Search != "hybrid" || res.Count == 0 {
			t.Fatalf("result = %+v", res)
		}
		top := res.Chunks[0]
		if top.SessionID != old || top.Tier != memory.TierLongTermSummary || top.ChunkIndex != 0 || top.Score <= 0 {
			t.Errorf("top = %+v", top)
		}
		for _, c := range res.Chunks {
			if c.Tier == memory.TierLongTermDetail {
				t.Errorf("default search returned a detail chunk: %+v", c)
			}
		}
		res = b.query(t, "sq", `{"store":"session","query":"capital of Australia"}`)
		if res.Chunks[0].SessionID != recent || res.Chunks[0].Tier != memory.TierMidTerm {
			t.Errorf("recent top = %+v", res.Chunks[0])
		}
	})

	t.Run("TextModeWithTierAndSessionFilters", func(t *testing.T) {
		res := b.query(t, "sq", `{"store":"session","mode":"text","query":"capital","tiers":["mid_term"]}`)
		if res.Count != 1 || res.Chunks[0].SessionID != recent {
			t.Errorf("text = %v", texts(res))
		}
		res = b.query(t, "sq", fmt.Sprintf(`{"store":"session","mode":"text","query":"certbot","session_id":%q,
			"tiers":["long_term_detail"]}`, old))
		if res.Count != 1 || !strings.Contains(res.Chunks[0].Text, "certbot renew") {
			t.Errorf("text in detail = %v", texts(res))
		}
	})

	t.Run("SessionDetailDrillsIntoALongTermSession", func(t *testing.T) {
		res := b.query(t, "sq", fmt.Sprintf(`{"store":"session","mode":"session_detail","session_id":%q}`, old))
		if res.Count != 2 {
			t.Fatalf("detail = %v", texts(res))
		}
		for i, c := range res.Chunks {
			if c.Tier != memory.TierLongTermDetail || c.ChunkIndex != i || c.Embedding != "none" {
				t.Errorf("chunk %d = %+v", i, c)
			}
		}
		res = b.query(t, "sq", fmt.Sprintf(`{"store":"session","mode":"session_detail","session_id":%q,"query":"dinner"}`, old))
		if res.Count != 1 || res.Chunks[0].ChunkIndex != 1 || res.Chunks[0].Score <= 0 {
			t.Errorf("detail search = %+v", res.Chunks)
		}
	})

	t.Run("HashFindsTheChunkOfAnEvent", func(t *testing.T) {
		var hash []byte
		b.pool.QueryRow(ctx, "SELECT hash FROM choir_control.session_events WHERE session_id = $1 AND rev = 3", old).Scan(&hash)
		full := fmt.Sprintf("%x", hash)
		for _, h := range []string{full, full[:9], strings.ToUpper(full[:16])} {
			res := b.query(t, "sq", fmt.Sprintf(`{"store":"session","mode":"hash","hash":%q}`, h))
			if res.Count != 1 || res.Chunks[0].EventRev != 3 || res.Chunks[0].EventHash != full || res.Chunks[0].ChunkIndex != 0 {
				t.Errorf("hash %s: %+v", h, res.Chunks)
			}
		}
	})

	t.Run("RangeListsChunksByTime", func(t *testing.T) {
		res := b.query(t, "sq", `{"store":"session","mode":"range","from":"2000-01-01T00:00:00Z",
			"tiers":["mid_term","long_term_summary","long_term_detail"]}`)
		if res.Count != 4 {
			t.Errorf("range = %v", texts(res))
		}
		res = b.query(t, "sq", `{"store":"session","mode":"range","from":"2000-01-01T00:00:00Z","limit":1,"offset":1}`)
		if res.Count != 1 {
			t.Errorf("paged range = %v", texts(res))
		}
		res = b.query(t, "sq", fmt.Sprintf(`{"store":"session","mode":"range","from":%q}`,
			time.Now().Add(time.Hour).UTC().Format(time.RFC3339)))
		if res.Count != 0 {
			t.Errorf("future range = %v", texts(res))
		}
	})

	t.Run("OperatorSeesSessionsAndChunks", func(t *testing.T) {
		ss, err := b.store.Sessions(ctx, "sq", 10)
		if err != nil || len(ss) != 2 || ss[0].SessionID != recent || ss[1].Tier != "long_term" {
			t.Fatalf("sessions = %+v, %v", ss, err)
		}
		s, err := b.store.SessionGet(ctx, "sq", old)
		if err != nil || len(s.Chunks) != 3 {
			t.Fatalf("session = %+v, %v", s, err)
		}
		c, err := b.store.ChunkGet(ctx, "sq", s.Chunks[0].DocumentID)
		if err != nil || c.SessionID != old {
			t.Errorf("chunk = %+v, %v", c, err)
		}
	})

	t.Run("OperatorDeletesASessionsMemory", func(t *testing.T) {
		n, err := b.store.SessionDelete(ctx, "sq", recent)
		if err != nil || n != 1 {
			t.Fatalf("deleted %d, %v", n, err)
		}
		if _, err := b.store.SessionGet(ctx, "sq", recent); !errors.Is(err, choirsql.ErrNotFound) {
			t.Errorf("deleted session: %v", err)
		}
		if _, err := b.store.SessionDelete(ctx, "sq", recent); !errors.Is(err, choirsql.ErrNotFound) {
			t.Errorf("second delete: %v", err)
		}
		var events int
		b.pool.QueryRow(ctx, "SELECT count(*) FROM choir_control.session_events WHERE session_id = $1", recent).Scan(&events)
		if events != 2 {
			t.Errorf("the session's events were touched: %d left", events)
		}
	})
}

func TestQueryBadInput(t *testing.T) {
	t.Parallel()
	b := setup(t, options{}, "qbad")
	for _, c := range []struct{ name, input, field, want string }{
		{"UnknownStore", `{"store":"files","query":"x"}`, "$.store", `unknown store "files"`},
		{"MissingStore", `{"query":"x"}`, "$.store", "required"},
		{"WorkingStoreBelongsToTheAgent", `{"store":"working","query":"x"}`, "$.store", "inside the agent"},
		{"UnknownMode", `{"store":"session","mode":"fuzzy","query":"x"}`, "$.mode", `unknown mode "fuzzy"`},
		{"EmptyQuery", `{"store":"session","mode":"text","query":"   "}`, "$.query", "is empty"},
		{"MissingQuery", `{"store":"knowledge","mode":"text"}`, "$.query", "required"},
		{"SemanticWithoutQueryOrVector", `{"store":"knowledge"}`, "$.query", "required"},
		{"FieldOfAnotherMode", `{"store":"session","mode":"text","query":"x","hash":"abcdef12"}`, "$.hash", "not used by mode text"},
		{"SessionFieldOnKnowledge", `{"store":"knowledge","query":"x","tiers":["mid_term"]}`, "$.tiers", "session store only"},
		{"SessionDetailOnKnowledge", `{"store":"knowledge","mode":"session_detail","session_id":"` + uuid.NewString() + `"}`,
			"$.mode", "session store only"},
		{"SessionDetailWithoutSession", `{"store":"session","mode":"session_detail"}`, "$.session_id", "required"},
		{"ShortHash", `{"store":"session","mode":"hash","hash":"abc"}`, "$.hash", "8 to 64"},
		{"NotHex", `{"store":"session","mode":"hash","hash":"xyz12345"}`, "$.hash", "hexadecimal"},
		{"BadTime", `{"store":"session","mode":"range","from":"yesterday"}`, "$.from", "RFC 3339"},
		{"EmptyRange", `{"store":"session","mode":"range","from":"2026-01-02T00:00:00Z","to":"2026-01-01T00:00:00Z"}`,
			"$.to", "after from"},
		{"UnknownTier", `{"store":"session","query":"x","tiers":["short_term"]}`, "$.tiers[0]", "unknown tier"},
		{"LimitTooLarge", `{"store":"session","query":"x","limit":500}`, "$.limit", "between 1 and 50"},
		{"UnknownField", `{"store":"session","query":"x","colour":"red"}`, "$.colour", "unknown"},
		{"WrongType", `{"store":"session","query":42}`, "$.query", "string"},
		{"BadSessionID", `{"store":"session","mode":"session_detail","session_id":"s1"}`, "$.session_id", "UUID"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := b.store.Query(context.Background(), "qbad", json.RawMessage(c.input))
			var ie *memory.InputError
			if !errors.As(err, &ie) || !errors.Is(err, memory.ErrInvalidInput) || ie.Field != c.field ||
				!strings.Contains(ie.Message, c.want) {
				t.Errorf("err = %v, want %s: ...%s...", err, c.field, c.want)
			}
		})
	}
}

// TestProviderDown checks graceful degradation: with the embedding provider
// down, writes still succeed, documents end up failed after their retries
// (stored, found by full text), semantic queries answer from full text and
// say so, and the status shows it all; once the provider is back, reembed
// brings the vectors.
func TestProviderDown(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := embedtest.New(t, embedtest.Options{Dimensions: dims, Faults: embedtest.Faults{Down: true}})
	e, err := embed.NewClient(embed.ClientConfig{Provider: "fake", Endpoint: srv.URL, Model: "fake-1", Dimensions: dims},
		embed.Options{Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	b := setup(t, options{embedder: e}, "down")
	start := time.Now()
	r := b.upsert(t, "down", `{"op":"insert","key":"wifi","text":"The office wifi password is on the fridge"}`)
	if time.Since(start) > 500*time.Millisecond || r.Embedding != "pending" {
		t.Errorf("upsert took %s with the provider down: %+v", time.Since(start), r)
	}
	b.waitIdle(t)
	if n := srv.Requests(); n != memory.EmbedMaxAttempts {
		t.Errorf("%d embedding calls, want %d (one try, three retries)", n, memory.EmbedMaxAttempts)
	}

	res := b.query(t, "down", `{"store":"knowledge","query":"wifi password"}`)
	if res.Search != "text" || !strings.Contains(res.Degraded, "embedding provider unavailable") ||
		res.Count != 1 || res.Documents[0].Embedding != "failed" {
		t.Errorf("degraded query = %+v", res)
	}
	res = b.query(t, "down", `{"store":"knowledge","query":"wifi"}`)
	if !strings.Contains(res.Degraded, "failing since") || res.Count != 1 {
		t.Errorf("second query should skip the provider: %+v", res)
	}

	st, err := b.store.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Embedding == nil || st.Embedding.Offline || st.Embedding.LastError == "" || st.Failed != 1 ||
		st.Pending != 0 || !strings.Contains(st.LastError, "attempt 4 of 4") || st.LastErrorAt == nil {
		t.Errorf("status = %+v / %+v", st, st.Embedding)
	}

	srv.SetFaults(embedtest.Faults{})
	rr, err := b.store.Reembed(ctx, memory.ReembedOptions{AgentID: "down"})
	if err != nil || len(rr) != 1 || rr[0].Knowledge != 1 || rr[0].Jobs != 1 || rr[0].Resized {
		t.Fatalf("reembed = %+v, %v", rr, err)
	}
	b.waitIdle(t)
	st, _ = b.store.Status(ctx)
	if st.Failed != 0 || st.Pending != 0 {
		t.Errorf("after reembed: %+v", st)
	}
}

func TestReembedForANewModel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{}, "re")
	b.loadCorpus(t, "re")
	b.session(t, "re", "", sessionEvents...)
	b.waitIdle(t)

	t.Run("SameModelFindsNothingToDo", func(t *testing.T) {
		rr, err := b.store.Reembed(ctx, memory.ReembedOptions{})
		if err != nil || len(rr) != 1 || rr[0].Chunks+rr[0].Knowledge != 0 {
			t.Errorf("reembed = %+v, %v", rr, err)
		}
	})

	t.Run("NewDimensionsResizeAndReembedEverything", func(t *testing.T) {
		bigger := embed.NewOffline(dims * 2)
		store := memory.New(memory.Options{Pool: b.pool, Inserter: b.client, Embedder: bigger})
		rr, err := store.Reembed(ctx, memory.ReembedOptions{AgentID: "re"})
		if err != nil || len(rr) != 1 || !rr[0].Resized || rr[0].Dimensions != dims*2 || rr[0].Chunks != 2 ||
			rr[0].Knowledge != len(knowledgeCorpus) {
			t.Fatalf("reembed = %+v, %v", rr, err)
		}
		// The running workers still embed at the old size: the jobs wait
		// (snoozed) for a choird with the new configuration.
		deadline := time.Now().Add(30 * time.Second)
		for {
			var snoozed int
			b.pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = 'memory_embed'
				AND state = 'scheduled' AND scheduled_at > now() + interval '30 seconds'`).Scan(&snoozed)
			if snoozed == rr[0].Jobs {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d jobs snoozed", snoozed, rr[0].Jobs)
			}
			time.Sleep(20 * time.Millisecond)
		}
		st, err := store.Status(ctx)
		if err != nil || st.Pending != len(knowledgeCorpus)+2 || st.Failed != 0 {
			t.Errorf("status = %+v, %v", st, err)
		}
		res, err := store.Query(ctx, "re", json.RawMessage(`{"store":"knowledge","mode":"text","query":"mushrooms"}`))
		if err != nil || res.Count != 1 {
			t.Errorf("text search during the migration: %+v, %v", res, err)
		}
	})
}

// TestFiltersDoNotStarveVectorSearch puts 3000 long-term summary chunks
// right next to the query vector and 1500 mid-term chunks far from it: a
// mid-term-only search must still return a full page. The planner scans
// the HNSW index for such a filter (a third of the rows), and that scan
// alone stops after hnsw.ef_search candidates, all of them filtered out:
// it takes pgvector's iterative index scans to go on.
func TestFiltersDoNotStarveVectorSearch(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := setup(t, options{}, "starve")
	// Building the index once after loading is faster than maintaining it.
	_, err := b.pool.Exec(ctx, fmt.Sprintf(`
		DROP INDEX choir_starve.memory_embeddings_hnsw;
		WITH docs AS (
			INSERT INTO choir_starve.memory_documents (session_id, tier, chunk_index, text, embedding_state)
			SELECT gen_random_uuid(), CASE WHEN i <= 3000 THEN 'long_term_summary' ELSE 'mid_term' END, 0,
			       'chunk ' || i, 'embedded'
			  FROM generate_series(1, 4500) i
			RETURNING id, tier)
		INSERT INTO choir_starve.memory_embeddings (document_id, embedding)
		SELECT id, (SELECT array_agg(CASE WHEN j = 1 AND tier = 'long_term_summary' THEN 1
		                                  WHEN j = 2 AND tier = 'mid_term' THEN 1
		                                  ELSE random() * 0.1 END)
		              FROM generate_series(1, %d) j)::real[]::vector
		  FROM docs;
		CREATE INDEX memory_embeddings_hnsw ON choir_starve.memory_embeddings USING hnsw (embedding vector_cosine_ops)`, dims))
	if err != nil {
		t.Fatal(err)
	}
	b.pool.Exec(ctx, "ANALYZE choir_starve.memory_documents, choir_starve.memory_embeddings") //nolint:errcheck
	v := make([]string, dims)
	for i := range v {
		v[i] = "0"
	}
	v[0] = "1"
	res := b.query(t, "starve", `{"store":"session","vector":[`+strings.Join(v, ",")+`],"tiers":["mid_term"],"limit":10}`)
	if res.Count != 10 {
		t.Fatalf("%d results, want 10: the tier filter starved the vector search", res.Count)
	}
	for _, c := range res.Chunks {
		if c.Tier != memory.TierMidTerm || c.VectorRank == 0 {
			t.Errorf("hit = %+v", c)
		}
	}
}
