// Command hybrid benchmarks Choir's hybrid memory search
// (queries/agent/memory.sql, MemorySearchText and MemorySearchVector, fused
// in daemon/memory) through the MemoryStore,
// as an agent's choir.memory.query runs it.
//
// It creates a fresh database on the given server, migrates it, provisions
// one agent, loads a synthetic corpus of session-memory chunks (Zipf-
// distributed words over a made-up vocabulary, embeddings clustered by
// topic; see corpus.go), builds the HNSW index and reports its build time,
// then runs semantic queries (text and vector) in four classes:
//
//	selective  a word found in 0.02% to 0.5% of the chunks
//	mid        a word found in 1% to 5%
//	broad      a word, or two, found in 40% to 60%
//	multi      a question-like query of 4 or 5 words in random order: one
//	           or two broad words, one or two mid words and one selective
//	           word, as a natural question mixes common and rare words
//
// with latency percentiles per class, and recall@10 of the HNSW scan (with
// iterative scans on) against exact search.
//
//	go run ./bench/hybrid -rows 100000
//	go run ./bench/hybrid -rows 1000000 -queries 200 -recall 100
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
	pgxvec "github.com/pgvector/pgvector-go/pgx"

	"github.com/choirhq/choir/daemon/memory"
	"github.com/choirhq/choir/rpc/admin"
	choirsql "github.com/choirhq/choir/sql"
)

type options struct {
	server, name      string
	rows, dims        int
	detail            int
	queries, recall   int
	keep, reuse       bool
	maintenanceMemory string
	seed              uint64
	candidates        int
	perTerm, recent   int
	postingBudget     int
	efSearch          int
}

func main() {
	var o options
	flag.StringVar(&o.server, "server", "postgres://postgres@127.0.0.1:55432/choir?sslmode=disable",
		"URL of a database on the server to benchmark (the benchmark creates its own database there)")
	flag.StringVar(&o.name, "db", "choir_bench_hybrid", "database to create (dropped first if it exists)")
	flag.IntVar(&o.rows, "rows", 100000, "chunks with vectors (mid_term and long_term_summary)")
	flag.IntVar(&o.dims, "dims", 384, "embedding dimensions")
	flag.IntVar(&o.detail, "detail", 0, "text-only long_term_detail chunks per summary chunk")
	flag.IntVar(&o.queries, "queries", 300, "measured queries per class")
	flag.IntVar(&o.recall, "recall", 100, "queries for recall@10 against exact search (0 skips)")
	flag.BoolVar(&o.keep, "keep", false, "keep the database afterwards")
	flag.BoolVar(&o.reuse, "reuse", false, "reuse a database kept by -keep instead of loading again")
	flag.StringVar(&o.maintenanceMemory, "maintenance-work-mem", "2GB", "maintenance_work_mem for the HNSW build")
	flag.Uint64Var(&o.seed, "seed", 1, "corpus seed")
	flag.IntVar(&o.candidates, "candidates", 0, "candidates per side (default: the store's)")
	flag.IntVar(&o.perTerm, "per-term", 0, "best matches per query word from the RUM index (default: the store's)")
	flag.IntVar(&o.postingBudget, "posting-budget", 0, "matches the query words that find matches may have in all (default: the store's)")
	flag.IntVar(&o.recent, "text-recent", 0, "newest chunks checked for full-text matches (default: the store's)")
	flag.IntVar(&o.efSearch, "ef-search", 0, "hnsw.ef_search (default: the store's)")
	flag.Parse()
	if err := run(context.Background(), o); err != nil {
		log.Fatal(err)
	}
}

const agent = "bench"

func run(ctx context.Context, o options) error {
	cfg, err := pgx.ParseConfig(o.server)
	if err != nil {
		return err
	}
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, o.name)
	c := newCorpus(o.seed, o.dims)
	if !o.reuse {
		if err := create(ctx, o, url); err != nil {
			return err
		}
	}
	pcfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return err
	}
	pcfg.AfterConnect = func(ctx context.Context, c *pgx.Conn) error { return pgxvec.RegisterTypes(ctx, c) }
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if !o.keep {
		defer drop(o)
	}
	settings(ctx, pool)

	if err := prepare(ctx, o, pool, c); err != nil {
		return err
	}
	sizes(ctx, pool)

	stub := &stubEmbedder{dims: o.dims}
	store := memory.New(memory.Options{Pool: pool, Embedder: stub, Search: memory.SearchTuning{Candidates: o.candidates,
		PerTerm: o.perTerm, PostingBudget: o.postingBudget, TextRecent: o.recent, EFSearch: o.efSearch}})
	if err := measure(ctx, o, store, stub, c); err != nil {
		return err
	}
	fmt.Printf("load average after measuring: %s\n", loadavg())
	if o.recall > 0 {
		r, err := recall(ctx, pool, store, c, o.recall)
		if err != nil {
			return err
		}
		fmt.Printf("recall@10 of the HNSW side against exact search: %.4f over %d queries\n", r, o.recall)
	}
	return nil
}

// prepare loads the corpus and builds its indexes, or, with -reuse,
// regenerates the same corpus in memory for the word statistics.
func prepare(ctx context.Context, o options, pool *pgxpool.Pool, c *corpus) error {
	if o.reuse {
		// Regenerate the same corpus in memory for the word statistics.
		for range o.rows {
			c.chunk()
		}
	} else {
		// Load without the secondary indexes, then build them: much faster
		// than maintaining them row by row.
		indexes, err := dropIndexes(ctx, pool)
		if err != nil {
			return err
		}
		t0 := time.Now()
		err = load(ctx, pool, "choir_bench", c, o.rows, o.detail, func(n int) {
			fmt.Fprintf(os.Stderr, "\rloading %d/%d", n, o.rows)
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "\n")
		fmt.Printf("load: %d chunks (+%d detail) in %s\n", o.rows, o.rows/5*o.detail, time.Since(t0).Round(time.Millisecond))
		t0 = time.Now()
		for _, def := range indexes {
			if _, err := pool.Exec(ctx, def); err != nil {
				return fmt.Errorf("%s: %w", def, err)
			}
		}
		fmt.Printf("other indexes (GIN on tsv, btrees): %s\n", time.Since(t0).Round(time.Millisecond))
		if _, err := pool.Exec(ctx, "VACUUM ANALYZE"); err != nil {
			return err
		}
		build, err := buildHNSW(ctx, pool, o.maintenanceMemory)
		if err != nil {
			return err
		}
		fmt.Printf("hnsw build (m=16, ef_construction=64, maintenance_work_mem=%s): %s\n", o.maintenanceMemory,
			build.Round(time.Millisecond))
	}
	return nil
}

// measure runs every class of query, hybrid and text-only, and prints
// their latency percentiles.
func measure(ctx context.Context, o options, store *memory.Store, stub *stubEmbedder, c *corpus) error {
	classes := queryClasses(c, o.rows, o.queries)
	// Warm the caches and the connection pool with one pass over every
	// query, then measure the classes interleaved, query by query, so that
	// a burst of other work on the machine weighs on all of them alike.
	for _, cl := range classes {
		for _, q := range cl.queries {
			stub.next = q.vec
			if _, err := store.Query(ctx, agent, q.input(true)); err != nil {
				return err
			}
		}
	}
	fmt.Printf("load average before measuring: %s\n", loadavg())
	type key struct {
		class  int
		hybrid bool
	}
	lat := map[key][]float64{}
	hits := map[key]int{}
	for i := range o.queries {
		for ci, cl := range classes {
			for _, hybrid := range []bool{true, false} {
				q := cl.queries[i]
				stub.next = q.vec
				t0 := time.Now()
				res, err := store.Query(ctx, agent, q.input(hybrid))
				if err != nil {
					return fmt.Errorf("%s: %w", cl.name, err)
				}
				k := key{ci, hybrid}
				lat[k] = append(lat[k], float64(time.Since(t0).Microseconds())/1000)
				hits[k] += res.Count
			}
		}
	}
	for ci, cl := range classes {
		for _, hybrid := range []bool{true, false} {
			k := key{ci, hybrid}
			kind := "hybrid (text + vector)"
			if !hybrid {
				kind = "full text only"
			}
			l := lat[k]
			fmt.Printf("%-9s %-22s df %-11s n=%d  p50 %6.2f ms  p95 %6.2f ms  p99 %6.2f ms  max %6.2f ms  avg hits %.1f\n",
				cl.name, kind, cl.df, len(l), pct(l, 50), pct(l, 95), pct(l, 99), pct(l, 100),
				float64(hits[k])/float64(len(l)))
		}
	}
	return nil
}

// loadavg is the machine's 1, 5 and 15 minute load averages: other work
// on a 2-core machine shows in the percentiles.
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func create(ctx context.Context, o options, url string) error {
	conn, err := pgx.Connect(ctx, o.server)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	name := pgx.Identifier{o.name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return err
	}
	plain, err := pgxpool.New(ctx, url)
	if err != nil {
		return err
	}
	defer plain.Close()
	m, err := choirsql.NewMigrator(plain, nil)
	if err != nil {
		return err
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		return err
	}
	_, err = plain.Exec(ctx, "SELECT choir_control.provision_agent($1, $2)", agent, o.dims)
	return err
}

func drop(o options) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, o.server)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{o.name}.Sanitize()+" WITH (FORCE)") //nolint:errcheck
}

func settings(ctx context.Context, pool *pgxpool.Pool) {
	var version, sb, wm, ecs, workers string
	pool.QueryRow(ctx, `SELECT current_setting('server_version'), current_setting('shared_buffers'),
		current_setting('work_mem'), current_setting('effective_cache_size'),
		current_setting('max_parallel_maintenance_workers')`).Scan(&version, &sb, &wm, &ecs, &workers)
	var pgv string
	pool.QueryRow(ctx, "SELECT extversion FROM pg_extension WHERE extname = 'vector'").Scan(&pgv)
	fmt.Printf("postgres %s, pgvector %s, shared_buffers %s, work_mem %s, effective_cache_size %s, "+
		"max_parallel_maintenance_workers %s\n", version, pgv, sb, wm, ecs, workers)
}

func sizes(ctx context.Context, pool *pgxpool.Pool) {
	rows, err := pool.Query(ctx, `SELECT c.relname, pg_size_pretty(pg_total_relation_size(c.oid))
		FROM pg_class c WHERE c.relnamespace = 'choir_bench'::regnamespace
		AND c.relname IN ('memory_documents', 'memory_embeddings', 'memory_embeddings_hnsw', 'memory_documents_tsv')
		ORDER BY 1`)
	if err != nil {
		return
	}
	var parts []string
	for rows.Next() {
		var n, s string
		rows.Scan(&n, &s)
		parts = append(parts, n+" "+s)
	}
	fmt.Printf("sizes: %s\n", strings.Join(parts, ", "))
}

// dropIndexes drops the memory tables' indexes other than primary and
// unique keys, and returns the statements that recreate all but the HNSW
// index (buildHNSW makes that one, timed).
func dropIndexes(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	rows, err := pool.Query(ctx, `SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
		FROM pg_index i JOIN pg_class c ON c.oid = i.indrelid
		WHERE c.relnamespace = 'choir_bench'::regnamespace AND c.relname IN ('memory_documents', 'memory_embeddings')
		AND NOT i.indisprimary AND NOT i.indisunique`)
	if err != nil {
		return nil, err
	}
	var names, defs []string
	for rows.Next() {
		var name, def string
		if err := rows.Scan(&name, &def); err != nil {
			return nil, err
		}
		names = append(names, name)
		if !strings.Contains(def, "USING hnsw") {
			defs = append(defs, def)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	for _, n := range names {
		if _, err := pool.Exec(ctx, "DROP INDEX "+n); err != nil {
			return nil, err
		}
	}
	return defs, nil
}

func buildHNSW(ctx context.Context, pool *pgxpool.Pool, mem string) (time.Duration, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return 0, err
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET maintenance_work_mem = "+pgx.Identifier{mem}.Sanitize()); err != nil {
		return 0, err
	}
	t0 := time.Now()
	_, err = conn.Exec(ctx, `CREATE INDEX memory_embeddings_hnsw ON choir_bench.memory_embeddings
		USING hnsw (embedding vector_cosine_ops)`)
	if err != nil {
		return 0, err
	}
	d := time.Since(t0)
	_, err = conn.Exec(ctx, "RESET maintenance_work_mem; ANALYZE choir_bench.memory_embeddings")
	return d, err
}

type benchQuery struct {
	text  string
	topic int
	vec   []float32
}

// input is the tool input: semantic mode (the stub embedder supplies the
// query's vector, as a provider would) or text mode.
func (q benchQuery) input(hybrid bool) json.RawMessage {
	mode := "text"
	if hybrid {
		mode = "semantic"
	}
	b, _ := json.Marshal(map[string]any{"store": "session", "mode": mode, "query": q.text, "limit": 10})
	return b
}

// stubEmbedder answers the next query's vector at once: the benchmark
// measures the search, not an embedding provider.
type stubEmbedder struct {
	dims int
	next []float32
}

func (s *stubEmbedder) Embed(_ context.Context, texts []string) ([][]float32, error) {
	return [][]float32{s.next}, nil
}
func (s *stubEmbedder) Model() string   { return "bench" }
func (s *stubEmbedder) Dimensions() int { return s.dims }
func (s *stubEmbedder) Status() admin.EmbeddingStatus {
	return admin.EmbeddingStatus{Provider: "bench"}
}

type class struct {
	name, df string
	queries  []benchQuery
}

// queryClasses picks words by how many chunks hold them and pairs each
// query with a topic's vector.
func queryClasses(c *corpus, rows, n int) []class {
	var selective, mid, broad []int
	for w, df := range c.df {
		f := float64(df) / float64(rows)
		switch {
		case f >= 0.0002 && f <= 0.005:
			selective = append(selective, w)
		case f >= 0.01 && f <= 0.05:
			mid = append(mid, w)
		case f >= 0.40 && f <= 0.60:
			broad = append(broad, w)
		}
	}
	var common []int // pairs of these match about half the rows
	for w, df := range c.df {
		if f := float64(df) / float64(rows); f >= 0.65 && f <= 0.78 {
			common = append(common, w)
		}
	}
	sort.Ints(selective)
	sort.Ints(mid)
	sort.Ints(broad)
	sort.Ints(common)
	mk := func(name, df string, pick func(i int) string) class {
		cl := class{name: name, df: df}
		for i := range n {
			topic := c.rng.IntN(c.topics)
			cl.queries = append(cl.queries, benchQuery{text: pick(i), topic: topic, vec: c.queryVector(topic)})
		}
		return cl
	}
	out := []class{
		mk("selective", "0.02-0.5%", func(int) string { return c.vocab[selective[c.rng.IntN(len(selective))]] }),
		mk("mid", "1-5%", func(int) string { return c.vocab[mid[c.rng.IntN(len(mid))]] }),
		mk("broad", "40-60%", func(i int) string {
			if i%2 == 0 || len(common) < 2 {
				return c.vocab[broad[c.rng.IntN(len(broad))]]
			}
			a, b := common[c.rng.IntN(len(common))], common[c.rng.IntN(len(common))]
			return c.vocab[a] + " " + c.vocab[b]
		}),
		mk("multi", "4-5 words", func(int) string { return multiWords(c, selective, mid, broad) }),
	}
	return out
}

// multiWords is a question-like query: one or two broad words, one or two
// mid words (three or four together) and one selective word, shuffled.
func multiWords(c *corpus, selective, mid, broad []int) string {
	var ws []string
	nb, nm := 1+c.rng.IntN(2), 1+c.rng.IntN(2)
	if nb+nm < 3 {
		if c.rng.IntN(2) == 0 {
			nb++
		} else {
			nm++
		}
	}
	for range nb {
		ws = append(ws, c.vocab[broad[c.rng.IntN(len(broad))]])
	}
	for range nm {
		ws = append(ws, c.vocab[mid[c.rng.IntN(len(mid))]])
	}
	ws = append(ws, c.vocab[selective[c.rng.IntN(len(selective))]])
	c.rng.Shuffle(len(ws), func(i, j int) { ws[i], ws[j] = ws[j], ws[i] })
	return strings.Join(ws, " ")
}

func pct(xs []float64, p float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if p >= 100 {
		return s[len(s)-1]
	}
	i := int(math.Ceil(p/100*float64(len(s)))) - 1
	return s[max(0, i)]
}

// recall compares the store's vector-only top 10 (HNSW with iterative
// scans) with an exact scan.
func recall(ctx context.Context, pool *pgxpool.Pool, store *memory.Store, c *corpus, n int) (float64, error) {
	found, total := 0, 0
	for range n {
		topic := c.rng.IntN(c.topics)
		vec := c.queryVector(topic)
		in, _ := json.Marshal(map[string]any{"store": "session", "mode": "semantic", "vector": vec, "limit": 10})
		res, err := store.Query(ctx, agent, in)
		if err != nil {
			return 0, err
		}
		exact := map[uuid.UUID]bool{}
		err = pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, "SET LOCAL enable_indexscan = off; SET LOCAL enable_bitmapscan = off"); err != nil {
				return err
			}
			rows, err := tx.Query(ctx, `SELECT d.id FROM choir_bench.memory_embeddings e
				JOIN choir_bench.memory_documents d ON d.id = e.document_id
				WHERE d.tier IN ('mid_term', 'long_term_summary')
				ORDER BY e.embedding <=> $1 LIMIT 10`, pgvector.NewVector(vec))
			if err != nil {
				return err
			}
			ids, err := pgx.CollectRows(rows, pgx.RowTo[uuid.UUID])
			for _, id := range ids {
				exact[id] = true
			}
			return err
		})
		if err != nil {
			return 0, err
		}
		for _, h := range res.Chunks {
			if exact[h.DocumentID] {
				found++
			}
		}
		total += len(exact)
	}
	return float64(found) / float64(total), nil
}
