// Command recall measures the retrieval quality of Choir's memory search:
// recall@1, @5 and @10 of full-text (mode text), vector-only and hybrid
// search, beside a plain BM25 (k1 1.2, b 0.75, the offline embedder's
// stop words and stemming) computed in the same run over the same chunks,
// per question category, with the search latency.
//
// The question set is generated deterministically (gen.go): conversations
// of many sessions whose turns state facts about a few recurring people,
// among filler and near-miss distractors (the same kind of fact about
// another person), with one paraphrased question per fact labelled with
// the turn that answers it. Each conversation is one agent's session
// memory, one chunk per turn, embedded by the offline embedder. The chunks
// are copied into the agent's tables directly, not produced by the session
// pipeline's chunking job.
//
//	go run ./bench/recall -server "$(scripts/devpg.sh url)"
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"maps"
	"math"
	"os"
	"slices"
	"sort"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pgvector/pgvector-go"
	pgxvec "github.com/pgvector/pgvector-go/pgx"

	"github.com/choirhq/choir/daemon/embed"
	"github.com/choirhq/choir/daemon/memory"
	choirsql "github.com/choirhq/choir/sql"
)

const dims = 384

func main() {
	server := flag.String("server", "postgres://postgres@127.0.0.1:55432/choir?sslmode=disable", "a database on the server to use")
	name := flag.String("db", "choir_bench_recall", "database to create (dropped first if it exists)")
	convs := flag.Int("conversations", 10, "conversations (agents)")
	sessions := flag.Int("sessions", 25, "sessions per conversation")
	turns := flag.Int("turns", 24, "turns per session")
	nfacts := flag.Int("facts", 200, "facts (questions) per conversation")
	flag.Parse()
	if err := run(context.Background(), *server, *name, *convs, *sessions, *turns, *nfacts); err != nil {
		log.Fatal(err)
	}
}

type tally struct{ at1, at5, at10, n float64 }

func (t *tally) add(rank int) {
	t.n++
	if rank >= 1 && rank <= 1 {
		t.at1++
	}
	if rank >= 1 && rank <= 5 {
		t.at5++
	}
	if rank >= 1 && rank <= 10 {
		t.at10++
	}
}

func (t tally) String() string {
	return fmt.Sprintf("R@1 %.3f  R@5 %.3f  R@10 %.3f", t.at1/t.n, t.at5/t.n, t.at10/t.n)
}

var methods = []string{"bm25", "text", "vector", "hybrid"}

func run(ctx context.Context, server, name string, convs, sessions, turns, nfacts int) error {
	cfg, err := pgx.ParseConfig(server)
	if err != nil {
		return err
	}
	url := fmt.Sprintf("postgres://%s@%s:%d/%s?sslmode=disable", cfg.User, cfg.Host, cfg.Port, name)
	if err := create(ctx, server, name, url, convs); err != nil {
		return err
	}
	defer drop(server, name)
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
	store := memory.New(memory.Options{Pool: pool, Embedder: embed.NewOffline(dims)})
	res := map[string]map[string]*tally{}
	lat := map[string][]float64{}
	for _, m := range methods {
		res[m] = map[string]*tally{"all": {}}
	}
	nq, nt := 0, 0
	for ci := range convs {
		c := generate(uint64(ci+1), sessions, turns, nfacts)
		agent := fmt.Sprintf("recall%d", ci)
		ids, err := load(ctx, pool, agent, c)
		if err != nil {
			return err
		}
		bm := newBM25(c.turns)
		nt += len(c.turns)
		for _, q := range c.questions {
			nq++
			want := ids[q.evidence]
			ranks := map[string]int{"bm25": bm.rank(q.text, q.evidence)}
			for _, m := range methods[1:] {
				start := time.Now()
				r, err := search(ctx, store, agent, m, q.text, want)
				if err != nil {
					return fmt.Errorf("%s %q: %w", m, q.text, err)
				}
				lat[m] = append(lat[m], float64(time.Since(start).Microseconds())/1000)
				ranks[m] = r
			}
			for _, m := range methods {
				if res[m][q.category] == nil {
					res[m][q.category] = &tally{}
				}
				res[m][q.category].add(ranks[m])
				res[m]["all"].add(ranks[m])
			}
		}
	}
	report(res, lat, convs, nt, nq)
	return nil
}

func report(res map[string]map[string]*tally, lat map[string][]float64, convs, nt, nq int) {
	la, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("%d conversations, %d turns (chunks), %d questions; offline embedder %s, %d dims; load average %s",
		convs, nt, nq, embed.OfflineModel, dims, la)
	var cats []string
	for c := range res["bm25"] {
		cats = append(cats, c)
	}
	sort.Strings(cats)
	for _, c := range cats {
		fmt.Printf("-- %s (%d questions)\n", c, int(res["bm25"][c].n))
		for _, m := range methods {
			fmt.Printf("   %-7s %s\n", m, res[m][c])
		}
	}
	for _, m := range methods[1:] {
		xs := lat[m]
		slices.Sort(xs)
		fmt.Printf("latency %-7s p50 %6.2f ms  p95 %6.2f ms\n", m, xs[len(xs)/2], xs[len(xs)*95/100])
	}
}

// search runs one question in mode m and returns the 1-based rank of the
// chunk want among the top 10 (0: not found).
func search(ctx context.Context, store *memory.Store, agent, m, text string, want uuid.UUID) (int, error) {
	in := map[string]any{"store": "session", "target_agent": agent, "limit": 10, "query": text}
	switch m {
	case "text":
		in["mode"] = "text"
	case "vector":
		delete(in, "query")
		in["vector"] = embed.LexicalVector(text, dims)
	}
	b, _ := json.Marshal(in)
	r, err := store.QueryAsOperator(ctx, b)
	if err != nil {
		return 0, err
	}
	for i, h := range r.Chunks {
		if h.DocumentID == want {
			return i + 1, nil
		}
	}
	return 0, nil
}

func load(ctx context.Context, pool *pgxpool.Pool, agent string, c conversation) ([]uuid.UUID, error) {
	ids := make([]uuid.UUID, len(c.turns))
	sess := map[int]uuid.UUID{}
	base := time.Now().Add(-time.Duration(len(c.turns)) * time.Minute)
	var docs, embs [][]any
	for i, t := range c.turns {
		if _, ok := sess[t.session]; !ok {
			sess[t.session] = uuid.New()
		}
		ids[i] = uuid.New()
		at := base.Add(time.Duration(i) * time.Minute)
		docs = append(docs, []any{ids[i], sess[t.session], "mid_term", int32(t.index), t.text, at, at, at, "embedded", "{}"})
		embs = append(embs, []any{ids[i], pgvector.NewVector(embed.LexicalVector(t.text, dims)), embed.OfflineModel})
	}
	schema := "choir_" + agent
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SET LOCAL search_path = "+pgx.Identifier{schema}.Sanitize()+", public"); err != nil {
			return err
		}
		if _, err := tx.CopyFrom(ctx, pgx.Identifier{"memory_documents"}, []string{"id", "session_id", "tier",
			"chunk_index", "text", "created_at", "started_at", "ended_at", "embedding_state", "metadata"},
			pgx.CopyFromRows(docs)); err != nil {
			return err
		}
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"memory_embeddings"}, []string{"document_id", "embedding", "model"},
			pgx.CopyFromRows(embs))
		return err
	})
	if err != nil {
		return nil, err
	}
	_, err = pool.Exec(ctx, "ANALYZE "+pgx.Identifier{schema, "memory_documents"}.Sanitize())
	return ids, err
}

func create(ctx context.Context, server, name, url string, convs int) error {
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	id := pgx.Identifier{name}.Sanitize()
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+id+" WITH (FORCE)"); err != nil {
		return err
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+id); err != nil {
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
	for ci := range convs {
		if _, err := plain.Exec(ctx, "SELECT choir_control.provision_agent($1, $2)", fmt.Sprintf("recall%d", ci), dims); err != nil {
			return err
		}
	}
	return nil
}

func drop(server, name string) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, server)
	if err != nil {
		return
	}
	defer conn.Close(ctx)
	conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)") //nolint:errcheck
}

// bm25 is a plain BM25 over the turns, with the offline embedder's words.
type bm25 struct {
	docs [][]string
	df   map[string]int
	avg  float64
}

func newBM25(turns []turn) *bm25 {
	b := &bm25{df: map[string]int{}}
	var total float64
	for _, t := range turns {
		w := embed.Words(t.text)
		b.docs = append(b.docs, w)
		total += float64(len(w))
		seen := map[string]bool{}
		for _, x := range w {
			if !seen[x] {
				seen[x] = true
				b.df[x]++
			}
		}
	}
	b.avg = total / float64(len(turns))
	return b
}

// rank returns the 1-based rank of document want for the query among the
// top 10 by BM25 (0: not found; ties broken by document order).
func (b *bm25) rank(q string, want int) int {
	const k1, bb = 1.2, 0.75
	terms := map[string]bool{}
	for _, w := range embed.Words(q) {
		terms[w] = true
	}
	// Summed in a fixed order, so that ties break the same in every run.
	order := slices.Sorted(maps.Keys(terms))
	n := float64(len(b.docs))
	scores := make([]float64, len(b.docs))
	for i, d := range b.docs {
		tf := map[string]float64{}
		for _, w := range d {
			if terms[w] {
				tf[w]++
			}
		}
		for _, w := range order {
			f := tf[w]
			if f == 0 {
				continue
			}
			idf := math.Log(1 + (n-float64(b.df[w])+0.5)/(float64(b.df[w])+0.5))
			scores[i] += idf * f * (k1 + 1) / (f + k1*(1-bb+bb*float64(len(d))/b.avg))
		}
	}
	if scores[want] == 0 {
		return 0
	}
	better := 0
	for i, s := range scores {
		if s > scores[want] || (s == scores[want] && i < want) {
			better++
		}
	}
	if better >= 10 {
		return 0
	}
	return better + 1
}
